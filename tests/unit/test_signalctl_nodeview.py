"""signalctl/nodeview.py: whether a Node's projection is current, and why not (pure)."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import certified, keys
from shared.classify import freshness_window
from signalctl.nodeview import Behind, cordoned, describe_node, not_current, projected_profiles

Obj = dict[str, Any]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SOURCE = "sha256:" + "1" * 64
EVIDENCE = "sha256:" + "2" * 64


NODE_UID = "node-uid"


def record_entry(**changes: str) -> dict[str, str]:
    entry = {
        "verdict": "Pass",
        "run": "r1",
        "namespace": "signal-system",
        "runUID": "run-uid",
        "runCreated": "2026-11-30T10:00:00Z",
        "completionTime": (NOW - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "evidenceDigest": EVIDENCE,
        "sourceDigest": SOURCE,
        "profileGeneration": "1",
        "nodeUID": NODE_UID,
    }
    return {**entry, **changes}


def profile_with(record: dict[str, dict[str, str]] | None) -> Obj:
    status = {} if record is None else {"certifiedNodes": certified.encode(record)}
    return {"spec": {"source": {"digest": SOURCE}, "freshness": "24h"}, "status": status}


def node(verdict: str = "Pass", completed: datetime = NOW - timedelta(hours=1), **changes: str) -> Obj:
    detail = {
        "verdict": verdict,
        "run": "r1",
        "namespace": "signal-system",
        "runUID": "run-uid",
        "runCreated": "2026-11-30T10:00:00Z",
        "completionTime": completed.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "evidenceDigest": EVIDENCE,
        "sourceDigest": SOURCE,
        "profileGeneration": "1",
        **changes,
    }
    return {
        "metadata": {
            "name": "gpu-001",
            "uid": "node-uid",
            "labels": {keys.certified_label("p"): verdict},
            "annotations": {keys.certified_label("p"): json.dumps(detail)},
        }
    }


def behind(**changes: Any) -> Behind:
    base = Behind(
        "p",
        profile_obj=profile_with({"gpu-001": record_entry()}),
        run={
            "metadata": {"uid": "run-uid"},
            "spec": {"participants": [{"index": 0, "nodeName": "gpu-001", "nodeUID": "node-uid"}]},
            "status": {"phase": "Succeeded", "reason": "AllChecksPassed"},
        },
        evidence_digest=EVIDENCE,
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def test_a_fresh_verified_projection_is_current() -> None:
    assert not_current(node(), behind(), NOW) == []
    assert not_current(node(), behind(evidence_verdicts={"gpu-001": "Pass"}), NOW) == []
    text = describe_node(node(), [behind()], NOW)
    assert "Current:        yes" in text
    assert "(re-verified: `signalctl evidence verify r1`)" in text


@pytest.mark.parametrize(
    ("the_node", "the_behind", "reason"),
    [
        (node(completed=NOW - timedelta(hours=25)), behind(), "Stale: completed 25h ago, freshness 1 day"),
        (node(), behind(profile_obj=None, profile_note="no longer exists"), "the profile no longer exists"),
        (node(sourceDigest="sha256:" + "9" * 64), behind(), "the profile's suite changed since"),
        (node(), behind(evidence_digest="sha256:" + "3" * 64), "the Run's evidence digest is sha256:333"),
        (node(), behind(verify_problems=["MISMATCH check 0: forged"]), "evidence: MISMATCH check 0: forged"),
        # Issue 42 H-A: the record and the label say Pass, the Run's (verified) evidence says Fail.
        (node(), behind(evidence_verdicts={"gpu-001": "Fail"}), "the Run's evidence gives this Node Fail, not Pass"),
        (node(), behind(evidence_verdicts={}), "the Run's evidence gives this Node no verdict, not Pass"),
        (node(verdict="Pass", runUID="older"), behind(), "Run r1 was replaced"),
        (
            node(),
            behind(
                run={
                    "metadata": {"uid": "run-uid"},
                    "spec": {"participants": [{"index": 0, "nodeName": "gpu-001", "nodeUID": "previous-node"}]},
                }
            ),
            "the Node was replaced",
        ),
    ],
)
def test_each_reason_a_projection_is_not_current(the_node: Obj, the_behind: Behind, reason: str) -> None:
    reasons = not_current(the_node, the_behind, NOW)
    assert any(reason in r for r in reasons), reasons
    assert "Current:        NO" in describe_node(the_node, [the_behind], NOW)


def test_a_label_that_disagrees_with_its_detail_is_not_current() -> None:
    the_node = node()
    the_node["metadata"]["labels"][keys.certified_label("p")] = "Fail"
    assert not_current(the_node, behind(), NOW) == [
        "the label says Fail but the detail says Pass",
        "the label says Fail but Signal's record says Pass",
    ]


def test_a_deleted_run_leaves_the_projection_standing_but_says_so() -> None:
    gone = behind(run=None, run_note="deleted (retention, or by hand): its evidence cannot be re-checked")
    assert not_current(node(), gone, NOW) == []
    assert "deleted (retention, or by hand)" in describe_node(node(), [gone], NOW)


def test_profiles_never_projected_are_listed_too() -> None:
    text = describe_node(node(), [behind(), Behind("other")], NOW)
    assert "Profile other:\n  <never certified by this profile>" in text
    assert projected_profiles(node()) == ["p"]


def test_freshness_falls_back_to_recurrence_then_seven_days() -> None:
    assert freshness_window({"freshness": "2h", "recurrence": {"interval": "5h"}}) == timedelta(hours=2)
    assert freshness_window({"recurrence": {"interval": "5h"}}) == timedelta(hours=5)
    assert freshness_window({"freshness": "nonsense"}) == timedelta(days=7)


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        ({}, "no"),
        ({"unschedulable": True}, "yes, by an operator (spec.unschedulable)"),
        (
            {"taints": [{"key": keys.RESERVED_TAINT_KEY, "effect": "NoSchedule"}]},
            f"yes, by Signal's reservation (taint {keys.RESERVED_TAINT_KEY})",
        ),
        (
            {"unschedulable": True, "taints": [{"key": keys.RESERVED_TAINT_KEY, "effect": "NoSchedule"}]},
            f"yes, by an operator (spec.unschedulable) and by Signal's reservation (taint {keys.RESERVED_TAINT_KEY})",
        ),
        ({"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}, "no"),
    ],
)
def test_cordoned_names_who_keeps_pods_off(spec: dict[str, object], shown: str) -> None:
    """A Node Signal holds was described as 'Cordoned: no' (its cordon is a taint)."""
    assert cordoned({"metadata": {"name": "n"}, "spec": spec}) == shown
    assert f"Cordoned:       {shown}" in describe_node({"metadata": {"name": "n"}, "spec": spec}, [], NOW)


# -- Signal's record, not the Node's claim ---------------------------------------------------------


def test_a_projection_the_node_wrote_itself_is_not_current() -> None:
    """A kubelet can write the result label and its detail annotation on its own Node (with the
    profile's current source digest, a fresh time and no Run): Signal's record has no result for
    it, so it is never shown current."""
    forged = node(run="", namespace="")
    reasons = not_current(forged, behind(run=None, profile_obj=profile_with({})), NOW)
    assert any("Signal's record" in r for r in reasons), reasons
    text = describe_node(forged, [behind(run=None, profile_obj=profile_with({}))], NOW)
    assert "Current:        NO" in text


def test_a_detail_copied_from_another_node_is_not_current() -> None:
    """A certified neighbour's detail (its real, verifying Run) copied onto this Node."""
    other = {"metadata": {"uid": "run-uid"}, "spec": {"participants": [{"index": 0, "nodeName": "gpu-009"}]}}
    record = {"gpu-009": record_entry(nodeUID="uid-9")}
    reasons = not_current(node(), behind(run=other, profile_obj=profile_with(record)), NOW)
    assert any("Signal's record" in r for r in reasons), reasons
    assert any("not a participant" in r for r in reasons), reasons


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"gpu-001": record_entry(verdict="Fail")}, "Signal's record says Fail"),
        ({"gpu-001": record_entry(nodeUID="previous-node")}, "Signal's record has no result for this Node"),
        ({"gpu-001": record_entry(runUID="newer-run")}, "disagrees with Signal's record"),
        (None, "Signal's record has no result for this Node"),
    ],
)
def test_a_projection_that_disagrees_with_signals_record_is_not_current(
    record: dict[str, dict[str, str]] | None, reason: str
) -> None:
    reasons = not_current(node(), behind(profile_obj=profile_with(record)), NOW)
    assert any(reason in r for r in reasons), reasons


def test_an_unreadable_record_is_not_current() -> None:
    profile = profile_with({})
    profile["status"]["certifiedNodes"] = "not base64 gzip"
    reasons = not_current(node(), behind(profile_obj=profile), NOW)
    assert any("cannot be read" in r for r in reasons), reasons


@pytest.mark.parametrize("completed", ["yesterday", "2026-11-30T11:00:00", 12345, None, ""])
def test_a_completion_time_the_node_garbled_is_reported_not_a_crash(completed: object) -> None:
    """The detail annotation is the kubelet's to write: a time that is no RFC 3339 time (or has
    no offset) made `describe node` end in a traceback."""
    garbled = node()
    detail = json.loads(garbled["metadata"]["annotations"][keys.certified_label("p")])
    detail["completionTime"] = completed
    garbled["metadata"]["annotations"][keys.certified_label("p")] = json.dumps(detail)
    text = describe_node(garbled, [behind()], NOW)
    assert "Current:        NO" in text
    assert "<unknown> ago" in text
