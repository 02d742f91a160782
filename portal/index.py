"""The portal's in-memory index of classified results: an immutable snapshot, rebuilt by
portal/sources.py and swapped atomically, queried by portal/api.py. Pure; no I/O.

Results are kept sorted by their key (workspace, Node, profile, check, Run uid); each entry
holds its envelope pre-serialised (without ``details``, which is shared per check and only
served in the detail view), so a page is a slice and a join. Visibility (the caller's
authorized workspaces) is applied to every query; nothing outside it is counted or hinted.
"""

import bisect
import heapq
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from portal.pagination import Key
from shared.envelope import State, ValidationResult

Visible = Callable[[str], bool]
FLEET_ORDER: Mapping[str, int] = {
    state.value: rank
    for rank, state in enumerate([State.FAILED, State.UNKNOWN, State.STALE, State.RUNNING, State.PASSED])
}
"""The fleet view lists a check's Nodes worst first: what needs attention comes first."""
FLEET_CACHE = 8
"""Fleet answers kept per snapshot (one per distinct set of visible workspaces; ~2 MiB each at
10 checks x 200 rows)."""


@dataclass(frozen=True, slots=True)
class Entry:
    key: Key
    state: str
    created: str
    """The Run's creation time (RFC 3339), to find the newest result of a Node's check."""
    summary: bytes
    """The envelope as JSON, without ``details``."""
    details_schema: str | None
    details: Any

    @property
    def check_type(self) -> str:
        return f"{self.key[2]}/{self.key[3]}"


def entry_of(result: ValidationResult) -> Entry:
    summary = result.model_dump_json(by_alias=True, exclude={"details"})
    return Entry(
        key=(result.scope.workspace, result.target.name, result.check.profile, result.check.name, result.run.uid),
        state=result.state.value,
        created=result.run.created.isoformat() if result.run.created else "",
        summary=summary.encode(),
        details_schema=result.details_schema,
        details=result.details,
    )


@dataclass(frozen=True)
class RegisteredCheck:
    """A check a profile registers (profile x check)."""

    profile: str
    name: str
    index: int
    backend: str
    profile_generation: int
    source_digest: str
    freshness_seconds: int

    @property
    def id(self) -> str:
        return f"{self.profile}/{self.name}"

    def to_json(self, registered: bool = True) -> dict[str, Any]:
        return {
            "id": self.id,
            "profile": self.profile,
            "name": self.name,
            "index": self.index,
            "backend": self.backend,
            "profileGeneration": self.profile_generation,
            "sourceDigest": self.source_digest,
            "freshnessSeconds": self.freshness_seconds,
            "registered": registered,
        }


@dataclass(frozen=True)
class Filters:
    node: str | None = None
    check: str | None = None
    """``profile/check``, or a bare check name."""
    state: State | None = None
    workspace: str | None = None

    def match(self, entry: Entry) -> bool:
        key = entry.key
        if self.node is not None and key[1] != self.node:
            return False
        if self.workspace is not None and key[0] != self.workspace:
            return False
        if self.state is not None and entry.state != self.state.value:
            return False
        return self.check is None or self.check in {entry.check_type, key[3]}


@dataclass
class Index:
    entries: list[Entry]
    checks: list[RegisteredCheck] = field(default_factory=list)
    node_uids: Mapping[str, str] = field(default_factory=dict)
    built_at: datetime | None = None

    def __post_init__(self) -> None:
        self.entries = sorted(self.entries, key=lambda e: e.key)
        self._keys = [e.key for e in self.entries]
        self._by_node: dict[str, list[Entry]] = {}
        for entry in self.entries:
            self._by_node.setdefault(entry.key[1], []).append(entry)
        self.workspaces = frozenset(e.key[0] for e in self.entries)
        self._types: dict[str, set[tuple[str, str]]] = {}
        self._spans: dict[str, tuple[int, int]] = {}
        for position, entry in enumerate(self.entries):
            self._types.setdefault(entry.key[0], set()).add((entry.key[2], entry.key[3]))
            first, _ = self._spans.get(entry.key[0], (position, position))
            self._spans[entry.key[0]] = (first, position + 1)
        self._fleets: dict[tuple[frozenset[str], int], bytes] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def counts(self) -> dict[str, int]:
        counts = {state.value: 0 for state in State}
        for entry in self.entries:
            counts[entry.state] += 1
        return counts

    def page(self, filters: Filters, visible: Visible, *, after: Key | None, limit: int) -> tuple[list[Entry], bool]:
        """Up to ``limit`` visible matching entries strictly after ``after``; and whether more follow."""
        if filters.node is not None:
            pool: list[Entry] = self._by_node.get(filters.node, [])
            start = bisect.bisect_right([e.key for e in pool], after) if after else 0
        else:
            pool = self.entries
            start = bisect.bisect_right(self._keys, after) if after else 0
            if filters.workspace is not None:
                start = max(start, bisect.bisect_left(self._keys, (filters.workspace,)))
        found: list[Entry] = []
        for entry in _from(pool, start):
            if filters.workspace is not None and entry.key[0] > filters.workspace:
                break
            if filters.match(entry) and visible(entry.key[0]):
                if len(found) == limit:
                    return found, True
                found.append(entry)
        return found, False

    def get(self, key: Key) -> Entry | None:
        position = bisect.bisect_left(self._keys, key)
        if position < len(self._keys) and self._keys[position] == key:
            return self.entries[position]
        return None

    def node_entries(self, node: str, visible: Visible) -> list[Entry]:
        return [e for e in self._by_node.get(node, []) if visible(e.key[0])]

    def node_summary(self, node: str, visible: Visible) -> dict[str, Any] | None:
        """Per check type, the state of the newest visible result; registered checks without
        a visible result are Unknown. None when the Node is unknown and has no visible result."""
        mine = self.node_entries(node, visible)
        if not mine and node not in self.node_uids:
            return None
        newest: dict[str, Entry] = {}
        for entry in mine:
            held = newest.get(entry.check_type)
            if held is None or _newer(entry, held):
                newest[entry.check_type] = entry
        rows = []
        registered = {c.id for c in self.checks}
        for check_id in sorted(registered | set(newest)):
            latest = newest.get(check_id)
            profile, name = check_id.split("/", 1)
            row: dict[str, Any] = {"check": check_id, "profile": profile, "name": name}
            row["registered"] = check_id in registered
            if latest is None:
                row.update(state=State.UNKNOWN.value, reason="NoResult", resultId=None, result=None)
            else:
                summary = json.loads(latest.summary)
                row.update(state=latest.state, reason=summary["reason"], resultId=summary["id"], result=summary)
            rows.append(row)
        return {"node": node, "uid": self.node_uids.get(node), "checks": rows}

    def fleet(self, visible: Visible, rows: int) -> bytes:
        """The fleet view as a JSON array, one item per visible check (as ``visible_checks``):
        per Node, its newest visible result of that check; how many Nodes are in each state;
        and the first ``rows`` of those results, worst state first, then by Node name. One
        answer from one snapshot, cached per set of visible workspaces: a dashboard polls it
        instead of walking every page of results."""
        seen = frozenset(w for w in self.workspaces if visible(w))
        cached = self._fleets.get((seen, rows))
        if cached is not None:
            return cached
        newest: dict[str, dict[str, Entry]] = {}
        totals: dict[str, int] = {}
        for workspace in seen:
            first, end = self._spans[workspace]
            for position in range(first, end):
                entry = self.entries[position]
                check_type = entry.check_type
                totals[check_type] = totals.get(check_type, 0) + 1
                per_node = newest.setdefault(check_type, {})
                held = per_node.get(entry.key[1])
                if held is None or _newer(entry, held):
                    per_node[entry.key[1]] = entry
        items = []
        for check in self.visible_checks(seen.__contains__):
            per_node = newest.get(check["id"], {})
            counts = {state.value: 0 for state in State}
            for entry in per_node.values():
                counts[entry.state] += 1
            worst = heapq.nsmallest(rows, per_node.values(), key=lambda e: (FLEET_ORDER[e.state], e.key[1]))
            head = {"check": check, "nodes": len(per_node), "results": totals.get(check["id"], 0), "counts": counts}
            items.append(json.dumps(head).encode()[:-1] + b',"rows":' + render_page(worst) + b"}")
        body = b"[" + b",".join(items) + b"]"
        if len(self._fleets) >= FLEET_CACHE:
            self._fleets.clear()
        self._fleets[(seen, rows)] = body
        return body

    def visible_checks(self, visible: Visible) -> list[dict[str, Any]]:
        """Registered checks, plus check types that only have (visible) results."""
        rows = {c.id: c.to_json() for c in self.checks}
        for workspace, types in self._types.items():
            if not visible(workspace):
                continue
            for profile, name in types:
                check_id = f"{profile}/{name}"
                if check_id not in rows:
                    rows[check_id] = {"id": check_id, "profile": profile, "name": name, "registered": False}
        return [rows[k] for k in sorted(rows)]


def _newer(entry: Entry, than: Entry) -> bool:
    """Whether ``entry`` comes from a later Run: by the Run's creation, then its uid."""
    return (entry.created, entry.key[4]) > (than.created, than.key[4])


def _from(entries: list[Entry], start: int) -> Iterable[Entry]:
    for position in range(start, len(entries)):
        yield entries[position]


def render_page(entries: list[Entry]) -> bytes:
    return b"[" + b",".join(e.summary for e in entries) + b"]"
