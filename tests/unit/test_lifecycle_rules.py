"""Lifecycle rules, pure and table-driven: recurrence (``due_for_recertification``), retention
(``expired_runs``), release and reservation patches with the retry attempt
(controller/rules/manifests.py), the Node view's attempt and completion parsing, the digests
reported through a Workflow (``reported_digests``), the suite deadline (``deadline_passed``)
and the Workflow cache view (``workflow_view``). No cluster, no API mocks."""

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.reconcile.accept import reported_digests
from controller.reconcile.lifecycle import (
    DEFAULT_KEEP,
    due_for_recertification,
    expired_runs,
    legacy_requests,
    recurrence_interval,
)
from controller.reconcile.state import workflow_view
from controller.rules.manifests import release_patch, reservation_patch
from controller.rules.nextaction import deadline_passed
from controller.rules.nodes import RESERVED_TAINT_KEY, NodeView, node_view
from controller.rules.runview import RunView, run_view
from shared import keys
from tests.unit.node_builders import NodeBuilder, make_node

Obj = dict[str, Any]
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
DAY = timedelta(days=1)
PROFILE = "gpu-basic"
RUN_UID = "uid-run-1"


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def certified(
    builder: NodeBuilder, profile: str = PROFILE, completed: Any = None, ago: timedelta = 2 * DAY
) -> NodeBuilder:
    value = stamp(NOW - ago) if completed is None else completed
    return builder.label(keys.certified_label(profile), "Pass").annotation(
        keys.certified_label(profile), json.dumps({"verdict": "Pass", "completionTime": value})
    )


def merge(target: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386), as the API server applies it."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


# -- due_for_recertification -------------------------------------------------------------------

DUE_CASES: dict[str, tuple[NodeBuilder, bool]] = {
    "two-days-old": (certified(make_node("n")), True),
    "just-over-interval": (certified(make_node("n"), ago=DAY + timedelta(seconds=1)), True),
    "just-under-interval": (certified(make_node("n"), ago=DAY - timedelta(seconds=1)), False),
    "fresh": (certified(make_node("n"), ago=timedelta(minutes=5)), False),
    "in-the-future": (certified(make_node("n"), ago=-DAY), False),
    "reserved": (certified(make_node("n")).reserved_by("some-run", {"run": "r", "index": 0}), False),
    "signal-tainted": (certified(make_node("n")).signal_taint("some-run"), False),
    # Only what a kubelet cannot write holds recurrence off (issue 42 M-D): its own cordon, a
    # reservation label without Signal's taint and the old request label do not.
    "cordoned-spec": (certified(make_node("n")).unschedulable(), True),
    "cordoned-taint": (certified(make_node("n")).cordon_taint(), True),
    "reservation-label-alone": (certified(make_node("n")).reservation_label("some-run", {"run": "r"}), True),
    "old-request-label": (certified(make_node("n")).label(keys.LEGACY_CERTIFY_LABEL, "other"), True),
    "already-requested": (certified(make_node("n")).requested(PROFILE), False),
    "requested-by-other-profile": (certified(make_node("n")).requested("other"), False),
    "never-certified": (make_node("n"), False),
    "other-profile-only": (certified(make_node("n"), profile="other"), False),
    "unparseable-time": (certified(make_node("n"), completed="yesterday"), False),
    "empty-time": (certified(make_node("n"), completed=""), False),
    "non-string-time": (certified(make_node("n"), completed=12345), False),
    "garbled-annotation": (make_node("n").annotation(keys.certified_label(PROFILE), "{not json"), False),
    "offset-time": (certified(make_node("n"), completed="2026-11-28T12:00:00+02:00"), True),
    "not-ready-still-due": (certified(make_node("n")).ready(False), True),
}


def due(nodes: list[NodeView], profile: str, interval: timedelta, now: datetime) -> list[str]:
    """Recurrence over the completion times of a profile's record; the tables below write
    them as the Node annotations of old, and ``record`` reads them back as the record would
    hold them (the Nodes' own annotations are never read by recurrence itself)."""
    return due_for_recertification(nodes, record(nodes, profile), interval, now)


def record(nodes: list[NodeView], profile: str) -> dict[str, str]:
    return {n.name: n.completed[profile] for n in nodes if profile in n.completed}


@pytest.mark.parametrize("case", sorted(DUE_CASES))
def test_due_for_recertification(case: str) -> None:
    builder, is_due = DUE_CASES[case]
    assert due([builder.view()], PROFILE, DAY, NOW) == (["n"] if is_due else [])


def test_recurrence_reads_the_record_not_the_nodes_claim() -> None:
    """A kubelet's far-future annotation does not hold recurrence off (issue 12, item 6), and a
    Node the record does not name is never due, whatever it claims."""
    forged = certified(make_node("n"), completed="2999-01-01T00:00:00Z").view()
    assert due_for_recertification([forged], {"n": stamp(NOW - 2 * DAY)}, DAY, NOW) == ["n"]
    assert due_for_recertification([certified(make_node("m")).view()], {}, DAY, NOW) == []


def test_due_nodes_are_sorted_and_filtered_together() -> None:
    nodes = [
        certified(make_node("c")).view(),
        certified(make_node("a")).view(),
        certified(make_node("b"), ago=timedelta(hours=1)).view(),
        certified(make_node("d")).signal_taint("some-run").view(),
        certified(make_node("e"), profile="other").view(),
    ]
    assert due(nodes, PROFILE, DAY, NOW) == ["a", "c"]
    assert due(nodes, "other", DAY, NOW) == ["e"]
    assert due(nodes, PROFILE, timedelta(minutes=30), NOW) == ["a", "b", "c"]
    assert due([], PROFILE, DAY, NOW) == []


def test_legacy_requests_are_warned_once_per_value() -> None:
    old = make_node("a").label(keys.LEGACY_CERTIFY_LABEL, PROFILE).view()
    plain = make_node("b").requested(PROFILE).view()
    assert legacy_requests([plain, old], {}) == [old]
    assert legacy_requests([plain, old], {old.uid: PROFILE}) == []
    assert legacy_requests([plain, old], {old.uid: "another"}) == [old]


def test_time_without_offset_is_skipped_not_fatal() -> None:
    nodes = [
        certified(make_node("a")).view(),
        certified(make_node("b"), completed="2026-11-28T12:00:00").view(),
    ]
    assert due(nodes, PROFILE, DAY, NOW) == ["a"]


# -- expired_runs --------------------------------------------------------------------------------


def run(
    name: str,
    profile: str = PROFILE,
    phase: str | None = "Succeeded",
    released: str | None = "True",
    completed: str | None = None,
) -> RunView:
    status: Obj = {}
    if phase is not None:
        status["phase"] = phase
    if released is not None:
        status["conditions"] = [{"type": "Released", "status": released}]
    if completed is not None:
        status["completionTime"] = completed
    return run_view({"metadata": {"name": name}, "spec": {"profile": {"name": profile}}, "status": status})


def at(hour: int) -> str:
    return f"2026-11-30T{hour:02d}:00:00Z"


def names(runs: list[RunView]) -> list[str]:
    return sorted(r.name for r in runs)


def test_keeps_the_newest_n() -> None:
    runs = [run(f"r{h}", completed=at(h)) for h in range(6)]
    assert names(expired_runs(runs, {PROFILE: 2})) == ["r0", "r1", "r2", "r3"]
    assert names(expired_runs(runs, {PROFILE: 6})) == []


def test_a_run_the_certified_record_cites_is_kept() -> None:
    """Its evidence proves a recorded Pass (issue 42, controller/reconcile/recordproof.py)."""
    raws = [run(f"r{h}", completed=at(h)).raw for h in range(4)]
    for i, raw in enumerate(raws):
        raw["metadata"]["uid"] = f"uid-{i}"
    runs = [run_view(raw) for raw in raws]
    assert names(expired_runs(runs, {PROFILE: 1})) == ["r0", "r1", "r2"]
    assert names(expired_runs(runs, {PROFILE: 1}, frozenset({"uid-1"}))) == ["r0", "r2"]
    assert names(expired_runs(runs, {PROFILE: 0})) == names(runs)


def test_order_is_by_completion_not_by_name_or_input_order() -> None:
    runs = [run("z-old", completed=at(1)), run("a-new", completed=at(9)), run("m-mid", completed=at(5))]
    assert names(expired_runs(runs, {PROFILE: 1})) == ["m-mid", "z-old"]
    assert names(expired_runs(list(reversed(runs)), {PROFILE: 1})) == ["m-mid", "z-old"]


def test_same_completion_time_breaks_ties_by_name() -> None:
    runs = [run("a", completed=at(3)), run("b", completed=at(3)), run("c", completed=at(3))]
    assert names(expired_runs(runs, {PROFILE: 1})) == ["a", "b"]


def test_runs_without_completion_time_expire_first() -> None:
    runs = [run("undated"), run("dated", completed=at(0))]
    assert names(expired_runs(runs, {PROFILE: 1})) == ["undated"]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Inconclusive", "Canceled"])
def test_every_terminal_phase_can_expire(phase: str) -> None:
    runs = [run("old", phase=phase, completed=at(0)), run("new", completed=at(1))]
    assert names(expired_runs(runs, {PROFILE: 1})) == ["old"]


@pytest.mark.parametrize("phase", [None, "Pending", "Admitted", "Running", "Bogus"])
def test_non_terminal_runs_never_expire(phase: str | None) -> None:
    runs = [run("live", phase=phase, completed=at(0)), run("done", completed=at(1))]
    assert names(expired_runs(runs, {PROFILE: 0})) == ["done"]


@pytest.mark.parametrize("released", [None, "False", "Unknown"])
def test_runs_still_holding_their_group_never_expire(released: str | None) -> None:
    runs = [run("held", phase="Failed", released=released, completed=at(0)), run("gone", completed=at(1))]
    assert names(expired_runs(runs, {PROFILE: 0})) == ["gone"]


def test_unreleased_runs_do_not_count_against_retention() -> None:
    """Only released terminal Runs fill the quota: the newest released ones are kept."""
    runs = [
        run("held-newest", phase="Failed", released="False", completed=at(9)),
        run("r1", completed=at(1)),
        run("r2", completed=at(2)),
    ]
    assert names(expired_runs(runs, {PROFILE: 1})) == ["r1"]


def test_profiles_are_independent() -> None:
    runs = [run(f"a{h}", profile="a", completed=at(h)) for h in range(4)]
    runs += [run(f"b{h}", profile="b", completed=at(h + 10)) for h in range(3)]
    assert names(expired_runs(runs, {"a": 1, "b": 2})) == ["a0", "a1", "a2", "b0"]
    assert names(expired_runs(runs, {"a": 10, "b": 0})) == ["b0", "b1", "b2"]


def test_default_keeps_ten() -> None:
    assert DEFAULT_KEEP == 10
    runs = [run(f"r{h:02d}", completed=at(h)) for h in range(13)]
    assert names(expired_runs(runs, {})) == ["r00", "r01", "r02"]
    assert names(expired_runs(runs, {"other-profile": 1})) == ["r00", "r01", "r02"]
    assert expired_runs(runs[:10], {}) == []


def test_status_missing_or_null_never_expires() -> None:
    bare = {"metadata": {"name": "x"}, "spec": {"profile": {"name": PROFILE}}}
    null = {**bare, "status": None}
    assert expired_runs([run_view(bare), run_view(null)], {PROFILE: 0}) == []


# -- reservation_patch / release_patch -------------------------------------------------------------

RUN = {"metadata": {"name": "r1", "namespace": "signal", "uid": RUN_UID}}


def reserved_node(request: str = PROFILE, *, rv: str = "5") -> NodeBuilder:
    detail = {"run": "r1", "namespace": "signal", "uid": RUN_UID, "index": 0, "request": request}
    return make_node("gpu-000").resource_version(rv).reserved_by(RUN_UID, detail).signal_taint(RUN_UID)


def test_reservation_consumes_the_request_and_the_attempt() -> None:
    node = (
        make_node("gpu-000")
        .resource_version("9")
        .requested(PROFILE)
        .annotation(keys.ATTEMPT_ANNOTATION, f"{PROFILE}:3")
        .taint("dedicated", "ml")
        .signal_taint("stale-run")
        .build()
    )
    patch = reservation_patch(node, RUN, 2)
    assert patch["metadata"]["resourceVersion"] == "9"
    assert patch["metadata"]["labels"] == {keys.RESERVED_BY_LABEL: RUN_UID, keys.CERTIFY_LABEL: None}
    annotations = patch["metadata"]["annotations"]
    assert annotations[keys.ATTEMPT_ANNOTATION] is None
    assert json.loads(annotations[keys.RESERVATION_ANNOTATION]) == {
        "run": "r1",
        "namespace": "signal",
        "uid": RUN_UID,
        "index": 2,
        "request": PROFILE,
        "nextAttempt": f"{PROFILE}:3",  # kept so that a rollback restores it with the request
        "doNotDisrupt": list(keys.DO_NOT_DISRUPT_ANNOTATIONS),  # what the release removes again
    }
    assert all(annotations[k] == "true" for k in keys.DO_NOT_DISRUPT_ANNOTATIONS)
    assert patch["spec"]["taints"] == [
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
        {"key": RESERVED_TAINT_KEY, "value": RUN_UID, "effect": "NoSchedule"},
    ]
    view = node_view(merge(node, patch))
    assert view.next_attempt is None
    assert keys.CERTIFY_LABEL not in view.labels
    assert view.reservation is not None
    assert (view.reservation.run_uid, view.reservation.index) == (RUN_UID, 2)
    assert view.signal_taint_uid == RUN_UID


@pytest.mark.parametrize("operators", [(), (keys.AUTOSCALER_SCALE_DOWN_DISABLED,), keys.DO_NOT_DISRUPT_ANNOTATIONS])
def test_autoscalers_leave_a_held_node_alone_and_the_release_removes_only_what_signal_added(
    operators: tuple[str, ...],
) -> None:
    """Issue 43, item 5: while Signal holds a Node it carries the cluster-autoscaler and Karpenter
    do-not-disrupt annotations, set and removed in the same patches as the reservation (a crash
    between steps leaves none behind); an operator's own annotation is never removed."""
    node = make_node("gpu-000").resource_version("9").requested(PROFILE)
    for key in operators:
        node.annotation(key, "true")
    raw = node.build()
    reserved = merge(raw, reservation_patch(raw, RUN, 0))
    assert all(reserved["metadata"]["annotations"][k] == "true" for k in keys.DO_NOT_DISRUPT_ANNOTATIONS)
    assert node_view(reserved).guards == keys.DO_NOT_DISRUPT_ANNOTATIONS
    release = release_patch(reserved, RUN_UID)
    assert release is not None
    released = merge(reserved, release)
    left = tuple(k for k in keys.DO_NOT_DISRUPT_ANNOTATIONS if k in (released["metadata"].get("annotations") or {}))
    assert left == operators


def test_a_release_removes_no_annotation_a_kubelet_listed_in_the_reservation() -> None:
    detail = {"run": "r1", "uid": RUN_UID, "doNotDisrupt": ["example.com/operator-key", keys.KARPENTER_DO_NOT_DISRUPT]}
    raw = reserved_node().build()
    raw["metadata"]["annotations"] |= {
        keys.RESERVATION_ANNOTATION: json.dumps(detail),
        "example.com/operator-key": "keep",
        keys.KARPENTER_DO_NOT_DISRUPT: "true",
    }
    release = release_patch(raw, RUN_UID)
    assert release is not None
    assert release["metadata"]["annotations"] == {
        keys.RESERVATION_ANNOTATION: None,
        keys.KARPENTER_DO_NOT_DISRUPT: None,
    }


def test_reservation_of_an_unrequested_node_records_an_empty_request() -> None:
    patch = reservation_patch(make_node("n").build(), RUN, 0)
    assert json.loads(patch["metadata"]["annotations"][keys.RESERVATION_ANNOTATION])["request"] == ""


def test_release_of_a_node_not_held_is_none() -> None:
    assert release_patch(make_node("n").build(), RUN_UID) is None
    assert release_patch(reserved_node().build(), "another-run") is None
    other = make_node("n").reserved_by("another-run").signal_taint("another-run").build()
    assert release_patch(other, RUN_UID, restore_request=PROFILE, next_attempt=2) is None


def test_plain_release_removes_exactly_signals_reservation() -> None:
    node = reserved_node().taint("dedicated", "ml").unschedulable().build()
    patch = release_patch(node, RUN_UID)
    assert patch == {
        "metadata": {
            "resourceVersion": "5",
            "labels": {keys.RESERVED_BY_LABEL: None},
            "annotations": {keys.RESERVATION_ANNOTATION: None},
        },
        "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
    }
    released = merge(node, patch)
    assert released["spec"]["unschedulable"] is True  # an operator's cordon stays
    view = node_view(released)
    assert (view.reservation, view.signal_taint_uid, view.next_attempt) == (None, None, None)
    assert keys.CERTIFY_LABEL not in view.labels


def test_release_keeps_an_operator_cordon_taint() -> None:
    node = reserved_node().cordon_taint().build()
    patch = release_patch(node, RUN_UID)
    assert patch is not None
    assert patch["spec"]["taints"] == [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]


def test_release_removes_the_taints_field_when_nothing_remains() -> None:
    patch = release_patch(reserved_node().build(), RUN_UID)
    assert patch is not None
    assert patch["spec"] == {"taints": None}


def test_release_of_a_node_held_only_by_our_taint() -> None:
    node = make_node("n").resource_version("3").signal_taint(RUN_UID).build()
    patch = release_patch(node, RUN_UID, restore_request=PROFILE, next_attempt=2)
    assert patch == {"metadata": {"resourceVersion": "3"}, "spec": {"taints": None}}


def test_release_keeps_another_runs_taint() -> None:
    node = reserved_node().signal_taint("another-run").build()
    patch = release_patch(node, RUN_UID)
    assert patch is not None
    assert patch["spec"]["taints"] == [{"key": RESERVED_TAINT_KEY, "value": "another-run", "effect": "NoSchedule"}]


RELEASE_CASES = [
    # id, node, profile whose request is restored, next attempt, restored request label, attempt annotation
    ("plain", reserved_node(), None, None, None, None),
    ("attempt-without-restore", reserved_node(), None, 2, None, None),
    ("restore", reserved_node(), PROFILE, None, PROFILE, None),
    ("retry", reserved_node(), PROFILE, 2, PROFILE, f"{PROFILE}:2"),
    ("retry-attempt-ten", reserved_node(), PROFILE, 10, PROFILE, f"{PROFILE}:10"),
    ("newer-request-wins", reserved_node().requested("other"), PROFILE, 2, None, None),
    ("same-request-present", reserved_node().requested(PROFILE), PROFILE, 2, None, None),
    # The Run's profile is restored whatever the annotation (the kubelet's to write) says.
    ("no-request-recorded", reserved_node(request=""), PROFILE, 2, PROFILE, f"{PROFILE}:2"),
    ("annotation-names-another-profile", reserved_node(request="victim"), PROFILE, None, PROFILE, None),
    (
        "garbled-reservation-annotation",
        make_node("gpu-000").resource_version("5").reserved_by(RUN_UID, "{garbled").signal_taint(RUN_UID),
        PROFILE,
        2,
        PROFILE,
        f"{PROFILE}:2",
    ),
    (
        "reservation-annotation-not-an-object",
        make_node("gpu-000").resource_version("5").reserved_by(RUN_UID, "[1]").signal_taint(RUN_UID),
        PROFILE,
        None,
        PROFILE,
        None,
    ),
    (
        "no-reservation-annotation",
        make_node("gpu-000").resource_version("5").reserved_by(RUN_UID).signal_taint(RUN_UID),
        None,
        2,
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("builder", "restore", "attempt", "restored", "annotation"),
    [pytest.param(*case[1:], id=case[0]) for case in RELEASE_CASES],
)
def test_release_patch_request_and_attempt(
    builder: NodeBuilder, restore: str | None, attempt: int | None, restored: str | None, annotation: str | None
) -> None:
    node = builder.build()
    patch = release_patch(node, RUN_UID, restore_request=restore, next_attempt=attempt)
    assert patch is not None
    meta = patch["metadata"]
    assert meta["resourceVersion"] == "5"
    assert meta["labels"][keys.RESERVED_BY_LABEL] is None
    assert meta["annotations"][keys.RESERVATION_ANNOTATION] is None
    assert meta["labels"].get(keys.CERTIFY_LABEL) == restored
    assert meta["annotations"].get(keys.ATTEMPT_ANNOTATION) == annotation
    view = node_view(merge(node, patch))
    before = (node["metadata"].get("labels") or {}).get(keys.CERTIFY_LABEL)
    assert view.labels.get(keys.CERTIFY_LABEL) == (restored or before)
    assert view.next_attempt == ((PROFILE, attempt) if annotation else None)
    assert view.reservation is None
    assert not view.signal_tainted


def test_retry_round_trip_reserve_release_reserve() -> None:
    """A retry gives the Node back requested with the next attempt; the next reservation consumes both."""
    node = make_node("gpu-000").requested(PROFILE).build()
    reserved = merge(node, reservation_patch(node, RUN, 0))
    patch = release_patch(reserved, RUN_UID, restore_request=PROFILE, next_attempt=2)
    assert patch is not None
    retried = merge(reserved, patch)
    view = node_view(retried)
    assert view.labels[keys.CERTIFY_LABEL] == PROFILE
    assert view.next_attempt == (PROFILE, 2)
    run2 = {"metadata": {"name": "r2", "namespace": "signal", "uid": "uid-run-2"}}
    again = node_view(merge(retried, reservation_patch(retried, run2, 0)))
    assert again.next_attempt is None
    assert keys.CERTIFY_LABEL not in again.labels
    assert again.reservation is not None
    assert again.reservation.run_uid == "uid-run-2"


def test_rollback_of_a_retry_admission_keeps_its_attempt() -> None:
    node = make_node("gpu-000").requested(PROFILE).annotation(keys.ATTEMPT_ANNOTATION, f"{PROFILE}:2").build()
    reserved = merge(node, reservation_patch(node, RUN, 0))
    patch = release_patch(reserved, RUN_UID, restore_request=PROFILE)
    assert patch is not None
    rolled_back = node_view(merge(reserved, patch))
    assert rolled_back.labels[keys.CERTIFY_LABEL] == PROFILE
    assert rolled_back.next_attempt == (PROFILE, 2)


# -- node_view: next_attempt and completed ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f"{PROFILE}:2", (PROFILE, 2)),
        ("p:10", ("p", 10)),
        ("p:0", ("p", 0)),
        ("p:007", ("p", 7)),
        ("a:b:3", ("a:b", 3)),
        (None, None),
        ("", None),
        ("p", None),
        ("p:", None),
        (":3", None),
        ("p:x", None),
        ("p:-1", None),
        ("p:+1", None),
        ("p:1.5", None),
        ("p: 2", None),
        ("p:2 ", None),
    ],
)
def test_node_view_next_attempt(value: str | None, expected: tuple[str, int] | None) -> None:
    builder = make_node("n")
    if value is not None:
        builder.annotation(keys.ATTEMPT_ANNOTATION, value)
    assert builder.view().next_attempt == expected


@pytest.mark.parametrize("value", ["p:²", "p:①"])
def test_node_view_next_attempt_non_ascii_digit_is_garbled(value: str) -> None:
    assert make_node("n").annotation(keys.ATTEMPT_ANNOTATION, value).view().next_attempt is None


def test_node_view_completed() -> None:
    view = (
        make_node("n")
        .annotation(keys.certified_label("a"), json.dumps({"completionTime": "2026-11-30T00:00:00Z"}))
        .annotation(keys.certified_label("b"), "{garbled")
        .annotation(keys.certified_label("c"), json.dumps({"completionTime": 5}))
        .annotation(keys.certified_label("d"), json.dumps(["2026-11-30T00:00:00Z"]))
        .annotation(keys.certified_label("e"), json.dumps({"verdict": "Pass"}))
        .annotation("example.com/a", json.dumps({"completionTime": "2026-11-30T00:00:00Z"}))
        .view()
    )
    assert dict(view.completed) == {"a": "2026-11-30T00:00:00Z"}


# -- reported_digests ------------------------------------------------------------------------------

DIGEST = "sha256:" + "d" * 64


def step(index: Any = "0", digest: Any = DIGEST, template: str = "check") -> Obj:
    node: Obj = {"templateName": template, "phase": "Succeeded"}
    if index is not None:
        node["inputs"] = {"parameters": [{"name": "other", "value": "x"}, {"name": "index", "value": index}]}
    if digest is not None:
        node["outputs"] = {"parameters": [{"name": "evidence-digest", "value": digest}]}
    return node


def workflow(*steps: Obj, phase: str = "Succeeded") -> Obj:
    return {
        "metadata": {"name": "r1", "uid": "wf-uid"},
        "spec": {"shutdown": None, "templates": ["big"]},
        "status": {"phase": phase, "finishedAt": "t", "nodes": {f"n{i}": s for i, s in enumerate(steps)}},
    }


REPORTED_CASES = {
    "none": (None, {}),
    "no-status": ({"metadata": {"name": "r1"}}, {}),
    "null-status": ({"metadata": {"name": "r1"}, "status": None}, {}),
    "no-nodes": ({"status": {"phase": "Running"}}, {}),
    "one-check": (workflow(step("0")), {0: DIGEST}),
    "several": (
        workflow(step("0"), step("1", "sha256:1"), step("2", "sha256:2")),
        {0: DIGEST, 1: "sha256:1", 2: "sha256:2"},
    ),
    "other-template": (workflow(step("0", template="main"), step("1", template="check-pods")), {}),
    "no-inputs": (workflow(step(None)), {}),
    "no-outputs": (workflow(step("0", digest=None)), {}),
    "empty-digest": (workflow(step("0", digest="")), {}),
    "non-digit-index": (workflow(step("x")), {}),
    "negative-index": (workflow(step("-1")), {}),
    "empty-index": (workflow(step("")), {}),
    "integer-index": (workflow(step(3)), {3: DIGEST}),
    "null-inputs": (workflow({**step("0"), "inputs": None}), {}),
    "no-parameters": (workflow({**step("0"), "outputs": {}}), {}),
    "other-output-name": (
        workflow({**step("0"), "outputs": {"parameters": [{"name": "digest", "value": DIGEST}]}}),
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(REPORTED_CASES))
def test_reported_digests(case: str) -> None:
    given, expected = REPORTED_CASES[case]
    assert reported_digests(given) == expected


def test_reported_digests_non_ascii_digit_index_is_ignored() -> None:
    assert reported_digests(workflow(step("²"), step("1"))) == {1: DIGEST}


# -- deadline_passed -------------------------------------------------------------------------------

START = datetime(2026, 11, 30, 0, 0, 0, tzinfo=UTC)


def running(start: str | None = "2026-11-30T00:00:00Z", deadline: Any = 600, status: bool = True) -> Obj:
    body: Obj = {"spec": {"suiteDeadlineSeconds": deadline}}
    if status:
        body["status"] = {"phase": "Running"} if start is None else {"phase": "Running", "startTime": start}
    return body


@pytest.mark.parametrize(
    ("body", "now", "expected"),
    [
        pytest.param(running(), START + timedelta(seconds=599), False, id="before"),
        pytest.param(running(), START + timedelta(seconds=599, microseconds=999999), False, id="just-before"),
        pytest.param(running(), START + timedelta(seconds=600), True, id="exactly"),
        pytest.param(running(), START + timedelta(seconds=601), True, id="after"),
        pytest.param(running(), START - timedelta(hours=1), False, id="clock-behind"),
        # Not an integer: no deadline, and the view names the problem (the loop ends the Run).
        pytest.param(running(deadline="600"), START + timedelta(seconds=600), False, id="string-deadline"),
        pytest.param(running(deadline=1), START + timedelta(seconds=1), True, id="one-second"),
        pytest.param(running("2026-11-30T02:00:00+02:00"), START + timedelta(seconds=600), True, id="offset"),
        pytest.param(running(None), START + timedelta(days=9), False, id="no-start-time"),
        pytest.param(running(""), START + timedelta(days=9), False, id="empty-start-time"),
        pytest.param(running(status=False), START + timedelta(days=9), False, id="no-status"),
        pytest.param({"spec": {"suiteDeadlineSeconds": 600}, "status": None}, START + DAY, False, id="null-status"),
    ],
)
def test_deadline_passed(body: Obj, now: datetime, expected: bool) -> None:
    assert deadline_passed(run_view(body), now) is expected


def test_a_deadline_of_the_wrong_type_is_a_problem_not_a_pass() -> None:
    view = run_view(running(deadline="600"))
    assert view.problem is not None
    assert "spec.suiteDeadlineSeconds" in view.problem


# -- workflow_view ---------------------------------------------------------------------------------


def test_workflow_view_keeps_only_check_steps_and_their_parameters() -> None:
    check = {**step("1"), "displayName": "check(1)", "children": ["x"], "startedAt": "t0", "message": "m"}
    full = workflow(check, step("0", template="main"), {"templateName": "cleanup", "phase": "Failed"})
    full["metadata"]["labels"] = {keys.RUN_UID_LABEL: "u"}
    full["spec"]["shutdown"] = "Terminate"
    kept = copy.deepcopy(full["metadata"])
    full["metadata"]["managedFields"] = [{"manager": "workflow-controller", "fieldsV1": {"f:status": {}}}]
    view = workflow_view(full)
    assert view == {
        "metadata": kept,
        "spec": {"shutdown": "Terminate"},
        "status": {
            "phase": "Succeeded",
            "finishedAt": "t",
            "nodes": {
                "n0": {
                    "templateName": "check",
                    "phase": "Succeeded",
                    "inputs": check["inputs"],
                    "outputs": check["outputs"],
                }
            },
        },
    }
    assert reported_digests(view) == reported_digests(full) == {1: DIGEST}


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"name": "w"}},
        {"metadata": {"name": "w"}, "spec": None, "status": None},
        {"metadata": {"name": "w"}, "status": {"nodes": None}},
        {"metadata": {"name": "w"}, "status": {"nodes": {}}},
    ],
    ids=["bare", "nulls", "null-nodes", "empty-nodes"],
)
def test_workflow_view_of_a_young_workflow(body: Obj) -> None:
    assert workflow_view(body) == {
        "metadata": {"name": "w"},
        "spec": {"shutdown": None},
        "status": {"phase": None, "finishedAt": None, "nodes": {}},
    }


def test_workflow_view_keeps_checks_without_outputs_yet() -> None:
    view = workflow_view(workflow(step("0", digest=None)))
    assert view["status"]["nodes"]["n0"]["outputs"] is None
    assert reported_digests(view) == {}


# -- recurrence_interval ----------------------------------------------------------------------------


def profile_obj(interval: Any = "1h", ready: str | None = "True", observed: Any = 3, generation: int = 3) -> Obj:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready, "reason": "r"}]
    spec: Obj = {} if interval is None else {"recurrence": {"interval": interval}}
    return {
        "metadata": {"name": PROFILE, "generation": generation},
        "spec": spec,
        "status": {"observedGeneration": observed, "conditions": conditions},
    }


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        pytest.param(profile_obj(), timedelta(hours=1), id="ready"),
        pytest.param(profile_obj(ready="False"), None, id="not-ready"),
        pytest.param(profile_obj(ready=None), None, id="never-reconciled"),
        pytest.param(profile_obj(observed=2), None, id="ready-for-an-older-generation"),
        pytest.param(profile_obj(interval=None), None, id="no-recurrence"),
        pytest.param(profile_obj(interval="often"), None, id="not-a-duration"),
        pytest.param(profile_obj(interval=3600), None, id="not-a-string"),
        pytest.param(profile_obj(interval="0s"), None, id="zero"),
        pytest.param(profile_obj(interval="9" * 30 + "h"), None, id="beyond-a-timedelta"),
    ],
)
def test_recurrence_acts_only_for_a_ready_profile(profile: Obj, expected: timedelta | None) -> None:
    assert recurrence_interval(profile) == expected
