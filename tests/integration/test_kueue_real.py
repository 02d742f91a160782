"""Issue 41, part 4: real Kueue (v0.17.0, built from the Go module proxy, its webhooks served with
a certificate of the cluster's own CA; localcluster/kueuemanager.py) queues Signal's Pod checks,
with Signal's admission policies in force (AdapterWorld installs them) and simulated Nodes run by
the process kubelet and placed by the real kube-scheduler.

* A two-participant Pod check that names a queue with enough GPU quota is admitted by Kueue as
  one pod group (one Workload for both Pods) and passes; nothing is left behind (Kueue's
  finalizer is removed by Kueue, the Pods are gone).
* With quota for one participant only, the group is admitted all or nothing: neither Pod ever
  runs, and the check ends Inconclusive at its deadline. Its Pods are NOT yet removed: Kueue keeps
  its finalizer on the deleted Pods of a group it never admitted (strict xfail, see the test).

The MPIJob check with a queue runs only on real nodes (the MPI operator): not covered here."""

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, resource_path
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
        outcome = await world.adapter(0)
        assert outcome.code == 0, outcome.log
        assert outcome.verdict == "Pass", outcome.log
        print(f"queued check: {time.monotonic() - started:.1f}s")
        workloads = (await admin.get(resource_path(KUEUE_API, "workloads", namespace)))["items"]
        assert len(workloads) == 1, [w["metadata"]["name"] for w in workloads]  # one for the group
        (workload,) = workloads
        # One pod set per distinct Pod shape (each participant's Pod has its own node affinity).
        assert sum(s["count"] for s in workload["spec"]["podSets"]) == 2, workload["spec"]
        admitted = {c["type"]: c["status"] for c in workload["status"].get("conditions", [])}
        assert admitted.get("Admitted") == "True" or admitted.get("Finished") == "True", admitted
        evidence, _ = decode_document(
            await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA
        )
        assert [p["verdict"] for p in evidence["results"]["participants"]] == ["Pass", "Pass"]
        assert evidence["cleanup"]["state"] == "Complete", evidence["cleanup"]
        assert await world.pods() == []
    finally:
        await kueue.unmanage(namespace)


@pytest.mark.xfail(
    strict=True,
    reason="Kueue v0.17.0 keeps its finalizer kueue.x-k8s.io/managed on the deleted Pods of a pod group it "
    "never admitted (seen: both Pods left Pending with the finalizer 60 s after the adapter deleted them, "
    "even with kueue.x-k8s.io/retriable-in-group=false), so the check's cleanup ends Failed; the adapter may "
    "not remove another controller's finalizer. Open: see the issue 41 report.",
)
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
    finally:
        await kueue.unmanage(namespace)
