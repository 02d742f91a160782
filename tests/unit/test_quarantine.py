"""Signal in a remediation loop (issue 43, items 1 and 3), the pure parts: which quarantine a
profile adopts (eligibility), what a Run records of it per Node (run_manifest), what a release
after a Pass lifts and nothing else (release_patch), the Fail taint and the remediator's Node
condition (projection), the tolerations the Run's workloads get, and the models' bounds."""

from typing import Any

import pytest
from pydantic import ValidationError

from adapter.inputs import Inputs, with_run
from adapter.workloads import tolerations
from controller.rules.eligibility import ineligibility
from controller.rules.manifests import fail_taint_patch, release_patch, run_manifest
from controller.rules.projection import expected_copy, failed_condition, node_copy, reassert_patches
from controller.rules.requirements import per_node_requirement
from shared import keys, quarantine
from shared.profile import CertificationProfile
from tests.builders import ProfileBuilder
from tests.unit.node_builders import NodeBuilder, make_node, make_profile

PROFILE = "p"
QUARANTINE = "health.example.com/quarantine"
FAIL_TAINT = {"key": "projectsignal.dev/failed", "effect": "NoSchedule"}
ADOPTING = make_profile(
    ProfileBuilder(PROFILE).spec(
        adoptQuarantine={"cordon": True, "taints": [{"key": QUARANTINE, "effect": "NoSchedule"}]},
        onFail={"taint": FAIL_TAINT},
    )
)
PLAIN = make_profile(PROFILE)
TAINTS_ONLY = make_profile(
    ProfileBuilder(PROFILE).spec(adoptQuarantine={"taints": [{"key": QUARANTINE, "effect": "NoSchedule"}]})
)


def _candidate() -> NodeBuilder:
    return make_node("n1").requested(PROFILE).pool("gpu").gpus(8)


@pytest.mark.parametrize(
    ("profile", "node", "expected"),
    [
        (PLAIN, _candidate().unschedulable(), "cordoned by someone else"),
        (ADOPTING, _candidate().unschedulable(), None),
        (ADOPTING, _candidate().cordon_taint(), None),
        (TAINTS_ONLY, _candidate().unschedulable(), "cordoned by someone else"),
        (PLAIN, _candidate().taint(QUARANTINE, "gpu-xid-79"), "taint not tolerated"),
        (ADOPTING, _candidate().taint(QUARANTINE, "gpu-xid-79"), None),
        (TAINTS_ONLY, _candidate().taint(QUARANTINE, "gpu-xid-79"), None),
        # A rule names an effect: the same key with another effect is not adopted.
        (ADOPTING, _candidate().taint(QUARANTINE, "x", effect="NoExecute"), "taint not tolerated"),
        # The profile's own Fail taint: it certifies the Node through it again.
        (ADOPTING, _candidate().taint("projectsignal.dev/failed"), None),
        (PLAIN, _candidate().taint("projectsignal.dev/failed"), "taint not tolerated"),
        (TAINTS_ONLY, _candidate().taint("projectsignal.dev/failed"), "taint not tolerated"),
        # Adoption never lifts the other reasons.
        (ADOPTING, _candidate().unschedulable().ready(False), "not Ready"),
        (ADOPTING, _candidate().unschedulable().signal_taint("ru-x"), "held by an admission in progress"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_eligibility(profile: CertificationProfile, node: NodeBuilder, expected: str | None) -> None:
    reason = ineligibility(node.view(), profile, per_node_requirement(profile.spec.checks), set())
    assert (reason if reason is None else reason[: len(expected or "")]) == expected, reason


def _manifest(profile: CertificationProfile, *nodes: NodeBuilder) -> dict[str, Any]:
    views = [n.view() for n in nodes]
    return run_manifest(profile=profile, nodes=views, name="r", namespace="ns", ghash="h", source_digest="sha256:x")


def test_the_run_records_exactly_what_it_adopted_on_each_node() -> None:
    cordoned = make_node("a").unschedulable().taint(QUARANTINE, "xid").taint("nvidia.com/gpu", "present")
    failed = make_node("b").uid("uid-b").taint("projectsignal.dev/failed")
    clean = make_node("c").uid("uid-c")
    run = _manifest(ADOPTING, cordoned, failed, clean)
    spec = run["spec"]
    assert spec["adoptQuarantine"] == {"cordon": True, "taints": [{"key": QUARANTINE, "effect": "NoSchedule"}]}
    assert spec["onFail"] == {"taint": FAIL_TAINT | {"value": ""}}
    a, b, c = spec["participants"]
    assert a["adopted"] == {"cordon": True, "taints": [{"key": QUARANTINE, "value": "xid", "effect": "NoSchedule"}]}
    assert b["adopted"] == {"taints": [{"key": "projectsignal.dev/failed", "effect": "NoSchedule"}]}
    assert "adopted" not in c
    plain = _manifest(PLAIN, cordoned)["spec"]
    assert "adoptQuarantine" not in plain
    assert "onFail" not in plain
    assert "adopted" not in plain["participants"][0]


def _held(builder: NodeBuilder, run_uid: str = "ru-1") -> dict[str, Any]:
    return builder.reserved_by(run_uid, {"run": "r", "namespace": "ns", "index": 0}).build()


ENTRY = {"adopted": {"cordon": True, "taints": [{"key": QUARANTINE, "value": "xid", "effect": "NoSchedule"}]}}


def test_a_release_after_a_pass_lifts_what_was_adopted_in_the_same_patch() -> None:
    node = _held(make_node("a").unschedulable().taint(QUARANTINE, "xid").taint("nvidia.com/gpu", "present"))
    patch = release_patch(node, "ru-1", lift=ENTRY)
    assert patch is not None
    assert patch["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert patch["spec"]["unschedulable"] is None
    assert patch["metadata"]["labels"] == {keys.RESERVED_BY_LABEL: None}


@pytest.mark.parametrize(
    ("node", "lift", "taints", "uncordoned"),
    [
        # Not after a Pass: the quarantine stays.
        (make_node("a").unschedulable().taint(QUARANTINE, "xid"), None, [(QUARANTINE, "xid")], False),
        # Another value than the one recorded (set since by the health system): it stays.
        (make_node("a").taint(QUARANTINE, "xid-2"), ENTRY, [(QUARANTINE, "xid-2")], False),
        # A taint that was not adopted stays, whatever its key.
        (make_node("a").taint("other.example.com/q", "xid"), ENTRY, [("other.example.com/q", "xid")], False),
        # Nothing recorded: nothing lifted.
        (make_node("a").unschedulable().taint(QUARANTINE, "xid"), {}, [(QUARANTINE, "xid")], False),
        # A malformed record lifts nothing.
        (make_node("a").unschedulable().taint(QUARANTINE, "xid"), {"adopted": "all"}, [(QUARANTINE, "xid")], False),
    ],
)
def test_nothing_else_is_lifted(
    node: NodeBuilder, lift: dict[str, Any] | None, taints: list[tuple[str, str]], uncordoned: bool
) -> None:
    patch = release_patch(_held(node), "ru-1", lift=lift)
    assert patch is not None
    assert [(t["key"], t.get("value", "")) for t in patch["spec"]["taints"] or []] == taints
    assert ("unschedulable" in patch["spec"]) is uncordoned


def test_a_node_not_held_by_the_run_is_not_touched_even_after_a_pass() -> None:
    node = make_node("a").unschedulable().taint(QUARANTINE, "xid").build()
    assert release_patch(node, "ru-1", lift=ENTRY) is None


def test_the_fail_taint_is_added_once_on_the_current_resource_version() -> None:
    node = make_node("a").resource_version("7").taint("nvidia.com/gpu", "present").build()
    patch = fail_taint_patch(node, ("projectsignal.dev/failed", "", "NoSchedule"))
    assert patch == {
        "metadata": {"resourceVersion": "7"},
        "spec": {
            "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": "projectsignal.dev/failed", "effect": "NoSchedule"},
            ]
        },
    }
    node["spec"]["taints"] = patch["spec"]["taints"]
    assert fail_taint_patch(node, ("projectsignal.dev/failed", "", "NoSchedule")) is None


def _detail(verdict: str) -> dict[str, str]:
    return {
        "verdict": verdict,
        "run": "r",
        "namespace": "ns",
        "runUID": "ru-1",
        "runCreated": "2026-12-07T00:00:00Z",
        "completionTime": "2026-12-07T01:00:00Z",
        "evidenceDigest": "sha256:e",
        "sourceDigest": "sha256:s",
        "profileGeneration": "1",
    }


@pytest.mark.parametrize(
    ("verdict", "status", "reason"),
    [
        ("Fail", "True", "CertificationFailed"),
        ("Inconclusive", "False", "CertificationInconclusive"),
        ("Pass", "False", "CertificationPassed"),
        ("Stale", "False", "CertificationInconclusive"),
    ],
)
def test_the_remediators_condition_is_true_only_for_a_fail(verdict: str, status: str, reason: str) -> None:
    condition = failed_condition(PROFILE, _detail(verdict))
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "failed.projectsignal.dev/p",
        status,
        reason,
    )


def test_the_remediators_condition_is_reasserted_from_the_record_and_stays_true_when_stale() -> None:
    entry = _detail("Fail") | {"nodeUID": "uid-a"}
    node = make_node("a").build()
    node["status"]["conditions"] = [{"type": "failed.projectsignal.dev/p", "status": "False", "reason": "x"}]
    _, status, differs = reassert_patches(PROFILE, entry, node_copy(node), "1")
    assert "condition:failed.projectsignal.dev/p" in differs
    assert status is not None
    assert [c["status"] for c in status["status"]["conditions"] if c["type"].startswith("failed.")] == ["True"]
    stale = expected_copy(PROFILE, entry, stale="FreshnessExpired: old")
    assert str(stale["condition:failed.projectsignal.dev/p"]).startswith("True|CertificationFailed|")
    # No record: the condition goes.
    _, status, _ = reassert_patches(PROFILE, None, node_copy(node), "1")
    assert status == {"status": {"conditions": [{"type": "failed.projectsignal.dev/p", "$patch": "delete"}]}}


def test_the_runs_workloads_tolerate_exactly_the_adopted_quarantine() -> None:
    spec = _manifest(ADOPTING, make_node("a"))["spec"]
    assert quarantine.tolerations(spec) == [
        {"key": QUARANTINE, "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "projectsignal.dev/failed", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert quarantine.tolerations(_manifest(PLAIN, make_node("a"))["spec"]) == []
    check = ADOPTING.spec.checks[0]
    inputs = Inputs("ns", "r", "ru-1", (), "snap", 0, check)
    run = {"spec": spec}
    keys_tolerated = [t["key"] for t in tolerations(with_run(inputs, run))]
    assert keys_tolerated[:4] == [
        keys.RESERVED_TAINT_KEY,
        QUARANTINE,
        "node.kubernetes.io/unschedulable",
        "projectsignal.dev/failed",
    ]


@pytest.mark.parametrize(
    "spec",
    [
        {"adoptQuarantine": {"taints": [{"key": "projectsignal.dev/reserved", "effect": "NoSchedule"}]}},
        {"adoptQuarantine": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}},
        {"adoptQuarantine": {"taints": [{"key": "node.cloudprovider.kubernetes.io/x", "effect": "NoSchedule"}]}},
        {"adoptQuarantine": {"taints": [{"key": f"q{i}.example.com/q", "effect": "NoSchedule"} for i in range(9)]}},
        {"adoptQuarantine": {"taints": [{"key": "q.example.com/q"}]}},
        {"onFail": {"taint": {"key": "projectsignal.dev/reserved"}}},
        {"onFail": {"taint": {"key": "node.kubernetes.io/unschedulable"}}},
        {"onFail": {"taint": {"key": "projectsignal.dev/failed", "effect": "Evict"}}},
    ],
)
def test_the_models_refuse(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        make_profile(ProfileBuilder(PROFILE).spec(**spec))
