"""Issue 3: release gives back only what Signal took (an operator's cordon made during the
Run survives, invariant 8); cancellation stops the Workflow and ends Canceled only once no
backend workload remains; a non-terminal Run is never released. Issue 11: neither release
nor the terminal status happens while a Run-labelled workload (Pod, MPIJob) remains."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.controlplane import KUBELET_NODE, KUBELET_USER, free_port
from localcluster.fleet import SimNode
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from shared.digests import bundle_digest
from shared.ownership import MIRROR_ANNOTATION
from tests.controller_support import (
    ControllerProcess,
    World,
    eventually,
    install_rbac,
    ledger_groups,
    metrics_text,
    profile_body,
    reconciles,
    reserved_by,
)
from tests.realnode_support import install_workflow_template

API = keys.API_VERSION


@pytest.fixture
async def admitted(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[tuple[World, Obj, list[str]]]:
    world = World(cluster, admin, namespace)
    await world.setup()
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    names = world.node_names(2)
    profile = f"{namespace}-p"
    await world.add_nodes(names, requested_for=profile)
    await world.add_profile(profile_body(profile, namespace, 2))

    async def running() -> Obj | None:
        runs = await world.runs()
        return runs[0] if runs and runs[0].get("status", {}).get("phase") == "Running" else None

    run = await eventually(running, what=f"a Running Run\n{controller.logs()}")
    yield world, run, names
    controller.stop()
    await world.cleanup()


def run_path(run: Obj, sub: str | None = None) -> str:
    return resource_path(API, keys.RUN_PLURAL, run["metadata"]["namespace"], run["metadata"]["name"], sub)


async def groups_of(world: World) -> dict[str, dict[str, Any]]:
    return await ledger_groups(world.admin, world.namespace) or {}


async def test_release_keeps_an_operator_cordon_made_during_the_run(admitted: tuple[World, Obj, list[str]]) -> None:
    world, run, names = admitted
    admin = world.admin
    # The operator cordons the first Node while it is under test (what `kubectl cordon` does).
    await admin.merge_patch(resource_path("v1", "nodes", name=names[0]), {"spec": {"unschedulable": True}})
    await admin.merge_patch(run_path(run), {"spec": {"release": True}})
    assert all(reserved_by(n) == run["metadata"]["uid"] for n in await world.nodes(names)), (
        "a Running Run is never released"
    )
    await admin.merge_patch(run_path(run, "status"), {"status": {"phase": "Failed", "reason": "CheckFailed"}})

    async def released() -> bool:
        current = await admin.get(run_path(run))
        return any(c["type"] == "Released" and c["status"] == "True" for c in current["status"].get("conditions", []))

    await eventually(released, what="Released=True")
    cordoned, free = await world.nodes(names)
    for node in (cordoned, free):
        assert reserved_by(node) is None
        assert keys.RESERVATION_ANNOTATION not in node["metadata"].get("annotations", {})
        assert not [t for t in node["spec"].get("taints", []) if t["key"] == "projectsignal.dev/reserved"]
    assert cordoned["spec"]["unschedulable"] is True, "the operator's cordon must survive the release"
    assert not free["spec"].get("unschedulable")
    assert run["metadata"]["name"] not in await groups_of(world)


FAILING = {"fail.sh": "#!/bin/sh\necho 'link down' >&2\nexit 1\n"}
"""A check that fails: the Run's evidence proves a failure, from which the controller decides Failed."""


async def test_failed_run_stays_reserved_until_release(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Issue 46: a Run the controller itself decides Failed, from the evidence of a check that
    fails (the real adapter runs it through Argo and the process kubelet), keeps its group
    reserved and cordoned and in the admission ledger after the controller has handled that
    state (cleaned up after it, then passed over it again), and is released only by
    ``spec.release``. A controller that releases a Failed Run by itself fails here."""
    world = World(cluster, admin, namespace)
    await world.setup(scripts=FAILING)
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    await install_workflow_template(admin, namespace)
    names = world.node_names(2)
    profile = f"{namespace}-p"
    await world.add_nodes(names, requested_for=profile)
    checks = [{"name": "link", "scriptKey": "fail.sh", "backend": "Pod", "gpuCount": 1, "backendActiveDeadline": "60s"}]
    await world.add_profile(profile_body(profile, namespace, 2, digest=bundle_digest(FAILING, {}), checks=checks))
    controller = ControllerProcess(
        cluster,
        namespace,
        tmp_path,
        resync=1.0,
        workflow_instance_id=cluster.workflow_instance_id,
        metrics_port=free_port(),
    )
    await controller.start()
    try:

        async def failed_and_handled() -> Obj | None:
            runs = await world.runs()
            run = runs[0] if runs else None
            phase = ((run or {}).get("status") or {}).get("phase")
            if run is not None and phase in {"Succeeded", "Inconclusive", "Canceled"}:
                raise AssertionError(f"the Run ended {phase}, not Failed: {run['status']}\n{controller.logs()}")
            # ResourcesCleaned: the controller has acted on the Failed Run (its terminal pass).
            return run if phase == "Failed" and _true(run, "ResourcesCleaned") else None  # type: ignore[arg-type]

        run = await eventually(
            failed_and_handled, timeout=240, interval=1.0, what=f"Failed and cleaned up\n{controller.logs()}"
        )
        assert run["status"]["reason"] == "CheckFailed", run["status"]
        assert run["status"]["checkVerdicts"] == [{"name": "link", "verdict": "Fail"}]
        # And passed over it again since (resyncs every second): each pass decided to keep it.
        seen = reconciles(await metrics_text(controller.metrics_port), "Run")

        async def passed_again() -> bool:
            return reconciles(await metrics_text(controller.metrics_port), "Run") >= seen + 3

        await eventually(passed_again, what=f"three more Run passes\n{controller.logs()}")
        current = await admin.get(run_path(run))
        assert not _true(current, "Released"), current["status"]["conditions"]
        uid = run["metadata"]["uid"]
        for node in await world.nodes(names):
            assert reserved_by(node) == uid, f"{node['metadata']['name']} was released without spec.release"
            taints = [t for t in node["spec"].get("taints") or [] if t["key"] == keys.RESERVED_TAINT_KEY]
            assert taints == [{"key": keys.RESERVED_TAINT_KEY, "value": uid, "effect": "NoSchedule"}], node["spec"]
        assert run["metadata"]["name"] in await groups_of(world)

        await admin.merge_patch(run_path(run), {"spec": {"release": True}})

        async def released() -> Obj | None:
            current = await admin.get(run_path(run))
            return current if _true(current, "Released") else None

        await eventually(released, what=f"Released=True after spec.release\n{controller.logs()}")
        for node in await world.nodes(names):
            assert reserved_by(node) is None
            assert not [t for t in node["spec"].get("taints") or [] if t["key"] == keys.RESERVED_TAINT_KEY]
        assert run["metadata"]["name"] not in await groups_of(world)
    finally:
        controller.stop()
        await world.cleanup()


async def test_cancel_stops_the_workflow_and_waits_for_backend_workloads(
    admitted: tuple[World, Obj, list[str]],
) -> None:
    world, run, names = admitted
    admin = world.admin
    pods = resource_path("v1", "pods", world.namespace)
    backend = {
        "metadata": {"name": "backend-0", "labels": {keys.RUN_UID_LABEL: run["metadata"]["uid"]}},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "x", "command": ["true"]}]},
    }
    await admin.create(pods, backend)
    await admin.merge_patch(run_path(run), {"spec": {"cancel": True}})

    async def waiting() -> Obj | None:
        current = await admin.get(run_path(run))
        cond = next(
            (c for c in current["status"].get("conditions", []) if c["type"] == "WorkloadCleanupComplete"), None
        )
        return current if cond and cond["status"] == "False" else None

    current = await eventually(waiting, what="cleanup pending")
    assert current["status"]["phase"] == "Running"
    workflow = await admin.get(
        resource_path("argoproj.io/v1alpha1", "workflows", world.namespace, run["metadata"]["name"])
    )
    assert workflow["spec"]["shutdown"] == "Stop", "Stop runs the exit handler that removes the workloads"
    await admin.delete(f"{pods}/backend-0", {"gracePeriodSeconds": 0})

    async def canceled() -> Obj | None:
        current = await admin.get(run_path(run))
        return current if current["status"]["phase"] == "Canceled" else None

    current = await eventually(canceled, what="Canceled")
    assert current["status"]["completionTime"]
    for node in await world.nodes(names):
        assert reserved_by(node) == run["metadata"]["uid"], "Canceled keeps the group reserved until release"


async def test_cancel_waits_for_a_workflow_argo_is_still_stopping(admitted: tuple[World, Obj, list[str]]) -> None:
    """No workload remains, but the Workflow is still running (its adapters are writing the
    interrupted check's evidence): the Run is not Canceled until the Workflow has finished.
    Before, it was Canceled at once (CI: test_cancel_mid_check[MPIJob] found no evidence)."""
    world, run, _ = admitted
    admin = world.admin
    workflow = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, world.namespace, run["metadata"]["name"])
    # This world's Argo does not run the Workflow; give it the phase Argo would.
    await admin.merge_patch(workflow, {"status": {"phase": "Running"}})
    await admin.merge_patch(run_path(run), {"spec": {"cancel": True}})

    async def stopping() -> Obj | None:
        current = await admin.get(run_path(run))
        cond = cleanup_condition(current)
        return current if cond and cond["reason"] == "WorkflowStopping" else None

    current = await eventually(stopping, what="WorkflowStopping")
    assert current["status"]["phase"] == "Running"
    assert "Running" in cleanup_condition(current)["message"]  # type: ignore[index]
    stopped = await admin.get(workflow)
    assert stopped["spec"]["shutdown"] == "Stop"
    await admin.merge_patch(workflow, {"status": {"phase": "Failed"}})

    async def canceled() -> Obj | None:
        current = await admin.get(run_path(run))
        return current if current["status"]["phase"] == "Canceled" else None

    current = await eventually(canceled, what="Canceled")
    assert cleanup_condition(current)["status"] == "True"  # type: ignore[index]


def cleanup_condition(run: Obj) -> Obj | None:
    return next(
        (c for c in run.get("status", {}).get("conditions", []) if c["type"] == "WorkloadCleanupComplete"), None
    )


async def test_release_waits_until_no_run_labelled_workload_remains(
    admitted: tuple[World, Obj, list[str]],
) -> None:
    world, run, names = admitted
    admin = world.admin
    uid = run["metadata"]["uid"]
    pods = resource_path("v1", "pods", world.namespace)
    jobs = resource_path("kubeflow.org/v2beta1", "mpijobs", world.namespace)
    # A leaked MPI worker and its MPIJob (what a killed adapter leaves behind).
    await admin.create(
        pods,
        {
            "metadata": {"name": "leaked-worker", "labels": {keys.RUN_UID_LABEL: uid}},
            "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "x", "command": ["true"]}]},
        },
    )
    await admin.create(
        jobs,
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": "leaked-job", "labels": {keys.RUN_UID_LABEL: uid}},
            "spec": {"mpiReplicaSpecs": {}},
        },
    )
    await admin.merge_patch(run_path(run, "status"), {"status": {"phase": "Failed", "reason": "CheckFailed"}})
    await admin.merge_patch(run_path(run), {"spec": {"release": True}})

    async def waiting() -> Obj | None:
        current = await admin.get(run_path(run))
        cond = cleanup_condition(current)
        return current if cond and cond["reason"] == "WorkloadsRemain" else None

    current = await eventually(waiting, what="WorkloadsRemain")
    message = cleanup_condition(current)["message"]  # type: ignore[index]
    assert "Pod/leaked-worker" in message
    assert "MPIJob/leaked-job" in message
    assert not any(c["type"] == "Released" and c["status"] == "True" for c in current["status"]["conditions"])
    for node in await world.nodes(names):
        assert reserved_by(node) == uid, "no Node is released while a workload of the Run exists"
    await admin.delete(f"{pods}/leaked-worker", {"gracePeriodSeconds": 0})

    # Still one left: still not released.
    async def job_alone() -> Obj | None:
        current = await waiting()
        message = (cleanup_condition(current) or {}).get("message", "") if current else ""
        return current if "MPIJob/leaked-job" in message and "Pod/leaked-worker" not in message else None

    current = await eventually(job_alone, what="WorkloadsRemain for the MPIJob alone")
    for node in await world.nodes(names):
        assert reserved_by(node) == uid
    await admin.delete(f"{jobs}/leaked-job")

    async def released() -> Obj | None:
        current = await admin.get(run_path(run))
        done = any(c["type"] == "Released" and c["status"] == "True" for c in current["status"].get("conditions", []))
        return current if done else None

    current = await eventually(released, what="Released=True")
    assert cleanup_condition(current)["status"] == "True"  # type: ignore[index]
    for node in await world.nodes(names):
        assert reserved_by(node) is None


def _true(run: Obj, type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in (run.get("status") or {}).get("conditions", []))


async def test_release_is_written_once_and_never_undone(admitted: tuple[World, Obj, list[str]]) -> None:
    """A Run that ends with its release already asked for is released and cleaned up in one
    pass. Every version of the Run from the release on keeps Released=True: the cleanup
    (ResourcesCleaned) must not write conditions from the object read before the release
    (that dropped Released, and the next pass released the group a second time)."""
    world, run, _ = admitted
    admin = world.admin
    asked = await admin.merge_patch(run_path(run), {"spec": {"release": True}})
    versions: list[Obj] = []

    async def follow() -> None:
        path = resource_path(API, keys.RUN_PLURAL, world.namespace)
        selector = f"metadata.name={run['metadata']['name']}"
        params = {"fieldSelector": selector, "resourceVersion": asked["metadata"]["resourceVersion"]}
        async for event in admin.watch(path, **params):
            if event["type"] == "MODIFIED":
                versions.append(event["object"])
                if _true(event["object"], "Released") and _true(event["object"], "ResourcesCleaned"):
                    return

    watching = asyncio.create_task(follow())
    await admin.merge_patch(run_path(run, "status"), {"status": {"phase": "Failed", "reason": "CheckFailed"}})
    async with asyncio.timeout(60):
        await watching
    first = next(i for i, v in enumerate(versions) if _true(v, "Released"))
    undone = [v["metadata"]["resourceVersion"] for v in versions[first:] if not _true(v, "Released")]
    assert not undone, f"Released=True was dropped again in versions {undone}"

    async def released_events() -> list[Obj] | None:
        listed = await admin.get(
            resource_path("v1", "events", world.namespace),
            fieldSelector=f"involvedObject.uid={run['metadata']['uid']},reason=RunReleased",
        )
        return listed["items"] or None

    assert len(await eventually(released_events, what="the RunReleased Event")) == 1


async def test_a_kubelets_mirror_pod_with_the_runs_labels_holds_no_release_back(
    admitted: tuple[World, Obj, list[str]],
) -> None:
    """Issue 42, Low (label squatting): a mirror Pod that a kubelet creates with its own
    credential, labelled with the Run's uid, is no workload of the Run: the release goes on."""
    world, run, names = admitted
    admin = world.admin
    uid = run["metadata"]["uid"]
    idle = await admin.create(resource_path("v1", "nodes"), SimNode(KUBELET_NODE).manifest())
    try:
        async with identities.user(world.cluster.plane, KUBELET_USER).client() as kubelet:
            await kubelet.create(
                resource_path("v1", "pods", world.namespace),
                {
                    "metadata": {
                        "name": f"squat-{KUBELET_NODE}",
                        "labels": {keys.RUN_UID_LABEL: uid},
                        "annotations": {MIRROR_ANNOTATION: "forged"},
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": KUBELET_NODE,
                                "uid": idle["metadata"]["uid"],
                                "controller": True,
                            }
                        ],
                    },
                    "spec": {"nodeName": KUBELET_NODE, "containers": [{"name": "c", "image": "x"}]},
                },
            )
        await admin.merge_patch(run_path(run, "status"), {"status": {"phase": "Failed", "reason": "CheckFailed"}})
        await admin.merge_patch(run_path(run), {"spec": {"release": True}})

        async def released() -> Obj | None:
            current = await admin.get(run_path(run))
            return current if _true(current, "Released") else None

        await eventually(released, what="Released=True despite the mirror Pod")
        for node in await world.nodes(names):
            assert reserved_by(node) is None
    finally:
        with contextlib.suppress(ApiError):
            await admin.delete(
                resource_path("v1", "nodes", name=KUBELET_NODE), {"preconditions": {"uid": idle["metadata"]["uid"]}}
            )
