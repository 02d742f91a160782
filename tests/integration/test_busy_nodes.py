"""Issue 43, item 2, on the real API server (and the process kubelet, which runs the Pods bound
to simulated Nodes as local processes and completes their deletion as a kubelet does): a
profile's ``busyNodes`` decides what happens to a requested Node still running other work.

* ``drain``: the controller evicts the Node's Pods through the Eviction API. A Pod with no
  budget leaves; a Pod whose PodDisruptionBudget allows no disruption stays, and the Run ends
  Inconclusive (``DrainTimedOut``) naming it; a DaemonSet Pod and a Pod of Signal's namespace
  are left alone, never named. With nothing protected the checks start once the Pods are gone.
* ``waitForIdle``: a Pod holding the Node's GPUs keeps the Run ``Admitted`` (``NodesIdle=False``,
  naming it) and no Workflow exists; when it ends, the Workflow is submitted. A holder that stays
  ends the Run Inconclusive (``NodesNotIdle``).
"""

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by

pytestmark = pytest.mark.timeout(300)
POD_CHECK = [
    {"name": "inventory", "scriptKey": "inventory.sh", "backend": "Pod", "gpuCount": 8, "backendActiveDeadline": "5m"}
]


def busy_profile(name: str, namespace: str, policy: str, timeout: int) -> Obj:
    body = profile_body(name, namespace, 1, checks=POD_CHECK)
    body["spec"]["busyNodes"] = {"policy": policy, "timeoutSeconds": timeout}
    return body


def sleeper(
    name: str, node: str, *, gpus: int = 0, labels: dict[str, str] | None = None, owner: Obj | None = None
) -> Obj:
    container: Obj = {"name": "main", "image": "busybox", "command": ["sh", "-c", "sleep 600"]}
    if gpus:
        container["resources"] = {"requests": {keys.GPU_RESOURCE: str(gpus)}, "limits": {keys.GPU_RESOURCE: str(gpus)}}
    meta: Obj = {"name": name, "labels": labels or {"app": name}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [container],
        },
    }


@pytest.fixture
async def work_namespace(cluster: LocalCluster) -> AsyncIterator[str]:
    """Another team's namespace, where the Pods running on the Nodes live."""
    name = f"work-{uuid.uuid4().hex[:8]}"
    await cluster.create_namespace(name)
    yield name
    await cluster.delete_namespace(name)


async def create_pod(admin: KubeClient, namespace: str, body: Obj) -> Obj:
    """Create a Pod (the namespace's default ServiceAccount may not exist yet: retried)."""

    async def once() -> Obj | None:
        try:
            return await admin.create(resource_path("v1", "pods", namespace), body)
        except ApiError as exc:
            if exc.status == 403 and "serviceaccount" in str(exc).lower():
                return None
            raise

    created: Obj = await eventually(once, what=f"Pod {namespace}/{body['metadata']['name']} created")
    return created


async def running(admin: KubeClient, namespace: str, name: str) -> Obj:
    async def check() -> Obj | None:
        pod = await admin.get(resource_path("v1", "pods", namespace, name))
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None

    found: Obj = await eventually(check, what=f"Pod {namespace}/{name} Running")
    return found


async def pod_or_none(admin: KubeClient, namespace: str, name: str) -> Obj | None:
    try:
        return await admin.get(resource_path("v1", "pods", namespace, name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def the_run(world: World, profile: str, phases: Sequence[str]) -> Obj | None:
    runs = [r for r in await world.runs() if r["spec"]["profile"]["name"] == profile]
    if runs and (runs[0].get("status") or {}).get("phase") in phases:
        return runs[0]
    return None


async def workflow_names(admin: KubeClient, namespace: str) -> set[str]:
    listed = await admin.get(resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, namespace))
    return {w["metadata"]["name"] for w in listed["items"]}


def condition(run: Obj, type_: str) -> Obj:
    found = [c for c in (run.get("status") or {}).get("conditions") or [] if c["type"] == type_]
    assert found, (run.get("status"), type_)
    result: Obj = found[0]
    return result


async def setup_world(cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path) -> Any:
    world = World(cluster, admin, namespace)
    await world.setup()
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    return world, controller


async def test_drain_evicts_what_may_leave_and_ends_inconclusive_naming_the_pod_its_budget_protects(
    cluster: LocalCluster, admin: KubeClient, namespace: str, work_namespace: str, tmp_path: Path
) -> None:
    world, controller = await setup_world(cluster, admin, namespace, tmp_path)
    profile = f"{namespace}-drain"
    try:
        (node,) = world.node_names(1, "d")
        await world.add_nodes([node], requested_for=None)
        # A DaemonSet (its controller does not run here: it makes no Pod of its own) owning a Pod.
        daemonset = await admin.create(
            resource_path("apps/v1", "daemonsets", work_namespace),
            {
                "metadata": {"name": "agent"},
                "spec": {
                    "selector": {"matchLabels": {"app": "agent"}},
                    "template": {
                        "metadata": {"labels": {"app": "agent"}},
                        "spec": {"nodeSelector": {"nowhere": "x"}, "containers": [{"name": "c", "image": "x"}]},
                    },
                },
            },
        )
        owner = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "agent",
            "uid": daemonset["metadata"]["uid"],
            "controller": True,
        }
        await admin.create(
            resource_path("policy/v1", "poddisruptionbudgets", work_namespace),
            {
                "metadata": {"name": "protected"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "protected"}}},
            },
        )
        for body, ns in (
            (sleeper("movable", node), work_namespace),
            (sleeper("protected", node), work_namespace),
            (sleeper("agent-x", node, labels={"app": "agent"}, owner=owner), work_namespace),
            (sleeper("signals-own", node), namespace),
        ):
            await create_pod(admin, ns, body)
            await running(admin, ns, body["metadata"]["name"])
        protected_uid = (await admin.get(resource_path("v1", "pods", work_namespace, "protected")))["metadata"]["uid"]

        await world.add_profile(busy_profile(profile, namespace, "drain", 15))
        await world.request(profile, [node])
        try:
            ended = await eventually(
                lambda: the_run(world, profile, ("Inconclusive", "Running", "Succeeded", "Failed")),
                timeout=120,
                what="the drain Run to end",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{controller.logs()}") from None
        status = ended["status"]
        assert status["phase"] == "Inconclusive", status
        assert status["reason"] == "DrainTimedOut", status
        message = status["message"]
        assert f"{work_namespace}/protected (eviction refused" in message, message
        for never in ("movable", "agent-x", "signals-own"):
            assert never not in message, message
        assert condition(ended, "NodesIdle")["status"] == "False"
        # The Pod with no budget was evicted (and is gone); everything else is as it was.
        assert await pod_or_none(admin, work_namespace, "movable") is None
        protected = await pod_or_none(admin, work_namespace, "protected")
        assert protected is not None
        assert protected["metadata"]["uid"] == protected_uid
        assert not protected["metadata"].get("deletionTimestamp")
        for ns, name in ((work_namespace, "agent-x"), (namespace, "signals-own")):
            kept = await pod_or_none(admin, ns, name)
            assert kept is not None, name
            assert not kept["metadata"].get("deletionTimestamp"), name
        assert ended["metadata"]["name"] not in await workflow_names(admin, namespace)
        (after,) = await world.nodes([node])
        assert reserved_by(after) == ended["metadata"]["uid"]  # held, as every Inconclusive Run
        events = (await admin.get(resource_path("v1", "events", namespace)))["items"]
        assert any(e["reason"] == "DrainTimedOut" for e in events), [e["reason"] for e in events]
    finally:
        controller.stop()
        for ns, name in ((work_namespace, "protected"), (work_namespace, "agent-x"), (namespace, "signals-own")):
            with contextlib.suppress(ApiError):
                await admin.delete(resource_path("v1", "pods", ns, name), {"gracePeriodSeconds": 0})
        await world.cleanup()


async def test_drain_starts_the_checks_once_the_pods_have_left(
    cluster: LocalCluster, admin: KubeClient, namespace: str, work_namespace: str, tmp_path: Path
) -> None:
    world, controller = await setup_world(cluster, admin, namespace, tmp_path)
    profile = f"{namespace}-drained"
    try:
        (node,) = world.node_names(1, "e")
        await world.add_nodes([node], requested_for=None)
        await create_pod(admin, work_namespace, sleeper("job", node, gpus=8))
        await running(admin, work_namespace, "job")
        await world.add_profile(busy_profile(profile, namespace, "drain", 120))
        await world.request(profile, [node])
        try:
            started = await eventually(
                lambda: the_run(world, profile, ("Running", "Inconclusive")), timeout=120, what="the Run to start"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{controller.logs()}") from None
        assert started["status"]["phase"] == "Running", started["status"]
        assert condition(started, "NodesIdle")["status"] == "True"
        assert await pod_or_none(admin, work_namespace, "job") is None
        assert started["metadata"]["name"] in await workflow_names(admin, namespace)
    finally:
        controller.stop()
        await world.cleanup()


async def test_wait_for_idle_starts_the_checks_when_the_pod_holding_the_gpus_ends(
    cluster: LocalCluster, admin: KubeClient, namespace: str, work_namespace: str, tmp_path: Path
) -> None:
    world, controller = await setup_world(cluster, admin, namespace, tmp_path)
    profile = f"{namespace}-idle"
    try:
        (node,) = world.node_names(1, "w")
        await world.add_nodes([node], requested_for=None)
        await create_pod(admin, work_namespace, sleeper("training", node, gpus=4))
        await running(admin, work_namespace, "training")
        await world.add_profile(busy_profile(profile, namespace, "waitForIdle", 240))
        await world.request(profile, [node])

        async def waiting() -> Obj | None:
            run = await the_run(world, profile, ("Admitted", "Running", "Inconclusive"))
            if run is None:
                return None
            conditions = {c["type"]: c for c in run["status"].get("conditions") or []}
            return run if "NodesIdle" in conditions or run["status"]["phase"] != "Admitted" else None

        try:
            held = await eventually(waiting, timeout=60, what="the Run to wait for the GPUs")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{controller.logs()}") from None
        assert held["status"]["phase"] == "Admitted", held["status"]
        idle = condition(held, "NodesIdle")
        assert (idle["status"], idle["reason"]) == ("False", "WaitingForIdle"), idle
        assert (
            f"{keys.GPU_RESOURCE}: 8 requested, 4 of 8 free; held by {work_namespace}/training (4)" in idle["message"]
        )
        name = held["metadata"]["name"]
        (reserved,) = await world.nodes([node])
        assert reserved_by(reserved) == held["metadata"]["uid"]
        # The controller has handled the busy Node (the condition above is its write): no Workflow,
        # the Pod untouched.
        assert name not in await workflow_names(admin, namespace)
        training = await pod_or_none(admin, work_namespace, "training")
        assert training is not None
        assert not training["metadata"].get("deletionTimestamp")

        await admin.delete(resource_path("v1", "pods", work_namespace, "training"))
        started = await eventually(
            lambda: the_run(world, profile, ("Running", "Inconclusive")), timeout=60, what="the Run to start"
        )
        assert started["status"]["phase"] == "Running", started["status"]
        assert condition(started, "NodesIdle")["status"] == "True"
        assert name in await workflow_names(admin, namespace)
    finally:
        controller.stop()
        await world.cleanup()


async def test_wait_for_idle_ends_inconclusive_when_the_gpus_stay_held(
    cluster: LocalCluster, admin: KubeClient, namespace: str, work_namespace: str, tmp_path: Path
) -> None:
    world, controller = await setup_world(cluster, admin, namespace, tmp_path)
    profile = f"{namespace}-busy"
    try:
        (node,) = world.node_names(1, "h")
        await world.add_nodes([node], requested_for=None)
        await create_pod(admin, work_namespace, sleeper("hog", node, gpus=8))
        await running(admin, work_namespace, "hog")
        await world.add_profile(busy_profile(profile, namespace, "waitForIdle", 5))
        await world.request(profile, [node])
        try:
            ended = await eventually(
                lambda: the_run(world, profile, ("Inconclusive", "Running")), timeout=90, what="the Run to end"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{controller.logs()}") from None
        status = ended["status"]
        assert (status["phase"], status["reason"]) == ("Inconclusive", "NodesNotIdle"), status
        assert f"held by {work_namespace}/hog (8)" in status["message"], status["message"]
        assert ended["metadata"]["name"] not in await workflow_names(admin, namespace)
        hog = await pod_or_none(admin, work_namespace, "hog")
        assert hog is not None
        assert not hog["metadata"].get("deletionTimestamp")
    finally:
        controller.stop()
        with contextlib.suppress(ApiError):
            await admin.delete(resource_path("v1", "pods", work_namespace, "hog"), {"gracePeriodSeconds": 0})
        await world.cleanup()
