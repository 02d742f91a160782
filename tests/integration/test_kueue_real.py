"""Issue 41, part 4: real Kueue (v0.17.0, built from the Go module proxy, its webhooks served with
a certificate of the cluster's own CA; localcluster/kueuemanager.py) queues Signal's Pod checks,
with Signal's admission policies in force (AdapterWorld installs them) and simulated Nodes run by
the process kubelet and placed by the real kube-scheduler.

* A two-participant Pod check that names a queue with enough GPU quota is admitted by Kueue as
  one pod group (one Workload for both Pods) and passes; nothing is left behind (Kueue's
  finalizer is removed by Kueue, the Pods are gone).
* With quota for one participant only, the group is admitted all or nothing: neither Pod ever
  runs, and the check ends Inconclusive at its deadline, saying the queue never admitted it; and
  nothing is left behind. Kueue keeps its finalizer on the deleted Pods of a group it never
  admitted until the group's Workload is deleted, which the adapter does (its own group's only:
  deploy/base/adapter-kueue-admission-policy.yaml). Before that: cleanup Failed, both Pods left
  Pending with the finalizer kueue.x-k8s.io/managed.

The MPIJob check with a queue runs only on real nodes (the MPI operator):
test_runs_on_real_nodes.py::test_a_pod_check_and_an_mpijob_check_that_name_a_queue_are_admitted_by_real_kueue_and_pass."""

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, resource_path
from localcluster.kueuemanager import KUEUE_API, KueueManager
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from tests.adapter_support import AdapterWorld, check
from tests.controller_support import eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")

OK = '#!/bin/sh\necho "participant $SIGNAL_PARTICIPANT_INDEX on $SIGNAL_NODE_NAME"\n'


@pytest.fixture(scope="module")
async def kueue(cluster: LocalCluster) -> AsyncIterator[KueueManager]:
    manager = KueueManager(cluster.plane, cluster.admin)
    await manager.start()
    print(f"kueue: started in {manager.started_seconds:.1f}s, {manager.rss_bytes() / 2**20:.0f} MiB resident")
    try:
        yield manager
    finally:
        print(f"kueue: {manager.rss_bytes() / 2**20:.0f} MiB resident at the end")
        await manager.stop()


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[AdapterWorld]:
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    yield w
    await w.cleanup()


def _queued(deadline: str = "60s") -> dict[str, object]:
    return check("inv", "ok.sh", deadline=deadline, gpuCount=1, workload={"kueueQueueName": "gpu"})


async def test_a_queued_pod_check_is_admitted_as_one_group_and_passes(
    kueue: KueueManager, world: AdapterWorld, admin: KubeClient, namespace: str
) -> None:
    await kueue.manage(namespace, gpus=2)
    try:
        await world.setup(2, {"ok.sh": OK}, [_queued()])
        started = time.monotonic()
        process, outputs = await world.spawn(0)
        seen: list[dict[str, object]] = []

        async def admitted_as_one_group() -> bool:
            # One Workload for the group while it runs (the adapter deletes it when the check ends).
            seen[:] = (await admin.get(resource_path(KUEUE_API, "workloads", namespace)))["items"]
            return any(
                {c["type"]: c["status"] for c in w.get("status", {}).get("conditions", [])}.get("Admitted") == "True"
                for w in seen
            )

        await eventually(admitted_as_one_group, timeout=120, what="the pod group's Workload admitted by Kueue")
        assert len(seen) == 1, [w["metadata"]["name"] for w in seen]  # type: ignore[index]
        (workload,) = seen
        # One pod set per distinct Pod shape (each participant's Pod has its own node affinity).
        assert sum(s["count"] for s in workload["spec"]["podSets"]) == 2, workload["spec"]  # type: ignore[index]
        out, _ = await process.communicate()
        log = out.decode(errors="replace")
        values = {p.name: p.read_text() for p in outputs.iterdir()} if outputs.exists() else {}
        assert (process.returncode, values.get("verdict")) == (0, "Pass"), log
        print(f"queued check: {time.monotonic() - started:.1f}s")
        assert await _workloads(admin, namespace) == [], "the group's Workload is deleted with its Pods"
        evidence, _ = decode_document(await world.config_map(values["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
        assert [p["verdict"] for p in evidence["results"]["participants"]] == ["Pass", "Pass"]
        assert evidence["cleanup"]["state"] == "Complete", evidence["cleanup"]
        assert await world.pods() == []
    finally:
        await kueue.unmanage(namespace)


async def test_a_queue_short_of_quota_holds_the_whole_group_until_the_deadline(
    kueue: KueueManager, world: AdapterWorld, admin: KubeClient, namespace: str
) -> None:
    await kueue.manage(namespace, gpus=1)
    try:
        await world.setup(2, {"ok.sh": OK}, [_queued("15s")])
        process, outputs = await world.spawn(0, "--start-grace-seconds", "5")

        async def both_gated() -> bool:
            pods = await world.pods()
            return len(pods) == 2 and all(p["spec"].get("schedulingGates") for p in pods)

        await eventually(both_gated, timeout=60, what="both Pods created and gated by Kueue")
        out, _ = await process.communicate()
        log = out.decode(errors="replace")
        values = {p.name: p.read_text() for p in outputs.iterdir()} if outputs.exists() else {}
        assert values.get("verdict") == "Inconclusive", log
        evidence, _ = decode_document(await world.config_map(values["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
        participants = evidence["results"]["participants"]
        assert [p["verdict"] for p in participants] == ["Inconclusive", "Inconclusive"], participants
        left = [
            (p["metadata"]["name"], p["metadata"].get("finalizers"), p["status"].get("phase"))
            for p in await world.pods()
        ]
        kueue_log = kueue.component.tail(400) if kueue.component else ""
        noted = "\n".join(line[:400] for line in kueue_log.splitlines() if "sig-" in line or "rror" in line)[-6000:]
        assert evidence["cleanup"]["state"] == "Complete", f"{evidence['cleanup']['message']}; left {left}\n{noted}"
        assert left == [], "nothing left behind"
        assert all("NotAdmittedByQueue" in json.dumps(p) for p in participants), participants
        group = f"sig-{world.run['metadata']['uid']}-c0"
        assert group not in [w["metadata"]["name"] for w in await _workloads(admin, namespace)]
    finally:
        await kueue.unmanage(namespace)


async def _workloads(admin: KubeClient, namespace: str) -> list[dict[str, object]]:
    return list((await admin.get(resource_path(KUEUE_API, "workloads", namespace)))["items"])


def _workload(name: str, owner: dict[str, str] | None) -> dict[str, object]:
    container = {"name": "c", "image": "projectsignal.dev/runner:0.1.0"}
    metadata: dict[str, object] = {"name": name}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", **owner}]
    return {
        "apiVersion": KUEUE_API,
        "kind": "Workload",
        "metadata": metadata,
        "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}]},
    }


async def test_the_adapter_may_delete_only_its_own_pod_groups_workloads(
    kueue: KueueManager, world: AdapterWorld, admin: KubeClient, namespace: str, cluster: LocalCluster
) -> None:
    """Another job's Workload in the namespace, or one that only borrows Signal's naming, is
    refused to the adapter (deploy/base/adapter-kueue-admission-policy.yaml); a pod group's is not."""
    await world.setup(1, {"ok.sh": OK}, [_queued("15s")])
    uid = world.run["metadata"]["uid"]
    # A real (gated, never scheduled) Pod owns the Pod-owned ones, so the garbage collector keeps them.
    held = {
        "metadata": {"name": "owner"},
        "spec": {
            "schedulingGates": [{"name": "example.com/hold"}],
            "containers": [{"name": "c", "image": "projectsignal.dev/runner:0.1.0"}],
        },
    }
    owner = await admin.create(resource_path("v1", "pods", namespace), held)
    pod_owner = {"name": "owner", "uid": owner["metadata"]["uid"]}
    cases = {
        "another-job": (_workload("another-job", pod_owner), False),
        "sig-shaped-not-owned-by-pods": (_workload(f"sig-{uid}-c1", None), False),
        "its-pod-group": (_workload(f"sig-{uid}-c0", pod_owner), True),
    }
    path = resource_path(KUEUE_API, "workloads", namespace)
    for body, _ in cases.values():
        await admin.create(path, body)
    sa = await identities.service_account(cluster.plane, namespace, "signal-adapter", create=False)
    seen: dict[str, str] = {}
    async with sa.client() as adapter:

        async def in_force() -> bool:  # the binding reaches the admission plugin a moment after it is written
            try:
                await adapter.request("DELETE", f"{path}/another-job", params={"dryRun": "All"})
            except ApiError as error:
                return "signal-adapter-kueue" in error.message
            return False

        await eventually(in_force, timeout=30, what="policy signal-adapter-kueue in force")
        for case, (body, allowed) in cases.items():
            name = str(body["metadata"]["name"])  # type: ignore[index]
            try:
                await adapter.delete(f"{path}/{name}")
                seen[case] = "deleted"
            except ApiError as error:
                seen[case] = "refused by policy" if "signal-adapter-kueue" in error.message else error.message
            assert seen[case] == ("deleted" if allowed else "refused by policy"), seen
    left = sorted(str(w["metadata"]["name"]) for w in await _workloads(admin, namespace))  # type: ignore[index]
    assert left == sorted([f"sig-{uid}-c1", "another-job"])
    for name in left:
        await admin.delete(f"{path}/{name}")
    await admin.delete(resource_path("v1", "pods", namespace, "owner"), {"gracePeriodSeconds": 0})
