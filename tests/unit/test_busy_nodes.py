"""Issue 43, item 2: the pure decisions of busy Nodes (controller/rules/busy.py): which Pods a drain
evicts and waits for, what is free on a Node for ``waitForIdle``, when the wait has timed out,
and that the profile's ``busyNodes`` reaches the Run (and only when it is not ``none``)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from controller.rules.busy import (
    busy_policy,
    drain_plan,
    drain_skip,
    idle_shortfall,
    pod_request,
    requested_resources,
    seconds_left,
    timed_out,
    wait_started,
    waiting,
)
from controller.rules.manifests import run_manifest
from controller.rules.requeue import run_requeue
from controller.rules.runview import run_view
from controller.rules.workqueue import Done, RequeueAfter
from shared.busynodes import BusyNodes
from shared.profile import ProfileSpec
from shared.run import CertificationRun
from tests.builders import SCRIPTS_DIGEST, ProfileBuilder
from tests.unit.node_builders import make_node, make_profile

Obj = dict[str, Any]
SIGNAL_NS = "signal-system"
NOW = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)


def pod(
    name: str,
    *,
    namespace: str = "work",
    phase: str = "Running",
    owner: str | None = None,
    mirror: bool = False,
    deleting: bool = False,
    gpus: str | None = None,
    limits_only: bool = False,
    extra: Obj | None = None,
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "o", "controller": True}
        ]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "x"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T05:59:00Z"
    resources: Obj = {}
    if gpus is not None:
        resources = {"limits": {"nvidia.com/gpu": gpus}} if limits_only else {"requests": {"nvidia.com/gpu": gpus}}
    spec: Obj = {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": resources}], **(extra or {})}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (pod("job"), None),
        (pod("pending", phase="Pending"), None),
        (pod("replica", owner="ReplicaSet"), None),
        (pod("done", phase="Succeeded"), "ended"),
        (pod("failed", phase="Failed"), "ended"),
        (pod("static", mirror=True), "mirror Pod"),
        (pod("agent", owner="DaemonSet"), "DaemonSet Pod"),
        (pod("backend", namespace=SIGNAL_NS), "Signal's own Pod"),
    ],
    ids=lambda v: v["metadata"]["name"] if isinstance(v, dict) else str(v),
)
def test_which_pods_a_drain_leaves_alone(case: Obj, expected: str | None) -> None:
    assert drain_skip(case, SIGNAL_NS) == expected


def test_a_drain_evicts_only_what_is_not_already_leaving_and_waits_for_both() -> None:
    pods = [pod("b"), pod("a", deleting=True), pod("ds", owner="DaemonSet"), pod("gone", phase="Succeeded")]
    plan = drain_plan(pods, SIGNAL_NS)
    assert plan.remaining == ("work/a", "work/b")
    assert [p["metadata"]["name"] for p in plan.evict] == ["b"]
    assert drain_plan([pod("ds", owner="DaemonSet")], SIGNAL_NS).remaining == ()


def test_requested_resources_are_the_largest_of_any_one_check() -> None:
    checks = [
        {"gpuCount": 2, "workload": {"extendedResources": {"rdma/ib": 1}}},
        {"gpuCount": 8},
        {"gpuCount": 0, "workload": {"extendedResources": {"rdma/ib": 4, "example.com/x": 1}}},
    ]
    assert requested_resources(checks) == {"nvidia.com/gpu": 8, "rdma/ib": 4, "example.com/x": 1}
    assert requested_resources([{"gpuCount": 0}]) == {}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (pod("req", gpus="2"), 2),
        (pod("lim", gpus="3", limits_only=True), 3),
        (pod("none"), 0),
        (pod("bad", gpus="lots"), 2**63 - 1),  # fail closed: never free
        (
            pod(
                "init",
                gpus="1",
                extra={"initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": "4"}}}]},
            ),
            4,
        ),
        (
            pod(
                "sidecar",
                gpus="1",
                extra={
                    "initContainers": [
                        {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
                    ],
                    "overhead": {"nvidia.com/gpu": "1"},
                },
            ),
            3,
        ),
    ],
    ids=lambda v: v["metadata"]["name"] if isinstance(v, dict) else str(v),
)
def test_a_pods_effective_request(case: Obj, expected: int) -> None:
    assert pod_request(case, "nvidia.com/gpu") == expected


def test_what_is_free_is_allocatable_minus_the_requests_of_pods_that_have_not_ended() -> None:
    allocatable = {"nvidia.com/gpu": "8", "rdma/ib": "1"}
    want = {"nvidia.com/gpu": 4, "rdma/ib": 1}
    assert idle_shortfall(want, allocatable, [pod("small", gpus="4"), pod("old", gpus="8", phase="Succeeded")]) == []
    held = idle_shortfall(want, allocatable, [pod("big", gpus="6"), pod("leaving", gpus="1", deleting=True)])
    assert held == ["nvidia.com/gpu: 4 requested, 1 of 8 free; held by work/big (6), work/leaving (1)"]
    missing = idle_shortfall({"rdma/ib": 2}, allocatable, [])
    assert missing == ["rdma/ib: 2 requested, 1 of 1 free; held by no Pod (the Node does not have them)"]
    assert idle_shortfall({"nvidia.com/gpu": 1}, {}, [])  # a Node without GPUs is never idle for them


def test_the_wait_starts_at_the_conditions_transition_and_times_out_after_the_timeout() -> None:
    assert wait_started([]) is None
    assert wait_started([{"type": "NodesIdle", "status": "True", "lastTransitionTime": "2026-12-07T05:00:00Z"}]) is None
    started = wait_started([{"type": "NodesIdle", "status": "False", "lastTransitionTime": "2026-12-07T05:59:00Z"}])
    assert started == NOW - timedelta(seconds=60)
    assert not timed_out(started, NOW, 61)
    assert timed_out(started, NOW, 60)
    assert not timed_out(None, NOW, 1)  # a wait not recorded yet has not begun
    assert seconds_left(started, NOW, 90) == 30.0
    assert seconds_left(started, NOW, 10) == 0.0


def _run(phase: str | None, busy: Obj | None, conditions: list[Obj] | None = None, cancel: bool = False) -> Any:
    spec: Obj = {"suiteDeadlineSeconds": 600, "cancel": cancel}
    if busy is not None:
        spec["busyNodes"] = busy
    status: Obj = {"conditions": conditions or []}
    if phase:
        status["phase"] = phase
    return run_view({"metadata": {"name": "r"}, "spec": spec, "status": status})


@pytest.mark.parametrize(
    ("phase", "busy", "conditions", "cancel", "expected"),
    [
        (None, None, [], False, False),  # no busyNodes: the behaviour before it existed
        (None, {"policy": "none"}, [], False, False),
        (None, {"policy": "drain", "timeoutSeconds": 5}, [], False, True),
        ("Admitted", {"policy": "waitForIdle"}, [{"type": "NodesIdle", "status": "False"}], False, True),
        ("Admitted", {"policy": "drain"}, [{"type": "NodesIdle", "status": "True"}], False, False),
        ("Admitted", {"policy": "drain"}, [], True, False),  # a cancel goes first
        ("Running", {"policy": "drain"}, [], False, False),
        ("Inconclusive", {"policy": "drain"}, [], False, False),
    ],
)
def test_when_a_run_waits_for_busy_nodes_and_is_looked_at_again(
    phase: str | None, busy: Obj | None, conditions: list[Obj], cancel: bool, expected: bool
) -> None:
    view = _run(phase, busy, conditions, cancel)
    assert waiting(view) is expected
    if expected:
        assert run_requeue(view, NOW) == RequeueAfter(2.0)
    elif phase in (None, "Admitted") and not cancel:
        assert run_requeue(view, NOW) == Done()


def test_busy_policy_defaults() -> None:
    assert busy_policy({}).policy == "none"
    assert busy_policy({"busyNodes": {"policy": "drain"}}) == busy_policy(
        {"busyNodes": {"policy": "drain", "timeoutSeconds": 600}}
    )
    assert busy_policy({"busyNodes": {"policy": "drain", "timeoutSeconds": 30}}).timeout_seconds == 30


def test_the_profile_model_bounds_busy_nodes() -> None:
    assert BusyNodes().to_wire() == {"policy": "none", "timeoutSeconds": 600}
    with pytest.raises(ValidationError):
        BusyNodes.model_validate({"policy": "evict"})
    with pytest.raises(ValidationError):
        BusyNodes.model_validate({"policy": "drain", "timeoutSeconds": 0})
    with pytest.raises(ValidationError):
        BusyNodes.model_validate({"policy": "drain", "timeoutSeconds": 86401})
    assert ProfileSpec.model_fields["busy_nodes"].alias == "busyNodes"


@pytest.mark.parametrize(
    ("busy", "expected"),
    [
        (None, None),
        ({"policy": "none", "timeoutSeconds": 30}, None),
        ({"policy": "drain", "timeoutSeconds": 30}, {"policy": "drain", "timeoutSeconds": 30}),
        ({"policy": "waitForIdle"}, {"policy": "waitForIdle", "timeoutSeconds": 600}),
    ],
)
def test_the_profiles_busy_nodes_is_copied_into_the_run(busy: Obj | None, expected: Obj | None) -> None:
    builder = ProfileBuilder("p").check("c", scriptKey="c.sh", backend="Pod", gpuCount=1)
    if busy is not None:
        builder.spec(busyNodes=busy)
    builder.obj["metadata"]["uid"] = "profile-uid"
    run = run_manifest(
        profile=make_profile(builder),
        nodes=[make_node("gpu-a").uid("uid-a").gpus(8).view()],
        name="r",
        namespace="ns",
        ghash="0123456789",
        source_digest=SCRIPTS_DIGEST,
    )
    assert run["spec"].get("busyNodes") == expected
    assert CertificationRun.model_validate(run).spec.busy_nodes == (None if expected is None else BusyNodes(**expected))
