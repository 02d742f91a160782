"""The runner's typed result: the contract between a backend Pod and the adapter.

The runner writes exactly one ``RunnerResult`` as canonical JSON to the container's
termination message (at most ``MAX_RESULT_BYTES``, the kubelet's 4 KiB cap). The adapter
parses it with ``parse_result``, which refuses anything that is not exactly one such
document: bad UTF-8, bad JSON, duplicate keys, unknown fields, an unsupported schema, or
too many bytes. Pure; no I/O.

The limits, the strict JSON parser, the measurements and exit-code protocols (documented
for script authors) and the launcher report's host layout are in ``shared.result_wire``,
which needs no pydantic: the runner builds the same document from it with the standard
library alone (runner/document.py), and imports nothing of this module.
"""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator

from shared.artifacts import ArtifactReports
from shared.digests import canonical_json
from shared.limits import MAX_PARTICIPANTS, MAX_RANKS
from shared.meta import Digest, StrictModel
from shared.result_wire import (
    INCONCLUSIVE_EXIT_CODE,
    MAX_MEASUREMENT_TEXT,
    MAX_MEASUREMENTS,
    MAX_NAME_CHARS,
    MAX_REASON_CHARS,
    MAX_RESULT_BYTES,
    MAX_TAIL_CHARS,
    MAX_UID_CHARS,
    MEASUREMENT_NAME_PATTERN,
    RESULT_SCHEMA,
    RankResult,
    RankRow,
    ResultError,
    host_layout,
    layout_hosts,
    layout_ranks,
    short_host,
    strict_json,
    validate_measurements,
)
from shared.verdict import Verdict

__all__ = [
    "INCONCLUSIVE_EXIT_CODE",
    "MAX_MEASUREMENTS",
    "MAX_MEASUREMENT_TEXT",
    "MAX_RANKS",
    "MAX_RESULT_BYTES",
    "MAX_TAIL_CHARS",
    "MEASUREMENT_NAME_PATTERN",
    "RESULT_SCHEMA",
    "LauncherReport",
    "MeasurementValue",
    "Measurements",
    "Output",
    "RankResult",
    "ResultError",
    "RunnerIdentity",
    "RunnerResult",
    "parse_result",
    "render_result",
    "short_host",
    "strict_json",
    "validate_measurements",
]

MeasurementValue = bool | int | float | Annotated[str, Field(max_length=MAX_MEASUREMENT_TEXT)]
Measurements = dict[str, MeasurementValue]


class RunnerIdentity(StrictModel):
    """Who the runner ran as, from the downward API and its arguments."""

    participant_index: Annotated[int, Field(ge=0, lt=MAX_PARTICIPANTS)] | None = None
    """The participant this Pod serves; None for an MPI launcher."""
    node_name: Annotated[str, Field(max_length=MAX_NAME_CHARS)]
    pod_name: Annotated[str, Field(max_length=MAX_NAME_CHARS)]
    pod_uid: Annotated[str, Field(max_length=MAX_UID_CHARS)]
    role: Literal["pod", "launcher"] = "pod"


class Output(StrictModel):
    """A stream's full sha256 and byte count, and a bounded tail."""

    digest: Digest
    bytes: Annotated[int, Field(ge=0)]
    tail: Annotated[str, Field(max_length=MAX_TAIL_CHARS)] = ""


class LauncherReport(StrictModel):
    """What the MPI launcher proves about the ranks it started, compact enough for 64 ranks
    in a termination message: short host names in hostfile order, stored as a common prefix
    and suffixes, and one ``[rank, host index, exit code]`` row per rank that reported
    (host index -1: a host not in the hostfile)."""

    world_size: Annotated[int, Field(ge=0, le=MAX_RANKS)]
    host_prefix: Annotated[str, Field(max_length=MAX_NAME_CHARS)] = ""
    host_suffixes: Annotated[list[Annotated[str, Field(max_length=MAX_NAME_CHARS)]], Field(max_length=MAX_RANKS)]
    rank_table: Annotated[list[RankRow], Field(max_length=MAX_RANKS)]
    mpirun_exit_code: int | None = None

    @property
    def hosts(self) -> list[str]:
        return layout_hosts(self.host_prefix, self.host_suffixes)

    @property
    def ranks(self) -> list[RankResult]:
        return layout_ranks(self.hosts, self.rank_table)

    @classmethod
    def build(
        cls, hosts: list[str], ranks: list[RankResult], *, world_size: int, mpirun_exit_code: int | None
    ) -> "LauncherReport":
        prefix, suffixes, table = host_layout(hosts, ranks)
        return cls(
            world_size=world_size,
            host_prefix=prefix,
            host_suffixes=suffixes,
            rank_table=table,
            mpirun_exit_code=mpirun_exit_code,
        )


class RunnerResult(StrictModel):
    """One runner's typed, versioned result."""

    schema_: Annotated[Literal["projectsignal.dev/runner-result/v1"], Field(alias="schema")] = RESULT_SCHEMA
    verdict: Verdict
    reason: Annotated[str, Field(max_length=MAX_REASON_CHARS)]
    identity: RunnerIdentity
    exit_code: int | None = None
    signal: int | None = None
    measurements: Annotated[Measurements, Field(max_length=MAX_MEASUREMENTS)] = Field(default_factory=dict)
    stdout: Output | None = None
    stderr: Output | None = None
    started_at: datetime
    finished_at: datetime
    launcher: LauncherReport | None = None
    script_digest: Digest | None = None
    """sha256 of the script the runner executed (a Pod check's runner, an MPI launcher); the
    adapter and acceptance compare it with the Run's snapshot (shared/snapshot.py)."""
    artifacts: ArtifactReports | None = None
    """What the runner stored in the artifact store (shared/artifact_wire.py); None without one."""

    @field_validator("measurements")
    @classmethod
    def _names(cls, value: Measurements) -> Measurements:
        return validate_measurements(value)


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
