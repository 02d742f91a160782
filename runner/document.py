"""The runner's result as plain data, and the exact bytes it writes to the termination message.

The runner imports no pydantic (it starts once per check participant and per MPI rank, and
pydantic's import alone costs far more than its work), so it builds its result from these
named tuples (lighter to import and to define than dataclasses) and renders them itself:
canonical JSON (shared/canonical.py), camelCase keys, no nulls, UTC times as pydantic writes
them. The bytes are those of ``shared.result.render_result`` for the same values
(tests/unit/test_runner_wire.py holds the two to it), and the adapter still parses them
strictly with ``shared.result.parse_result``. The runner keeps its values within the models'
limits: reasons cut to ``MAX_REASON_CHARS`` (runner/report.py), the identity checked
(runner/main.py), tails bounded (runner/execute.py), measurements validated. Pure.
"""

from __future__ import annotations

from shared.canonical import canonical_json
from shared.result_wire import (
    RESULT_SCHEMA,
    MeasurementMap,
    RankResult,
    RankRow,
    host_layout,
    layout_hosts,
    layout_ranks,
)
from shared.timestamps import datetime, utc_text

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Literal, NamedTuple
else:
    from shared.lighttuple import NamedTuple


class Identity(NamedTuple):
    """Who the runner ran as (``RunnerIdentity`` on the wire)."""

    node_name: str
    pod_name: str
    pod_uid: str
    participant_index: int | None = None
    role: Literal["pod", "launcher"] = "pod"


class Stream(NamedTuple):
    """A captured stream's sha256, byte count and bounded tail (``Output`` on the wire)."""

    digest: str
    bytes: int
    tail: str = ""


class Artifact(NamedTuple):
    """One artifact the runner stored (``ArtifactReport`` on the wire): its name (``stdout``,
    ``stderr``, ``out/<file>``), the sha256 and size of exactly the bytes it sent."""

    name: str
    digest: str
    bytes: int


class Launcher(NamedTuple):
    """What the MPI launcher proves about its ranks (``LauncherReport`` on the wire): short
    host names in hostfile order as a common prefix and suffixes, one row per rank."""

    world_size: int
    host_prefix: str
    host_suffixes: tuple[str, ...]
    rank_table: tuple[RankRow, ...]
    mpirun_exit_code: int | None = None

    @classmethod
    def build(
        cls, hosts: Sequence[str], ranks: Sequence[RankResult], *, world_size: int, mpirun_exit_code: int | None
    ) -> Launcher:
        prefix, suffixes, table = host_layout(hosts, ranks)
        return cls(world_size, prefix, tuple(suffixes), tuple(table), mpirun_exit_code)

    @property
    def hosts(self) -> list[str]:
        return layout_hosts(self.host_prefix, self.host_suffixes)

    @property
    def ranks(self) -> list[RankResult]:
        return layout_ranks(self.hosts, self.rank_table)


class Result(NamedTuple):
    """One runner's result (``RunnerResult`` on the wire; its schema is added when rendered)."""

    verdict: str
    """Its name (shared/verdict_names.py); a ``Verdict`` member is one."""
    reason: str
    identity: Identity
    started_at: datetime
    finished_at: datetime
    measurements: MeasurementMap
    """The script's measurements (always written, ``{}`` when none)."""
    exit_code: int | None = None
    signal: int | None = None
    stdout: Stream | None = None
    stderr: Stream | None = None
    launcher: Launcher | None = None
    script_digest: str | None = None
    """``sha256:<hex>`` of the script the runner executed (``runner.execute.script_digest``)."""
    artifacts: tuple[Artifact, ...] | None = None
    """What it stored in the artifact store (runner/artifacts.py); None without a store."""


def camel(name: str) -> str:
    """``snake_case`` to ``camelCase``, as the models' ``alias_generator`` spells fields."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def wire(value: Any) -> Any:
    """JSON-ready data of a result or any part of it: camelCase keys, None fields left out."""
    if isinstance(value, Identity | Stream | Launcher | Result | Artifact):
        return {camel(name): wire(item) for name, item in value._asdict().items() if item is not None}
    if isinstance(value, datetime):
        return utc_text(value)
    if isinstance(value, dict):
        return {key: wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [wire(item) for item in value]
    return value


def render(result: Result) -> bytes:
    """The canonical JSON the runner writes to its termination message."""
    return canonical_json({"schema": RESULT_SCHEMA, **wire(result)})
