"""The runner's typed result: the contract between a backend Pod and the adapter.

The runner writes exactly one ``RunnerResult`` as canonical JSON to the container's
termination message (at most ``MAX_RESULT_BYTES``, the kubelet's 4 KiB cap). The adapter
parses it with ``parse_result``, which refuses anything that is not exactly one such
document: bad UTF-8, bad JSON, duplicate keys, unknown fields, an unsupported schema, or
too many bytes. Pure; no I/O.

Measurements protocol (documented for script authors): a script may write one JSON object
to the file named by ``$SIGNAL_MEASUREMENTS_FILE``: at most ``MAX_MEASUREMENTS`` entries,
names matching ``MEASUREMENT_NAME_PATTERN``, values numbers, booleans or strings of at
most ``MAX_MEASUREMENT_TEXT`` characters. A file that breaks these rules makes the result
Inconclusive (never Pass).

Exit-code protocol (documented for script authors): 0 is Pass; ``INCONCLUSIVE_EXIT_CODE`` (3)
says "my evidence is insufficient" and makes the result Inconclusive (retried like any other
Inconclusive, shown as Unknown); any other non-zero exit is Fail, which is reserved for a
proven fault.
"""

import json
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import Field, ValidationError, field_validator

from shared.digests import canonical_json
from shared.meta import Digest, StrictModel
from shared.run import Verdict

RESULT_SCHEMA: Final = "projectsignal.dev/runner-result/v1"
INCONCLUSIVE_EXIT_CODE: Final = 3
"""A script's (or an MPI rank's) exit code for "my evidence is insufficient": Inconclusive."""
MAX_RESULT_BYTES: Final = 4096
MAX_MEASUREMENTS: Final = 16
MAX_MEASUREMENT_TEXT: Final = 128
MEASUREMENT_NAME_PATTERN: Final = r"^[a-z][a-z0-9_.-]{0,62}$"
MAX_TAIL_CHARS: Final = 1024
MAX_RANKS: Final = 64

MeasurementValue = bool | int | float | Annotated[str, Field(max_length=MAX_MEASUREMENT_TEXT)]
Measurements = dict[str, MeasurementValue]


class ResultError(ValueError):
    """A termination message or measurements file is not a valid runner document."""


class RunnerIdentity(StrictModel):
    """Who the runner ran as, from the downward API and its arguments."""

    participant_index: Annotated[int, Field(ge=0, lt=64)] | None = None
    """The participant this Pod serves; None for an MPI launcher."""
    node_name: Annotated[str, Field(max_length=253)]
    pod_name: Annotated[str, Field(max_length=253)]
    pod_uid: Annotated[str, Field(max_length=64)]
    role: Literal["pod", "launcher"] = "pod"


class Output(StrictModel):
    """A stream's full sha256 and byte count, and a bounded tail."""

    digest: Digest
    bytes: Annotated[int, Field(ge=0)]
    tail: Annotated[str, Field(max_length=MAX_TAIL_CHARS)] = ""


@dataclass(frozen=True)
class RankResult:
    """One MPI rank as the launcher saw it (``host``: short host name, first DNS label)."""

    rank: int
    host: str
    exit_code: int


def short_host(name: str) -> str:
    return name.split(".", 1)[0]


class LauncherReport(StrictModel):
    """What the MPI launcher proves about the ranks it started, compact enough for 64 ranks
    in a termination message: short host names in hostfile order, stored as a common prefix
    and suffixes, and one ``[rank, host index, exit code]`` row per rank that reported
    (host index -1: a host not in the hostfile)."""

    world_size: Annotated[int, Field(ge=0, le=MAX_RANKS)]
    host_prefix: Annotated[str, Field(max_length=253)] = ""
    host_suffixes: Annotated[list[Annotated[str, Field(max_length=253)]], Field(max_length=MAX_RANKS)]
    rank_table: Annotated[list[tuple[int, int, int]], Field(max_length=MAX_RANKS)]
    mpirun_exit_code: int | None = None

    @property
    def hosts(self) -> list[str]:
        return [self.host_prefix + s for s in self.host_suffixes]

    @property
    def ranks(self) -> list[RankResult]:
        hosts = self.hosts
        return [RankResult(r, hosts[i] if 0 <= i < len(hosts) else "", code) for r, i, code in self.rank_table]

    @classmethod
    def build(
        cls, hosts: list[str], ranks: list[RankResult], *, world_size: int, mpirun_exit_code: int | None
    ) -> "LauncherReport":
        names = [short_host(h) for h in hosts]
        prefix = os.path.commonprefix(names) if len(names) > 1 else ""  # noqa: RUF071 - characters intended
        table = [
            (r.rank, names.index(short_host(r.host)) if short_host(r.host) in names else -1, r.exit_code) for r in ranks
        ]
        return cls(
            world_size=world_size,
            host_prefix=prefix,
            host_suffixes=[n[len(prefix) :] for n in names],
            rank_table=table,
            mpirun_exit_code=mpirun_exit_code,
        )


class RunnerResult(StrictModel):
    """One runner's typed, versioned result."""

    schema_: Annotated[Literal["projectsignal.dev/runner-result/v1"], Field(alias="schema")] = RESULT_SCHEMA
    verdict: Verdict
    reason: Annotated[str, Field(max_length=256)]
    identity: RunnerIdentity
    exit_code: int | None = None
    signal: int | None = None
    measurements: Annotated[Measurements, Field(max_length=MAX_MEASUREMENTS)] = Field(default_factory=dict)
    stdout: Output | None = None
    stderr: Output | None = None
    started_at: datetime
    finished_at: datetime
    launcher: LauncherReport | None = None

    @field_validator("measurements")
    @classmethod
    def _names(cls, value: Measurements) -> Measurements:
        return validate_measurements(value)


def validate_measurements(value: Any) -> Measurements:
    """Check a measurements object against the documented protocol; raise ResultError."""
    if not isinstance(value, dict):
        raise ResultError("measurements must be a JSON object")
    if len(value) > MAX_MEASUREMENTS:
        raise ResultError(f"at most {MAX_MEASUREMENTS} measurements are allowed, got {len(value)}")
    for name, item in value.items():
        if not isinstance(name, str) or not re.fullmatch(MEASUREMENT_NAME_PATTERN, name):
            raise ResultError(f"measurement name {name!r} must match {MEASUREMENT_NAME_PATTERN}")
        if isinstance(item, float) and not math.isfinite(item):
            raise ResultError(f"measurement {name!r} is not a finite number")
        if isinstance(item, str) and len(item) > MAX_MEASUREMENT_TEXT:
            raise ResultError(f"measurement {name!r} is longer than {MAX_MEASUREMENT_TEXT} characters")
        if not isinstance(item, bool | int | float | str):
            raise ResultError(f"measurement {name!r} must be a number, a boolean or a string")
    return value


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ResultError(f"duplicate key {key!r}")
        result[key] = value
    return result


def strict_json(payload: bytes, limit: int) -> Any:
    """Parse exactly one JSON value of at most ``limit`` bytes, refusing duplicate keys,
    NaN/Infinity and trailing data; raise ResultError."""
    if len(payload) > limit:
        raise ResultError(f"{len(payload)} bytes exceeds the limit of {limit}")
    try:
        text = payload.decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise ResultError(f"not UTF-8: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ResultError(f"not a single JSON document: {exc.msg} at position {exc.pos}") from exc


def _reject_constant(name: str) -> Any:
    raise ResultError(f"non-standard JSON constant {name}")


def parse_result(message: str | bytes) -> RunnerResult:
    """Parse a termination message into a RunnerResult; raise ResultError with the reason."""
    payload = message.encode("utf-8") if isinstance(message, str) else message
    document = strict_json(payload, MAX_RESULT_BYTES)
    if not isinstance(document, dict):
        raise ResultError("the result must be a JSON object")
    if document.get("schema") != RESULT_SCHEMA:
        raise ResultError(f"unsupported result schema {document.get('schema')!r}; expected {RESULT_SCHEMA}")
    try:
        return RunnerResult.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ResultError(f"invalid result at {where or 'top level'}: {first['msg']}") from exc


def render_result(result: RunnerResult) -> bytes:
    """Canonical JSON of a result (what the runner writes)."""
    return canonical_json(result.model_dump(mode="json", by_alias=True, exclude_none=True))
