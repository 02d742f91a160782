"""The portal's in-memory index of classified results: an immutable snapshot, updated by
portal/sources.py for the Runs that changed (``Index.updated``) and swapped atomically, queried
by portal/api.py. Pure; no I/O.

Results are kept sorted by their key (workspace, Node, profile, check, Run uid), each one an
entry of portal/entries.py (its envelope pre-serialised, compact), so a page is a slice and a
join. Visibility (the caller's sight: authorized workspaces, and whether they may list Nodes and
profiles) is applied to every query; nothing outside it is counted or hinted.
"""

import bisect
import copy
import heapq
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from portal.entries import (
    FLEET_ORDER,
    KEY,
    Entry,
    Newest,
    age,
    candidates,
    edited,
    entry_of,
    fleet_rank,
    kept,
    newer,
    newest_each,
    render_page,
    top,
)
from portal.entries import counts as _counts
from portal.health import NodeHealth
from portal.pagination import Key
from portal.queries import Filters, RegisteredCheck
from portal.sight import Sight
from shared.envelope import State

Visible = Callable[[str], bool]
FLEET_CACHE = 8
"""Fleet answers kept per snapshot (one per distinct set of visible workspaces; ~2 MiB each at
10 checks x 200 rows)."""
SHARDS = 64
"""Per check type, the Nodes' newest results are split in this many dictionaries (by the hash of
the Node's name), so an update copies the few it touches, not one of 100,000 Nodes per check."""
Shards = list[dict[str, Newest]]
REBUILD_ABOVE = 0.25
"""An update touching more than this share of the results builds the snapshot anew instead."""
__all__ = ["FLEET_ORDER", "Entry", "Filters", "Index", "RegisteredCheck", "entry_of", "render_page"]


@dataclass
class Index:
    entries: list[Entry]
    checks: list[RegisteredCheck] = field(default_factory=list)
    node_uids: Mapping[str, str] = field(default_factory=dict)
    built_at: datetime | None = None
    nodes: Mapping[str, NodeHealth] = field(default_factory=dict)
    """Fleet health and capacity per Node name (portal/health.py)."""

    def __post_init__(self) -> None:
        """Everything a query needs, computed once per snapshot (portal/sources.py builds
        snapshots off the event loop): queries only slice it by the caller's sight."""
        self.entries = sorted(self.entries, key=KEY)
        self._by_node: dict[str, list[Entry]] = {}
        self._types: dict[str, set[tuple[str, str]]] = {}
        self._totals: dict[str, dict[str, int]] = {}
        # Per check type: per Node, the newest result of each workspace, newest first; and
        # how many results each workspace has. The fleet view of any set of workspaces is a
        # slice of these. The entries are sorted, so one (workspace, Node, check type)'s
        # results are adjacent: the newest of each such run is kept, nothing per pair else.
        self._newest: dict[str, Shards] = {}
        newest: dict[str, list[dict[str, Entry | list[Entry]]]] = self._newest  # type: ignore[assignment]
        type_ids: dict[tuple[str, str], str] = {}
        held: Entry | None = None
        for entry in self.entries:
            workspace, node, profile, name, _ = entry.key
            mine = self._by_node.get(node)
            if mine is None:
                mine = self._by_node[node] = []
            mine.append(entry)
            check_type = type_ids.get((profile, name))
            if check_type is None:
                check_type = type_ids[(profile, name)] = entry.check_type
            types = self._types.get(workspace)
            if types is None:
                types = self._types[workspace] = set()
            types.add((profile, name))
            totals = self._totals.setdefault(check_type, {})
            totals[workspace] = totals.get(workspace, 0) + 1
            shards = newest.get(check_type)
            if shards is None:
                shards = newest[check_type] = [{} for _ in range(SHARDS)]
            per_node = shards[hash(node) % SHARDS]
            if held is not None and held.key[:4] == entry.key[:4]:
                if newer(entry, held):
                    several = per_node[node]
                    if isinstance(several, Entry):
                        per_node[node] = entry
                    else:
                        several[-1] = entry
                    held = entry
                continue
            held = entry
            found = per_node.get(node)
            if found is None:
                per_node[node] = entry
            elif isinstance(found, Entry):
                per_node[node] = [found, entry]
            else:
                found.append(entry)
        self.workspaces = frozenset(self._types)
        _settle(newest)
        # The fleet view of every workspace (a fleet operator's, and the dashboard's usual
        # one), worst first, computed with the snapshot: its first answer is then a slice.
        self._everything: dict[str, tuple[dict[str, int], list[Entry]]] = {}
        for check_type, shards_of in self._newest.items():
            ordered = sorted((top(value) for shard in shards_of for value in shard.values()), key=fleet_rank)
            self._everything[check_type] = (_counts(ordered), ordered)
        self._fleets: dict[tuple[frozenset[str], bool, bool, int], bytes] = {}

    def updated(
        self,
        removed: Sequence[Entry],
        added: Sequence[Entry],
        *,
        checks: list[RegisteredCheck],
        node_uids: Mapping[str, str],
        built_at: datetime | None,
        nodes: Mapping[str, NodeHealth],
    ) -> "Index":
        """A new snapshot: this one without ``removed`` (entries of this one) and with ``added``,
        equal to one built from its entries, made by editing copies of only what they touch
        (this snapshot stays as it is: queries may be reading it). The sorted results are cut and
        joined, not re-sorted; per Node, check type and workspace only the touched ones are
        computed again. A large change, or a ``removed`` entry this snapshot does not hold,
        builds the snapshot anew."""
        gone = {id(e) for e in removed}
        drops = [bisect.bisect_left(self.entries, e.key, key=KEY) for e in removed]
        held = all(p < len(self.entries) and self.entries[p] is e for p, e in zip(drops, removed, strict=True))
        if not held or len(removed) + len(added) > REBUILD_ABOVE * max(1, len(self.entries)):
            kept = (e for e in self.entries if id(e) not in gone)
            return Index([*kept, *added], checks=checks, node_uids=node_uids, built_at=built_at, nodes=nodes)
        new = copy.copy(self)
        new.checks, new.node_uids, new.built_at, new.nodes = checks, node_uids, built_at, nodes
        new._fleets = {}
        fresh = sorted(added, key=KEY)
        places = [(bisect.bisect_left(self.entries, e.key, key=KEY), e) for e in fresh]
        new.entries = edited(self.entries, drops, places)
        arriving: dict[str, list[Entry]] = {}
        for entry in fresh:
            arriving.setdefault(entry.key[1], []).append(entry)
        new._by_node = dict(self._by_node)
        for node in {e.key[1] for e in removed} | set(arriving):
            mine = [e for e in self._by_node.get(node, []) if id(e) not in gone]
            mine = sorted([*mine, *arriving.get(node, [])], key=KEY)
            if mine:
                new._by_node[node] = mine
            else:
                new._by_node.pop(node, None)
        new._count(removed, fresh)
        new._edit_fleet(self, {(e.key[2], e.key[3], e.key[1]) for e in [*removed, *fresh]})
        return new

    def _count(self, removed: Sequence[Entry], added: Sequence[Entry]) -> None:
        """(In an update, on the new snapshot.) Results per check type and workspace, and the
        check types of each workspace, less ``removed`` and with ``added``."""
        self._totals = {check_type: dict(per) for check_type, per in self._totals.items()}
        for entry, step in [*((e, -1) for e in removed), *((e, 1) for e in added)]:
            per = self._totals.setdefault(entry.check_type, {})
            per[entry.key[0]] = per.get(entry.key[0], 0) + step
            if not per[entry.key[0]]:
                del per[entry.key[0]]
        self._totals = {check_type: per for check_type, per in self._totals.items() if per}
        self._types = {}
        for check_type, per in self._totals.items():
            profile, name = check_type.split("/", 1)  # a profile's name holds no "/"
            for workspace in per:
                self._types.setdefault(workspace, set()).add((profile, name))
        self.workspaces = frozenset(self._types)

    def _edit_fleet(self, old: "Index", touched: set[tuple[str, str, str]]) -> None:
        """(In an update, on the new snapshot.) The newest results of the touched (profile,
        check, Node) computed again from the Node's results, and the precomputed fleet of every
        workspace edited where a Node's newest result changed; copies of ``old``'s tables."""
        self._newest, self._everything = dict(old._newest), dict(old._everything)
        copied: set[str] = set()
        shards_copied: set[tuple[str, int]] = set()
        of_node: dict[str, dict[tuple[str, str], list[Entry]]] = {}
        for profile, name, node in sorted(touched):
            check_type = f"{profile}/{name}"
            if check_type not in copied:
                copied.add(check_type)
                self._newest[check_type] = list(old._newest.get(check_type) or [{} for _ in range(SHARDS)])
                tallies, ordered = old._everything.get(check_type, (_counts([]), []))
                self._everything[check_type] = (dict(tallies), list(ordered))
            if node not in of_node:
                of_node[node] = {}
                for entry in self._by_node.get(node, []):
                    of_node[node].setdefault((entry.key[2], entry.key[3]), []).append(entry)
            shard = (check_type, hash(node) % SHARDS)
            if shard not in shards_copied:  # copy-on-write: only the touched shards are copied
                shards_copied.add(shard)
                self._newest[check_type][shard[1]] = dict(self._newest[check_type][shard[1]])
            per_node = self._newest[check_type][shard[1]]
            tallies, ordered = self._everything[check_type]
            held = per_node.get(node)
            before = None if held is None else top(held)
            found = newest_each(of_node[node].get((profile, name), []))
            after = found[0] if found else None
            if found:
                per_node[node] = kept(found)
            else:
                per_node.pop(node, None)
            if before is not None and before is not after:
                del ordered[bisect.bisect_left(ordered, fleet_rank(before), key=fleet_rank)]
                tallies[before.state] -= 1
            if after is not None and before is not after:
                bisect.insort(ordered, after, key=fleet_rank)
                tallies[after.state] += 1
        for check_type in copied:
            if not any(self._newest[check_type]):
                del self._newest[check_type], self._everything[check_type]

    def __len__(self) -> int:
        return len(self.entries)

    def counts(self) -> dict[str, int]:
        return _counts(self.entries)

    def page(self, filters: Filters, visible: Visible, *, after: Key | None, limit: int) -> tuple[list[Entry], bool]:
        """Up to ``limit`` visible matching entries strictly after ``after``; and whether more follow."""
        if filters.node is not None:
            pool: list[Entry] = self._by_node.get(filters.node, [])
            start = bisect.bisect_right([e.key for e in pool], after) if after else 0
        else:
            pool = self.entries
            start = bisect.bisect_right(pool, after, key=KEY) if after else 0
            if filters.workspace is not None:
                start = max(start, bisect.bisect_left(pool, (filters.workspace,), key=KEY))
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
        position = bisect.bisect_left(self.entries, key, key=KEY)
        if position < len(self.entries) and self.entries[position].key == key:
            return self.entries[position]
        return None

    def node_entries(self, node: str, visible: Visible) -> list[Entry]:
        return [e for e in self._by_node.get(node, []) if visible(e.key[0])]

    def health(self, node: str, sight: Sight) -> dict[str, Any] | None:
        """The Node's health as the caller may see it: None without the right to list Nodes.
        The Run holding the Node is named only to a caller who sees that Run's workspace."""
        found = self.nodes.get(node) if sight.nodes else None
        if found is None:
            return None
        return found.to_json(show_run=found.held is not None and sight.workspace(found.held.run_namespace))

    def node_summary(self, node: str, sight: Sight) -> dict[str, Any] | None:
        """Per check type, the state of the newest visible result, beside the Node's health.
        Registered checks without a visible result are Unknown (listed only to a caller who
        may list profiles). None (404) when the caller sees no result of the Node and may not
        list Nodes, or the Node neither exists nor has a visible result."""
        mine = self.node_entries(node, sight.workspace)
        exists = node in self.node_uids or node in self.nodes
        if not mine and not (sight.nodes and exists):
            return None
        newest: dict[str, Entry] = {}
        for entry in mine:
            held = newest.get(entry.check_type)
            if held is None or newer(entry, held):
                newest[entry.check_type] = entry
        rows = []
        registered = {c.id for c in self.checks}
        shown = set(newest) | (registered if sight.profiles else set())
        for check_id in sorted(shown):
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
        uid = self.node_uids.get(node) or (self.nodes[node].uid if node in self.nodes else None)
        return {
            "node": node,
            "uid": uid if sight.nodes else None,
            "health": self.health(node, sight),
            "checks": rows,
        }

    def fleet(self, sight: Sight, rows: int) -> bytes:
        """The fleet view as the JSON members ``"items":[...],"nodes":{...}``: one item per
        visible check (as ``visible_checks``) with, per Node, its newest visible result of
        that check; how many Nodes are in each state; the first ``rows`` of those results,
        worst state first, then by Node name; and the health of the Nodes in those rows (to a
        caller who may list Nodes). A slice of what the snapshot precomputed, cached per sight;
        CPU-bound at fleet scale, so portal/api.py calls it off the event loop."""
        cache_key = self._fleet_key(sight, rows)
        cached = self._fleets.get(cache_key)
        if cached is not None:
            return cached
        seen = cache_key[0]
        everything = seen == self.workspaces
        items = []
        shown: set[str] = set()
        for check in self.visible_checks(sight):
            if everything:
                counts, ordered = self._everything.get(check["id"], (_counts([]), []))
                how_many, worst = len(ordered), ordered[:rows]
            else:
                how_many, counts, worst = self._fleet_of(check["id"], seen, rows)
            shown.update(e.key[1] for e in worst)
            totals = self._totals.get(check["id"], {})
            results = sum(n for w, n in totals.items() if w in seen)
            head = {"check": check, "nodes": how_many, "results": results, "counts": counts}
            items.append(json.dumps(head).encode()[:-1] + b',"rows":' + render_page(worst) + b"}")
        health = {name: self.health(name, sight) for name in sorted(shown)} if sight.nodes else {}
        nodes = json.dumps({k: v for k, v in health.items() if v is not None}).encode()
        body = b'"items":[' + b",".join(items) + b'],"nodes":' + nodes
        if len(self._fleets) >= FLEET_CACHE:
            self._fleets.clear()
        self._fleets[cache_key] = body
        return body

    def _fleet_key(self, sight: Sight, rows: int) -> tuple[frozenset[str], bool, bool, int]:
        seen = frozenset(w for w in self.workspaces if sight.workspace(w))
        return seen, sight.nodes, sight.profiles, rows

    def cached_fleet(self, sight: Sight, rows: int) -> bytes | None:
        """What :meth:`fleet` answers, when this snapshot has made it for this sight already."""
        return self._fleets.get(self._fleet_key(sight, rows))

    def _fleet_of(self, check_type: str, seen: frozenset[str], rows: int) -> tuple[int, dict[str, int], list[Entry]]:
        """One check's fleet for some of the workspaces: per Node its newest result in them;
        how many Nodes, their counts by state and the first ``rows``, worst first."""
        per_node: list[Entry] = []
        for value in (value for shard in self._newest.get(check_type, []) for value in shard.values()):
            chosen = next((e for e in candidates(value) if e.key[0] in seen), None)
            if chosen is not None:
                per_node.append(chosen)
        return len(per_node), _counts(per_node), heapq.nsmallest(rows, per_node, key=fleet_rank)

    def visible_checks(self, sight: Sight) -> list[dict[str, Any]]:
        """Check types with visible results; and, to a caller who may list profiles, every
        registered check (without one, a registered check the caller has no result of stays
        unnamed)."""
        registered = {c.id: c.to_json() for c in self.checks}
        rows = dict(registered) if sight.profiles else {}
        for workspace, types in self._types.items():
            if not sight.workspace(workspace):
                continue
            for profile, name in types:
                check_id = f"{profile}/{name}"
                if check_id not in rows:
                    rows[check_id] = registered.get(check_id) or {
                        "id": check_id,
                        "profile": profile,
                        "name": name,
                        "registered": False,
                    }
        return [rows[k] for k in sorted(rows)]


def _settle(newest: dict[str, list[dict[str, Entry | list[Entry]]]]) -> None:
    """Where a Node has several workspaces' newest results of a check type: a tuple, newest first."""
    for shards in newest.values():
        for per_node in shards:
            for node, found in per_node.items():
                if isinstance(found, list):
                    per_node[node] = tuple(sorted(found, key=age, reverse=True))  # type: ignore[assignment]


def _from(entries: list[Entry], start: int) -> Iterable[Entry]:
    for position in range(start, len(entries)):
        yield entries[position]
