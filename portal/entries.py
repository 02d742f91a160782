"""One result as the portal's index holds it (portal/index.py), the orders the index keeps, and
the edits of a sorted list an updated snapshot makes. Pure; no I/O.

An entry holds its envelope pre-serialised (without ``details``, shared per check and served
only in the detail view) in the compact form of portal/compact.py: segments shared between the
results of a Run, key strings interned.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar

from portal.compact import Packer, Segments, intern, join, joined
from portal.pagination import Key
from shared.envelope import State, ValidationResult

T = TypeVar("T")
FLEET_ORDER: Mapping[str, int] = {
    state.value: rank
    for rank, state in enumerate([State.FAILED, State.UNKNOWN, State.STALE, State.RUNNING, State.PASSED])
}
"""The fleet view lists a check's Nodes worst first: what needs attention comes first."""


@dataclass(frozen=True, slots=True)
class Entry:
    key: Key
    state: str
    created: str
    """The Run's creation time (RFC 3339), to find the newest result of a Node's check."""
    segments: Segments
    """The envelope as JSON, without ``details``, in segments (portal/compact.py)."""
    details_schema: str | None
    details: Any

    @property
    def summary(self) -> bytes:
        """The envelope as JSON, without ``details``."""
        return join(self.segments)

    @property
    def check_type(self) -> str:
        return f"{self.key[2]}/{self.key[3]}"


def entry_of(result: ValidationResult, packer: Packer | None = None) -> Entry:
    """One result's entry; results packed by the same ``packer`` (one Run's) share segments."""
    summary = result.model_dump_json(by_alias=True, exclude={"details"}).encode()
    key = (result.scope.workspace, result.target.name, result.check.profile, result.check.name, result.run.uid)
    return Entry(
        key=(intern(key[0]), intern(key[1]), intern(key[2]), intern(key[3]), intern(key[4])),
        state=result.state.value,
        created=intern(result.run.created.isoformat()) if result.run.created else "",
        segments=(packer or Packer()).pack(summary),
        details_schema=result.details_schema,
        details=result.details,
    )


def render_page(entries: list[Entry]) -> bytes:
    return b"[" + joined(e.segments for e in entries) + b"]"


KEY = attrgetter("key")


def fleet_rank(entry: Entry) -> tuple[int, str]:
    """The fleet view's order: worst state first, then by Node name."""
    return FLEET_ORDER[entry.state], entry.key[1]


def age(entry: Entry) -> tuple[str, str]:
    """A result's place among its Node's results of one check: the Run's creation, then its uid."""
    return entry.created, entry.key[4]


def newer(entry: Entry, than: Entry) -> bool:
    """Whether ``entry`` comes from a later Run: by the Run's creation, then its uid."""
    return age(entry) > age(than)


def counts(entries: Iterable[Entry]) -> dict[str, int]:
    """How many of ``entries`` are in each state (every state named, 0 where none)."""
    found = {state.value: 0 for state in State}
    for entry in entries:
        found[entry.state] += 1
    return found


Newest = Entry | tuple[Entry, ...]
"""One Node's newest results of one check type, one per workspace, newest first: the entry itself
where there is one (most Nodes: no tuple for each of 1.5 million pairs)."""


def candidates(value: Newest) -> tuple[Entry, ...]:
    return (value,) if isinstance(value, Entry) else value


def top(value: Newest) -> Entry:
    """The newest of them."""
    return value if isinstance(value, Entry) else value[0]


def kept(found: Sequence[Entry]) -> Newest:
    return found[0] if len(found) == 1 else tuple(found)


def newest_each(entries: Iterable[Entry]) -> tuple[Entry, ...]:
    """Of one Node's results of one check type: the newest of each workspace, newest first."""
    held: dict[str, Entry] = {}
    for entry in entries:
        kept = held.get(entry.key[0])
        if kept is None or newer(entry, kept):
            held[entry.key[0]] = entry
    return tuple(sorted(held.values(), key=age, reverse=True))


def edited(old: Sequence[T], drops: Sequence[int], inserts: Sequence[tuple[int, T]]) -> list[T]:
    """``old`` without the items at ``drops`` and with each ``(position, item)`` of ``inserts``
    placed before ``old[position]`` (in the order given), in one pass of slices: a sorted list of
    1.5 million results edited for one Run's results without moving the rest one by one."""
    dropped = set(drops)
    cuts = sorted(dropped | {position for position, _ in inserts})
    placed = iter(inserts)
    pending = next(placed, None)
    out: list[T] = []
    start = 0
    for cut in cuts:
        out.extend(old[start:cut])
        while pending is not None and pending[0] == cut:
            out.append(pending[1])
            pending = next(placed, None)
        start = cut + 1 if cut in dropped else cut
    out.extend(old[start:])
    while pending is not None:  # past the end
        out.append(pending[1])
        pending = next(placed, None)
    return out
