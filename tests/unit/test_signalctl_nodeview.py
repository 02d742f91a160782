"""signalctl/nodeview.py: whether a Node's projection is current, and why not (pure)."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import keys
from signalctl.nodeview import Behind, cordoned, describe_node, freshness_window, not_current, projected_profiles

Obj = dict[str, Any]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SOURCE = "sha256:" + "1" * 64
EVIDENCE = "sha256:" + "2" * 64


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
        profile_obj={"spec": {"source": {"digest": SOURCE}, "freshness": "24h"}},
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
    assert not_current(the_node, behind(), NOW) == ["the label says Fail but the detail says Pass"]


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
