"""The fault campaign's checker on hand-made histories: a clean certification passes, and every
invariant can fail (each table row breaks exactly one)."""

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared import keys
from tests.chaos import history
from tests.chaos.checker import Rules, Violation, check
from tests.chaos.history import OPERATOR, Record
from tests.unit.test_signalctl_verify import Recorded, passing

Obj = dict[str, Any]
RULES = Rules(max_nodes_per_domain=2, deletion_grace_s=30.0, faults_end_at=10.0, end_margin_s=60.0)


def node(name: str, uid: str = "", zone: str = "a", **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name[1:]}", "labels": {keys.ZONE_LABEL: zone, **labels}},
        "spec": {},
    }


class History:
    """Records with increasing resourceVersions and times, one per API write."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.rv = 100
        self.nodes: dict[str, Obj] = {}

    def add(self, kind: str, type_: str, obj: Obj, *, at: float | None = None) -> None:
        self.rv += 1
        moment = at if at is not None else self.rv / 10
        self.records.append(Record(kind, type_, self.rv, moment, copy.deepcopy(obj), seq=len(self.records)))

    def node(self, name: str, change: Callable[[Obj], None] | None = None, **kw: Any) -> None:
        current = self.nodes.get(name)
        if current is None:
            current = self.nodes[name] = node(name, **kw)
            self.add("Node", "ADDED", current)
        if change is not None:
            change(current)
            self.add("Node", "MODIFIED", current)

    def reserve(self, name: str, run: Obj) -> None:
        self.node(name, lambda n: n["metadata"]["labels"].__setitem__(keys.RESERVED_BY_LABEL, run["metadata"]["uid"]))

    def unreserve(self, name: str) -> None:
        self.node(name, lambda n: n["metadata"]["labels"].pop(keys.RESERVED_BY_LABEL, None))

    def project(self, name: str, run: Obj, verdict: str = "Pass", created: str | None = None) -> None:
        key = keys.certified_label(run["spec"]["profile"]["name"])
        detail = {
            "verdict": verdict,
            "runUID": run["metadata"]["uid"],
            "runCreated": created or run["metadata"]["creationTimestamp"],
        }

        def change(n: Obj) -> None:
            n["metadata"]["labels"][key] = verdict
            n["metadata"].setdefault("annotations", {})[key] = json.dumps(detail)

        self.node(name, change)

    def operator(self, action: str, **obj: Any) -> None:
        # The operator's write and the watch event it causes share one resourceVersion.
        self.records.append(Record(OPERATOR, action, self.rv + 1, (self.rv + 1) / 10, obj, seq=len(self.records)))


def workload(kind: str, name: str, run: Obj, check: str) -> Obj:
    labels = {keys.RUN_UID_LABEL: run["metadata"]["uid"], keys.CHECK_LABEL: check}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels}}


def with_ns(config_map: Obj, name: str) -> Obj:
    config_map = copy.deepcopy(config_map)
    config_map["metadata"].update(namespace="ns", name=name, uid=f"uid-{name}")
    config_map["metadata"]["labels"] = {keys.RUN_UID_LABEL: "run-uid"}
    return config_map


def certified(recorded: Recorded | None = None, *, end: bool = True) -> History:
    """A whole, clean certification of n0 and n1 by Run r1 (two checks, both pass)."""
    rec = recorded or passing()
    h = History()
    running = copy.deepcopy(rec.run)
    running["status"] = {"phase": "Running"}
    h.node("n0")
    h.node("n1")
    h.operator("request", nodes=["n0", "n1"], profile="gpu")
    h.node("n0", lambda n: n["metadata"]["labels"].__setitem__(keys.CERTIFY_LABEL, "gpu"))
    h.node("n1", lambda n: n["metadata"]["labels"].__setitem__(keys.CERTIFY_LABEL, "gpu"))
    for name in ("n0", "n1"):

        def reserve(n: Obj) -> None:
            n["metadata"]["labels"].pop(keys.CERTIFY_LABEL)
            n["metadata"]["labels"][keys.RESERVED_BY_LABEL] = "run-uid"
            n["spec"]["taints"] = [{"key": keys.RESERVED_TAINT_KEY, "value": "run-uid", "effect": "NoSchedule"}]

        h.node(name, reserve)
    h.add("Run", "ADDED", running)
    workflow = {
        "metadata": {"name": "r1", "namespace": "ns", "uid": "wf-uid", "labels": {keys.RUN_UID_LABEL: "run-uid"}}
    }
    h.add("Workflow", "ADDED", workflow)
    for name in ("check-0", "check-1"):
        pods = [workload("Pod", f"r1-{name}-{i}", running, name) for i in range(2)]
        for pod in pods:
            h.add("Pod", "ADDED", pod)
        for pod in pods:
            h.add("Pod", "DELETED", pod)
    for index, cm in rec.check_cms.items():
        assert cm is not None
        results = rec.results_cms[index]
        assert results is not None
        h.add("ConfigMap", "ADDED", with_ns(results, f"r1-c{index}-results"))  # the adapter's, first
        h.add("ConfigMap", "ADDED", with_ns(cm, f"r1-c{index}-evidence"))
    h.add("ConfigMap", "ADDED", with_ns(rec.run_cm, "r1-evidence"))
    h.project("n0", rec.run)
    h.project("n1", rec.run)
    h.add("Run", "MODIFIED", rec.run)
    if end:
        h.unreserve("n0")
        h.unreserve("n1")
        released = copy.deepcopy(rec.run)
        released["status"]["conditions"] = [{"type": "Released", "status": "True"}]
        h.add("Run", "MODIFIED", released)
    return h


def violations(h: History, rules: Rules = RULES) -> list[Violation]:
    found, tally = check(h.records, rules)
    assert tally.records == len(h.records)
    assert tally.pairs == len(h.records) * 7
    return found


def only(found: list[Violation], invariant: int, fragment: str, count: int = 1) -> None:
    assert [v.invariant for v in found] == [invariant] * count, [(v.invariant, v.message) for v in found]
    assert fragment in found[0].message, found[0].message
    assert found[0].excerpt  # the records that led to it


def test_a_clean_certification_violates_nothing() -> None:
    assert violations(certified()) == []


def test_the_history_round_trips_through_json_lines(tmp_path: Path) -> None:
    h = certified()
    path = tmp_path / "history.jsonl"
    history.write(path, h.records)
    assert list(history.read(path)) == h.records


def test_order_is_etcds_not_arrival() -> None:
    h = certified()
    shuffled = list(reversed(h.records))
    assert check(shuffled, RULES)[0] == []


# --- 1. one live Run per Node; no reservation outlives release or deletion -------------------


def test_two_live_runs_on_one_node() -> None:
    h = certified(end=False)
    other = copy.deepcopy(h.records[-1].obj)
    other["metadata"].update(name="r2", uid="run-2", creationTimestamp="2026-11-30T01:00:00Z")
    other["spec"]["profile"]["name"] = "other"
    h.add("Run", "ADDED", other)
    found = check(h.records, Rules(max_nodes_per_domain=2))[0]
    assert {v.invariant for v in found} == {1}
    assert "held by 2 live Runs: r1, r2" in found[0].message


def test_a_reservation_after_release() -> None:
    h = certified()
    h.reserve("n0", {"metadata": {"uid": "run-uid"}})
    only(violations(h), 1, "Node n0 reserved by Run r1 after its release")


def test_release_marked_while_nodes_still_reserved() -> None:
    h = certified(end=False)
    released = copy.deepcopy(h.records[-1].obj)
    released["status"]["conditions"] = [{"type": "Released", "status": "True"}]
    h.add("Run", "MODIFIED", released)
    h.unreserve("n0")
    h.unreserve("n1")
    only(violations(h), 1, "marked Released while ['n0', 'n1'] still carry its reservation")


def test_a_reservation_outliving_its_deleted_run() -> None:
    h = certified(end=False)
    run = h.records[-1].obj
    h.add("Run", "DELETED", run, at=20.0)
    h.add("Node", "ADDED", node("n2"), at=60.0)  # any later write: the grace has passed
    found = check(h.records, Rules(max_nodes_per_domain=2, deletion_grace_s=30.0))[0]
    assert [v.invariant for v in found] == [1]
    assert "still reserved 30s after Run run-uid was deleted" in found[0].message


# --- 2. failure-domain budget --------------------------------------------------------------------


def test_budget_exceeded_in_a_domain() -> None:
    h = certified(end=False)
    h.node("n2", zone="a")
    h.reserve("n2", {"metadata": {"uid": "run-3"}})
    found = check(h.records, Rules(max_nodes_per_domain=2))[0]
    only(found, 2, "domain a: 3 Nodes under test, budget 2")


def test_other_domains_do_not_count() -> None:
    h = certified(end=False)
    h.node("n2", zone="b")
    h.reserve("n2", {"metadata": {"uid": "run-3"}})
    assert check(h.records, Rules(max_nodes_per_domain=2))[0] == []


# --- 3. Pass only from verified evidence; never back in time ------------------------------------


def test_pass_from_evidence_that_does_not_verify() -> None:
    rec = passing()
    tampered = copy.deepcopy(rec)
    tampered.check_cms[1] = tampered.check_cms[0]  # check 1's evidence replaced by check 0's
    only(violations(certified(tampered)), 3, "projected Pass by Run run-uid: evidence does not verify", count=2)


def test_pass_projected_by_a_run_never_seen() -> None:
    h = History()
    h.node("n5")
    forged = {"metadata": {"uid": "forged", "creationTimestamp": "2026-11-30T00:00:00Z"}, "spec": {}}
    forged["spec"]["profile"] = {"name": "gpu"}
    h.project("n5", forged)
    only(violations(h, Rules(max_nodes_per_domain=2)), 3, "no such Run was ever seen")


def test_pass_where_the_evidence_fails_the_node() -> None:
    h = certified()
    run = h.records[-1].obj
    h.node("n2")
    h.project("n2", run)  # not a participant: the document gives it no verdict
    only(violations(h), 3, "the evidence gives n2 None, not Pass")


def test_projection_going_back_in_time() -> None:
    h = certified()
    run = h.records[-1].obj
    h.project("n0", run, verdict="Fail", created="2026-11-29T00:00:00Z")
    only(violations(h), 3, "went back from 2026-11-30T00:00:00Z to 2026-11-29T00:00:00Z")


def test_pass_without_a_readable_detail() -> None:
    h = certified()
    h.node("n0", lambda n: n["metadata"]["annotations"].__setitem__(keys.certified_label("gpu"), "{garbled"))
    only(violations(h), 3, "without a readable Run detail")


# --- 4. checks one after the other; nothing outlives the Run ----------------------------------------


def test_a_later_check_while_an_earlier_ones_workload_exists() -> None:
    h = certified(end=False)
    run = h.records[-1].obj
    h.add("Pod", "ADDED", workload("Pod", "late-0", run, "check-0"))
    h.add("MPIJob", "ADDED", workload("MPIJob", "late-1", run, "check-1"))
    found = [v for v in violations(h, Rules(max_nodes_per_domain=2)) if v.invariant == 4]
    assert len(found) == 3  # both created after the Run ended; check-1's while check-0's Pod exists
    assert any("of check check-1 created while ['Pod late-0 (check-0)'] exist" in v.message for v in found)


def test_a_run_ending_while_its_workload_exists() -> None:
    rec = passing()
    h = certified(rec, end=False)
    h.records = [r for r in h.records if not (r.kind == "Pod" and r.type == "DELETED" and r.name == "r1-check-1-1")]
    only(check(h.records, Rules(max_nodes_per_domain=2))[0], 4, "ended while its workloads exist: ['Pod r1-check-1-1']")


def test_a_workload_seen_gone_by_a_relist_is_gone() -> None:
    """CI's chaos campaign, seed 1 (invariant 4, a false violation): after a watch broke, the
    recorder's relist records a vanished Pod as DELETED with its name, namespace and uid only (no
    labels), and the checker, which looked for the Run's label first, kept the Pod alive."""
    h = certified(end=False)
    for i, r in enumerate(h.records):
        if r.kind == "Pod" and r.type == "DELETED":
            meta = r.obj["metadata"]
            h.records[i] = dataclasses.replace(r, obj={"metadata": {k: meta[k] for k in ("name", "namespace", "uid")}})
    assert violations(h) == []


def test_a_run_seen_gone_by_a_relist_no_longer_holds_its_nodes() -> None:
    """A relist's DELETED Run carries its name, namespace and uid only: the checker judges it
    by the Run it last saw (participants included), not by the bare record."""
    h = certified(end=False)
    finished = h.records[-1].obj
    h.unreserve("n0")
    h.unreserve("n1")
    h.add("Run", "DELETED", {"metadata": {k: finished["metadata"][k] for k in ("name", "namespace", "uid")}})
    other = copy.deepcopy(finished)
    other["metadata"].update(name="r2", uid="run-2", creationTimestamp="2026-11-30T01:00:00Z")
    other["spec"]["profile"]["name"] = "other"
    other["status"] = {"phase": "Running"}
    h.add("Run", "ADDED", other)
    assert [v.message for v in check(h.records, Rules(max_nodes_per_domain=2))[0]] == []


# --- 5. the operator's cordon --------------------------------------------------------------------


def test_the_operators_cordon_removed_by_someone_else() -> None:
    h = certified()
    h.operator("cordon", node="n0")
    h.node("n0", lambda n: n["spec"].__setitem__("unschedulable", True))
    h.node("n0", lambda n: n["spec"].pop("unschedulable"))
    only(violations(h), 5, "Node n0: the operator's cordon was removed by someone else")


def test_the_operator_may_uncordon() -> None:
    h = certified()
    h.operator("cordon", node="n0")
    h.node("n0", lambda n: n["spec"].__setitem__("unschedulable", True))
    h.operator("uncordon", node="n0")
    h.node("n0", lambda n: n["spec"].pop("unschedulable"))
    assert violations(h) == []


# --- 6. every Run ends, every request is answered ----------------------------------------------


def test_a_run_that_never_ends() -> None:
    h = certified(end=False)
    h.records = [r for r in h.records if not (r.kind == "Run" and r.type == "MODIFIED")]
    found = violations(h, dataclasses.replace(RULES, faults_end_at=1000.0))  # admitted during the faults
    assert {v.invariant for v in found} == {3, 6}  # its Pass projections never verified either
    assert any("Run r1 never ended (phase Running)" in v.message for v in found if v.invariant == 6)


def test_a_run_admitted_after_the_faults_is_judged_only_once_its_deadline_has_passed() -> None:
    """Seed 26: a recurrence admitted a Run 0.2 s before the history ended, long after the faults
    stopped; it could not have ended yet, and nothing says it would not in time."""
    h = certified(end=False)
    h.records = [r for r in h.records if not (r.kind == "Run" and r.type == "MODIFIED")]
    assert not [v for v in violations(h) if v.invariant == 6]  # RULES: the faults ended at 10 s
    late = h.records[-1]
    deadline = next(r for r in h.records if r.kind == "Run").obj["spec"]["suiteDeadlineSeconds"]
    h.records.append(dataclasses.replace(late, rv=late.rv + 1, at=late.at + deadline + RULES.end_margin_s + 1))
    assert any("Run r1 never ended" in v.message for v in violations(h) if v.invariant == 6)


def test_a_run_that_ends_too_late() -> None:
    h = certified()
    late = Rules(max_nodes_per_domain=2, faults_end_at=0.0, end_margin_s=0.0)
    rec = h.records[-1].obj
    rec["spec"]["suiteDeadlineSeconds"] = 1
    only(violations(h, late), 6, "ended")


def test_a_request_never_answered() -> None:
    h = certified()
    h.operator("request", nodes=["n3"], profile="gpu")
    h.node("n3", lambda n: n["metadata"]["labels"].__setitem__(keys.CERTIFY_LABEL, "gpu"))
    only(violations(h), 6, "Node n3 is still waiting for admission")


def test_the_end_is_not_checked_while_faults_go_on() -> None:
    h = certified(end=False)
    h.records = [r for r in h.records if not (r.kind == "Run" and r.type == "MODIFIED")]
    assert {v.invariant for v in violations(h, Rules(max_nodes_per_domain=2))} <= {3}


# --- 7. no duplicates --------------------------------------------------------------------------------


def test_a_second_live_workflow_of_one_run() -> None:
    h = certified()
    h.add(
        "Workflow",
        "ADDED",
        {"metadata": {"name": "r1-b", "namespace": "ns", "labels": {keys.RUN_UID_LABEL: "run-uid"}}},
    )
    only(violations(h), 7, "Workflow r1-b created while r1 of the same Run exists")


def test_evidence_created_twice() -> None:
    h = certified()
    cm = next(r.obj for r in h.records if r.kind == "ConfigMap" and r.name == "r1-evidence")
    h.add("ConfigMap", "DELETED", cm)
    again = copy.deepcopy(cm)
    again["metadata"]["uid"] = "uid-again"
    h.add("ConfigMap", "ADDED", again)
    only(violations(h), 7, "evidence ConfigMap r1-evidence of one Run created twice")


def test_a_duplicate_run_for_one_admission() -> None:
    h = History()
    rec = passing()
    running = copy.deepcopy(rec.run)
    running["status"] = {"phase": "Running"}
    h.add("Run", "ADDED", running)
    twin = copy.deepcopy(running)
    twin["metadata"].update(name="r1-twin", uid="run-twin")
    h.add("Run", "ADDED", twin)
    found = check(h.records, Rules(max_nodes_per_domain=2))[0]
    assert {v.invariant for v in found} == {1, 7}
    assert any("Run r1-twin duplicates Run r1" in v.message for v in found)
