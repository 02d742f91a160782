"""The fault campaign's invariants, checked at every point of a recorded history. Pure.

Replays the records in etcd's order (``history.ordered``) and, after each one, asserts what
must hold at that moment; a few invariants about the end (every Run ended, every request
answered) are asserted once the history is complete. The numbers follow issue 14:

1. a Node is held by at most one live Run (participants of Runs not Released); no reservation
   outlives its Run's release, nor its deletion by more than ``deletion_grace_s``;
2. per failure domain, Nodes under test (carrying a reservation) never exceed the budget;
3. a Node is projected Pass only by a Run whose evidence verifies, twice: by ``signalctl evidence
   verify``'s pure verification (plus the document's verdict for that Node), which runs the same
   ``shared.acceptance`` rules the controller decides with, and by the checker's own
   re-derivation from the raw bytes (``tests/chaos/rederive.py``, which shares no code with
   them; ``tests/chaos/passproof.py``); both must say Pass, and a disagreement is reported as such. A Node's projection never
   goes back to an older Run;
4. no workload of check k of a Run exists when one of a later check of that Run is created, and
   none exists when the Run becomes terminal or is deleted;
5. a cordon the operator set (``spec.unschedulable``) is removed only by the operator;
6. (end) every Run is terminal, within its suite deadline plus ``end_margin_s`` after the later of
   its creation and the end of the faults; every requested Node ends released, or held by a
   terminal Run with a reason;
7. no duplicate Run for one admission, no second live Workflow of a Run, no evidence ConfigMap
   created twice.

Each violation carries the records that led to it (the last ``excerpt`` records), so a finding
can be read without the whole history.
"""

import heapq
import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shared import keys
from shared.run import TERMINAL_PHASES
from tests.chaos.history import FAULT, OPERATOR, Record, ordered
from tests.chaos.passproof import verify_pass

Obj = dict[str, Any]


@dataclass(frozen=True)
class Rules:
    max_nodes_per_domain: int
    topology_key: str = keys.ZONE_LABEL
    deletion_grace_s: float = 90.0
    """How long a deleted Run's reservations may remain (the controller finds orphans on resync)."""
    faults_end_at: float | None = None
    """When the last fault stopped; None: do not check the end (invariant 6)."""
    end_margin_s: float = 120.0
    excerpt: int = 8


INVARIANTS = 7
"""How many invariants the checker asserts (the numbered list above)."""


@dataclass(frozen=True)
class Tally:
    """What a check covered: not a count of evaluations, but records and invariants."""

    records: int
    """Records replayed in etcd's order (API writes, the operator's actions, faults)."""
    passes_verified: int
    """Pass projections (Run, Node) that both the shared verification and the checker's own
    re-derivation accepted (invariant 3)."""
    invariants: int = INVARIANTS

    @property
    def pairs(self) -> int:
        """records x invariants: every invariant is asserted after every record, except the end's
        (6), asserted once at the end, and those a record's kind cannot touch (no-ops)."""
        return self.records * self.invariants


@dataclass(frozen=True)
class Violation:
    invariant: int
    at: float
    rv: int
    message: str
    excerpt: tuple[str, ...]


def summary(record: Record) -> str:
    obj = record.obj
    meta = obj.get("metadata", {})
    what = f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/") or str(obj)[:120]
    extra = ""
    if record.kind == "Run":
        status = obj.get("status") or {}
        extra = f" phase={status.get('phase')} released={_released(obj)}"
    elif record.kind == "Node":
        labels = meta.get("labels") or {}
        extra = f" reserved-by={labels.get(keys.RESERVED_BY_LABEL)} unschedulable={(obj.get('spec') or {}).get('unschedulable')}"
    return f"t={record.at:.2f} rv={record.rv} {record.kind} {record.type} {what}{extra}"


def _released(run: Obj) -> bool:
    return any(
        c.get("type") == "Released" and c.get("status") == "True"
        for c in (run.get("status") or {}).get("conditions") or []
    )


def _labels(obj: Obj) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def _participants(run: Obj) -> set[str]:
    return {p["nodeName"] for p in (run.get("spec") or {}).get("participants") or []}


def _terminal(run: Obj) -> bool:
    return (run.get("status") or {}).get("phase") in TERMINAL_PHASES


def _owner_run(obj: Obj) -> str | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == keys.RUN_KIND:
            return str(ref.get("uid"))
    return _labels(obj).get(keys.RUN_UID_LABEL)


@dataclass
class _State:
    rules: Rules
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    runs: dict[str, Obj] = field(default_factory=dict)
    """Every Run ever seen, by uid, in its last state."""
    created_at: dict[str, float] = field(default_factory=dict)
    deleted_at: dict[str, float] = field(default_factory=dict)
    terminal_at: dict[str, float] = field(default_factory=dict)
    holders: dict[str, set[str]] = field(default_factory=dict)
    """Node name -> uids of Runs holding it."""
    reserved: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Node name -> (reserving Run uid, domain)."""
    projected: dict[tuple[str, str], str] = field(default_factory=dict)
    """(Node uid, profile) -> runCreated of the projection it carries."""
    pending: dict[tuple[str, str, str], Record] = field(default_factory=dict)
    """(Run uid, Node name, Node uid) of Pass projections awaiting the Run's verifiable evidence."""
    verified: set[tuple[str, str]] = field(default_factory=set)
    refuted: set[tuple[str, str]] = field(default_factory=set)
    """(Run uid, Node name) already reported: one violation per projection, not per Node write."""
    cordoned: set[str] = field(default_factory=set)
    workloads: dict[tuple[str, str, str], tuple[str, str]] = field(default_factory=dict)
    """Live Pods and MPIJobs of Runs: key -> (Run uid, check name)."""
    workflows: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """Live Workflows: key -> owning Run uid."""
    evidence: dict[tuple[str, str, str], str] = field(default_factory=dict)
    requested: set[str] = field(default_factory=set)
    deletion_checks: list[tuple[float, str]] = field(default_factory=list)
    recent: deque[Record] = field(default_factory=deque)
    found: list[Violation] = field(default_factory=list)

    def violation(self, invariant: int, record: Record, message: str) -> None:
        excerpt = tuple(summary(r) for r in self.recent)
        self.found.append(Violation(invariant, record.at, record.rv, message, excerpt))


def _domain_count(state: _State, domain: str) -> int:
    return sum(1 for _, d in state.reserved.values() if d == domain)


def _on_node(state: _State, record: Record) -> None:
    name, node = record.name, record.obj
    if record.type == "DELETED":
        state.reserved.pop(name, None)
        state.cordoned.discard(name)
        return
    labels = _labels(node)
    holder = labels.get(keys.RESERVED_BY_LABEL)
    if holder is None:
        state.reserved.pop(name, None)
    else:
        domain = labels.get(state.rules.topology_key, "")
        state.reserved[name] = (holder, domain)
        run = state.runs.get(holder)
        if run is not None and _released(run):
            state.violation(1, record, f"Node {name} reserved by Run {run['metadata']['name']} after its release")
        if holder in state.deleted_at and record.at - state.deleted_at[holder] > state.rules.deletion_grace_s:
            state.violation(1, record, f"Node {name} still reserved by deleted Run {holder}")
        if domain and _domain_count(state, domain) > state.rules.max_nodes_per_domain:
            state.violation(
                2,
                record,
                f"domain {domain}: {_domain_count(state, domain)} Nodes under test, budget "
                f"{state.rules.max_nodes_per_domain}",
            )
    if name in state.cordoned and not (node.get("spec") or {}).get("unschedulable"):
        state.violation(5, record, f"Node {name}: the operator's cordon was removed by someone else")
    for key, value in labels.items():
        if key.startswith(keys.CERTIFIED_LABEL_PREFIX):
            _on_projection(state, record, key.removeprefix(keys.CERTIFIED_LABEL_PREFIX), value)


def _on_projection(state: _State, record: Record, profile: str, verdict: str) -> None:
    node_name, node_uid = record.name, record.uid
    raw = (record.obj.get("metadata", {}).get("annotations") or {}).get(keys.certified_label(profile))
    try:
        detail = json.loads(raw) if raw else None
    except ValueError:
        detail = None
    if not isinstance(detail, dict):
        if verdict == "Pass":
            state.violation(3, record, f"Node {node_name} shows {profile}=Pass without a readable Run detail")
        return
    created = str(detail.get("runCreated", ""))
    before = state.projected.get((node_uid, profile))
    if before is not None and created < before:
        state.violation(3, record, f"Node {node_name}: projection of {profile} went back from {before} to {created}")
    state.projected[(node_uid, profile)] = max(created, before or "")
    run_uid = str(detail.get("runUID", ""))
    if verdict == "Pass" and (run_uid, node_name) not in state.verified | state.refuted:
        state.pending.setdefault((run_uid, node_name, node_uid), record)
        _settle(state, run_uid, record, final=False)


def _settle(state: _State, run_uid: str, record: Record, *, final: bool) -> None:
    """Verify the pending Pass projections of ``run_uid``: verified, or a violation once nothing
    can change the answer (the Run is terminal, deleted or unknown, or the history ended)."""
    for key in [k for k in state.pending if k[0] == run_uid]:
        run = state.runs.get(run_uid)
        why = "no such Run was ever seen" if run is None else verify_pass(run, state.objects, key[1])
        if why is None:
            state.verified.add((run_uid, key[1]))
            del state.pending[key]
            continue
        if final or run is None or run_uid in state.deleted_at or _terminal(run):
            state.refuted.add((run_uid, key[1]))
            state.violation(3, state.pending.pop(key), f"Node {key[1]} projected Pass by Run {run_uid}: {why}")


def _on_run(state: _State, record: Record) -> None:
    run, uid = record.obj, record.uid
    if record.type == "DELETED" and uid in state.runs:
        run = state.runs[uid]  # a relist's DELETED carries only the name, namespace and uid
    if record.type == "ADDED" and uid not in state.runs:
        state.created_at[uid] = record.at
        same = [
            other
            for other_uid, other in state.runs.items()
            if other_uid not in state.deleted_at
            and other["spec"]["profile"]["name"] == run["spec"]["profile"]["name"]
            and other["spec"].get("attempt", 1) == run["spec"].get("attempt", 1)
            and _participants(other) == _participants(run)
            and not _terminal(other)
        ]
        if same:
            state.violation(7, record, f"Run {record.name} duplicates Run {same[0]['metadata']['name']}")
    state.runs[uid] = run
    if record.type == "DELETED":
        state.deleted_at[uid] = record.at
        heapq.heappush(state.deletion_checks, (record.at + state.rules.deletion_grace_s, uid))
    holding = record.type != "DELETED" and not _released(run)
    for node in _participants(run):
        holders = state.holders.setdefault(node, set())
        if holding:
            holders.add(uid)
            if len(holders) > 1:
                names = sorted(state.runs[u]["metadata"]["name"] for u in holders)
                state.violation(1, record, f"Node {node} held by {len(holders)} live Runs: {', '.join(names)}")
        else:
            holders.discard(uid)
    if _released(run):
        still = sorted(n for n, (holder, _) in state.reserved.items() if holder == uid)
        if still:
            state.violation(1, record, f"Run {record.name} marked Released while {still} still carry its reservation")
    if (_terminal(run) or record.type == "DELETED") and uid not in state.terminal_at:
        state.terminal_at[uid] = record.at
        live = sorted(f"{k[0]} {k[2]}" for k, (owner, _) in state.workloads.items() if owner == uid)
        if live:
            state.violation(4, record, f"Run {record.name} ended while its workloads exist: {live[:4]}")
    _settle(state, uid, record, final=False)


def _on_workload(state: _State, record: Record, key: tuple[str, str, str]) -> None:
    if record.type == "DELETED":  # a relist's DELETED carries no labels: the key alone says what went
        state.workloads.pop(key, None)
        return
    labels = _labels(record.obj)
    run_uid, check = labels.get(keys.RUN_UID_LABEL), labels.get(keys.CHECK_LABEL)
    if run_uid is None or check is None:
        return
    if key in state.workloads:
        return
    run = state.runs.get(run_uid)
    if run is not None:
        names = [c["name"] for c in run["spec"]["checks"]]
        index = names.index(check) if check in names else -1
        older = sorted(
            f"{k[0]} {k[2]} ({c})"
            for k, (u, c) in state.workloads.items()
            if u == run_uid and c in names and names.index(c) < index
        )
        if older:
            state.violation(4, record, f"{record.kind} {record.name} of check {check} created while {older[:3]} exist")
        if uid_end := state.terminal_at.get(run_uid):
            state.violation(4, record, f"{record.kind} {record.name} created after Run ended (t={uid_end:.2f})")
    state.workloads[key] = (run_uid, check)


def _on_workflow(state: _State, record: Record, key: tuple[str, str, str]) -> None:
    owner = _owner_run(record.obj)
    if record.type == "DELETED" or owner is None:
        state.workflows.pop(key, None)
        return
    live = [k for k, u in state.workflows.items() if u == owner and k != key]
    if record.type == "ADDED" and live:
        state.violation(7, record, f"Workflow {record.name} created while {live[0][2]} of the same Run exists")
    state.workflows[key] = owner


def _on_config_map(state: _State, record: Record) -> None:
    name = record.name
    if not name.endswith("-evidence") or record.type == "DELETED":
        return
    key = (record.namespace, name, _labels(record.obj).get(keys.RUN_UID_LABEL, ""))
    seen = state.evidence.get(key)
    if seen is not None and seen != record.uid:
        state.violation(7, record, f"evidence ConfigMap {name} of one Run created twice")
    state.evidence[key] = record.uid
    run_uid = _owner_run(record.obj)
    if run_uid:
        _settle(state, run_uid, record, final=False)


def _on_operator(state: _State, record: Record) -> None:
    node = str(record.obj.get("node", ""))
    if record.type == "cordon":
        state.cordoned.add(node)
    elif record.type == "uncordon":
        state.cordoned.discard(node)
    elif record.type == "request":
        state.requested.update(str(n) for n in record.obj.get("nodes") or [])


def _apply(state: _State, record: Record) -> None:
    key = (record.kind, record.namespace, record.name)
    if record.kind not in (OPERATOR, FAULT):
        if record.type == "DELETED":
            state.objects.pop(key, None)
        else:
            state.objects[key] = record.obj
    if record.kind == "Node":
        _on_node(state, record)
    elif record.kind == "Run":
        _on_run(state, record)
    elif record.kind in ("Pod", "MPIJob"):
        _on_workload(state, record, key)
    elif record.kind == "Workflow":
        _on_workflow(state, record, ("Workflow", record.namespace, record.name))
    elif record.kind == "ConfigMap":
        _on_config_map(state, record)
    elif record.kind == OPERATOR:
        _on_operator(state, record)
    while state.deletion_checks and state.deletion_checks[0][0] < record.at:
        _, uid = heapq.heappop(state.deletion_checks)
        still = sorted(n for n, (holder, _) in state.reserved.items() if holder == uid)
        if still:
            state.violation(
                1, record, f"Nodes {still} still reserved {state.rules.deletion_grace_s:g}s after Run {uid} was deleted"
            )


def _end(state: _State, last: Record) -> None:
    rules = state.rules
    assert rules.faults_end_at is not None
    unjudged: set[str] = set()
    for uid, run in state.runs.items():
        if uid in state.deleted_at:
            continue
        name = run["metadata"]["name"]
        created = state.created_at.get(uid, 0.0)
        limit = max(created, rules.faults_end_at) + run["spec"]["suiteDeadlineSeconds"]
        ended = state.terminal_at.get(uid)
        if ended is None and created > rules.faults_end_at and last.at <= limit + rules.end_margin_s:
            # Admitted after the faults stopped (a recurrence, a retry) and still within its
            # deadline when the history ends: nothing says yet whether it ends in time.
            unjudged.add(uid)
            continue
        if ended is None:
            state.violation(6, last, f"Run {name} never ended (phase {(run.get('status') or {}).get('phase')})")
        elif ended > limit + rules.end_margin_s:
            state.violation(6, last, f"Run {name} ended {ended - limit:.0f}s after its deadline")
    for node in sorted(state.requested):
        current = state.objects.get(("Node", "", node))
        if current is None:
            continue
        labels = _labels(current)
        holder = labels.get(keys.RESERVED_BY_LABEL)
        holding = state.runs.get(holder) if holder else None
        if keys.CERTIFY_LABEL in labels:
            state.violation(6, last, f"Node {node} is still waiting for admission")
        elif holder in unjudged:
            continue  # held by a Run the history ended too early to judge (above)
        elif holder and not (holding and _terminal(holding) and (holding.get("status") or {}).get("reason")):
            state.violation(6, last, f"Node {node} ends reserved by {holder} without a terminal Run and reason")
    for uid in {k[0] for k in state.pending}:
        _settle(state, uid, last, final=True)


def check(records: Iterable[Record], rules: Rules) -> tuple[list[Violation], Tally]:
    """Violations of a history, and what was covered (records replayed, Pass projections verified)."""
    state = _State(rules)
    state.recent = deque(maxlen=rules.excerpt)
    history = ordered(records)
    for record in history:
        state.recent.append(record)
        _apply(state, record)
    if history and rules.faults_end_at is not None:
        _end(state, history[-1])
    return state.found, Tally(records=len(history), passes_verified=len(state.verified))
