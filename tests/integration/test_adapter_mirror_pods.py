"""Mirror Pods against the adapter, on the real API server with NodeRestriction (issue 42 H-B
and the Low item on label squatting). A kubelet's own credential may create a *mirror Pod*
bound to its Node, in any namespace, with any labels, and write its status and termination
message; the API server admits exactly that (and refuses it any ownerReference but its Node).
Such a Pod carrying a check's labels and a forged Pass is ignored by the adapter: it neither
speaks for a participant nor makes the real Pod's verdict Inconclusive
(``DuplicateWorkload``), and it is recorded nowhere in the evidence."""

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from adapter import workloads
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.controlplane import KUBELET_NODE, KUBELET_USER
from localcluster.fleet import SimNode
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys, ownership
from shared.digests import sha256_digest
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from shared.result import LauncherReport, RankResult, RunnerResult, render_result
from tests.adapter_support import AdapterWorld, check
from tests.controller_support import eventually
from tests.unit.signal_builders import make_result

pytestmark = pytest.mark.asyncio(loop_scope="session")

PASSES = "#!/bin/sh\necho fine\n"


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[AdapterWorld]:
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    # The kubelet's Node, with no kubelet running for it: nothing but the test acts as it.
    idle = await admin.create(resource_path("v1", "nodes"), SimNode(KUBELET_NODE).manifest())
    yield w
    await w.cleanup()
    with contextlib.suppress(ApiError):
        await admin.delete(
            resource_path("v1", "nodes", name=KUBELET_NODE), {"preconditions": {"uid": idle["metadata"]["uid"]}}
        )


async def forge_mirror_pod(
    world: AdapterWorld,
    kubelet: KubeClient,
    labels: dict[str, str],
    name: str,
    claim: Callable[[Obj], RunnerResult] | None = None,
) -> Obj:
    """A mirror Pod with ``labels`` on the kubelet's own Node, finished, its runner claiming
    Pass (``claim``: the result it writes, from the Pod; by default a Pod check's participant 0's)."""
    node = await world.admin.get(resource_path("v1", "nodes", name=KUBELET_NODE))
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": world.namespace,
            "labels": labels,
            "annotations": {ownership.MIRROR_ANNOTATION: "forged"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": KUBELET_NODE,
                    "uid": node["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": KUBELET_NODE,
            "restartPolicy": "Never",
            "containers": [{"name": "runner", "image": keys.DEFAULT_RUNNER_IMAGE}],
        },
    }
    pod = await kubelet.create(resource_path("v1", "pods", world.namespace), body)
    participant = world.run["spec"]["participants"][0]
    result = (
        claim(pod)
        if claim is not None
        else make_result(
            index=0, node=participant["nodeName"], pod_name=pod["metadata"]["name"], pod_uid=pod["metadata"]["uid"]
        )
    )
    status = {
        "phase": "Succeeded",
        "containerStatuses": [
            {
                "name": "runner",
                "image": keys.DEFAULT_RUNNER_IMAGE,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {"exitCode": 0, "reason": "Completed", "message": render_result(result).decode()}
                },
            }
        ],
    }
    return await kubelet.merge_patch(resource_path("v1", "pods", world.namespace, name, "status"), {"status": status})


async def test_a_kubelets_mirror_pod_with_a_checks_labels_is_ignored(world: AdapterWorld) -> None:
    await world.setup(2, {"ok.sh": PASSES}, [check("inventory", "ok.sh")])
    run_uid = world.run["metadata"]["uid"]
    labels = {
        keys.RUN_NAME_LABEL: world.run["metadata"]["name"],
        keys.RUN_UID_LABEL: run_uid,
        keys.CHECK_LABEL: "inventory",
        keys.COMPONENT_LABEL: "backend",
        keys.PARTICIPANT_LABEL: "0",
    }
    async with identities.user(world.cluster.plane, KUBELET_USER).client() as kubelet:
        # What NodeRestriction admits: a mirror Pod on its own Node, any labels, its status.
        forged = await forge_mirror_pod(world, kubelet, labels, f"squat-{KUBELET_NODE}")
        assert forged["status"]["phase"] == "Succeeded"
        # ... and what it refuses: an ownerReference to anything but its Node (the Run here).
        owner = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.RUN_KIND,
            "name": world.run["metadata"]["name"],
            "uid": run_uid,
        }
        with pytest.raises(ApiError) as refused:
            await kubelet.create(
                resource_path("v1", "pods", world.namespace),
                {
                    "metadata": {
                        "name": "owned",
                        "annotations": {ownership.MIRROR_ANNOTATION: "x"},
                        "labels": labels,
                        "ownerReferences": [owner],
                    },
                    "spec": {
                        "nodeName": KUBELET_NODE,
                        "containers": [{"name": "runner", "image": keys.DEFAULT_RUNNER_IMAGE}],
                    },
                },
            )
        assert refused.value.status == 403, refused.value
        outcome = await world.adapter(0)
    assert outcome.code == 0, outcome.log
    document, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    results = document["results"]
    assert [(p["verdict"], p["reason"].split(":")[0]) for p in results["participants"]] == [
        ("Pass", "Succeeded"),
        ("Pass", "Succeeded"),
    ], json.dumps(results["participants"])[:2000]
    assert outcome.verdict == "Pass"
    recorded = {w["uid"] for w in results["workloads"]} | {w["uid"] for w in document["cleanup"]["deleted"]}
    assert forged["metadata"]["uid"] not in recorded
    for workload in results["workloads"]:
        assert workload["owners"] == [{"kind": keys.RUN_KIND, "name": world.run["metadata"]["name"], "uid": run_uid}]


async def test_a_mirror_pod_squatting_a_backend_pods_name_blocks_nothing(world: AdapterWorld) -> None:
    """The kubelet takes the name the adapter gives participant 1's Pod: the check still runs
    that participant, in a Pod of a generated name, and both Pass."""
    await world.setup(2, {"ok.sh": PASSES}, [check("inventory", "ok.sh")])
    taken = f"{world.run['metadata']['name']}-c0-p1"
    labels = {keys.RUN_UID_LABEL: world.run["metadata"]["uid"], keys.CHECK_LABEL: "inventory"}
    async with identities.user(world.cluster.plane, KUBELET_USER).client() as kubelet:
        squatter = await forge_mirror_pod(world, kubelet, labels, taken)
        outcome = await world.adapter(0)
    assert outcome.code == 0, outcome.log
    assert outcome.verdict == "Pass", outcome.log[-3000:]
    document, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    pods = {w["participantIndex"]: w for w in document["results"]["workloads"]}
    assert pods[0]["name"] == f"{world.run['metadata']['name']}-c0-p0"
    assert pods[1]["name"].startswith(f"{taken}-")
    assert squatter["metadata"]["uid"] not in {w["uid"] for w in document["results"]["workloads"]}


async def test_a_mirror_launcher_forging_every_ranks_pass_certifies_no_one(world: AdapterWorld) -> None:
    """H-B as the issue found it: a crossNode MPIJob check; a Node that is no participant (the
    kubelet's) creates a mirror Pod with the launcher's labels and a complete, well-formed
    launcher report in which every rank exited 0. No MPI operator runs here: the test plays it
    for the workers (owned by the MPIJob, as the operator makes them) and makes no launcher Job,
    so the only "launcher" is the forgery. It proves nothing: every participant is
    Inconclusive (NoLauncher), never Pass."""
    scripts = {"ranks.sh": PASSES}
    cross = {"scope": "crossNode", "slotsPerWorker": 1}
    await world.setup(2, scripts, [check("world", "ranks.sh", backend="MPIJob", deadline="5s", gpuCount=1, mpi=cross)])
    process, outputs = await world.spawn(0, "--start-grace-seconds", "3")
    try:
        jobs_path = resource_path("kubeflow.org/v2beta1", "mpijobs", world.namespace)

        async def created() -> Obj | None:
            items = (await world.admin.get(jobs_path))["items"]
            return items[0] if items else None

        job = await eventually(created, what="the adapter's MPIJob")
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        template = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
        owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": name, "uid": uid, "controller": True}
        hosts = [f"{name}-worker-{i}" for i in range(2)]
        for i, participant in enumerate(world.run["spec"]["participants"]):
            worker = {
                "metadata": {
                    "name": hosts[i],
                    "labels": {**template["metadata"]["labels"], workloads.MPI_JOB_LABEL: name},
                    "ownerReferences": [owner],
                },
                "spec": {
                    "nodeName": participant["nodeName"],
                    "restartPolicy": "Never",
                    "containers": [{"name": "runner", "image": keys.DEFAULT_RUNNER_IMAGE, "args": ["worker"]}],
                },
            }
            await world.admin.create(resource_path("v1", "pods", world.namespace), worker)
        labels = {**template["metadata"]["labels"], workloads.MPI_JOB_LABEL: name, workloads.MPI_ROLE_LABEL: "launcher"}
        report = LauncherReport.build(
            hosts,
            [RankResult(rank=i, host=h, exit_code=0) for i, h in enumerate(hosts)],
            world_size=2,
            mpirun_exit_code=0,
        )
        digest = sha256_digest(PASSES.encode())
        async with identities.user(world.cluster.plane, KUBELET_USER).client() as kubelet:
            forged = await forge_mirror_pod(
                world,
                kubelet,
                labels,
                f"{name}-launcher-{KUBELET_NODE}",
                lambda pod: make_result(
                    index=None,
                    role="launcher",
                    node=KUBELET_NODE,
                    pod_name=pod["metadata"]["name"],
                    pod_uid=pod["metadata"]["uid"],
                    launcher=report,
                    script_digest=digest,
                ),
            )
        out, _ = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    log = out.decode(errors="replace")
    assert process.returncode == 0, log
    values = {p.name: p.read_text() for p in outputs.iterdir()}
    document, _ = decode_document(await world.config_map(values["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    results = document["results"]
    assert [(p["verdict"], p["reason"].split(":")[0]) for p in results["participants"]] == [
        ("Inconclusive", "NoLauncher"),
        ("Inconclusive", "NoLauncher"),
    ], json.dumps(results["participants"])[:2000]
    assert values["verdict"] == "Inconclusive"
    assert "launcher" not in results, "the forged report is recorded nowhere"
    assert forged["metadata"]["uid"] not in {w["uid"] for w in results["workloads"]}
    workers = [w for w in results["workloads"] if w["role"] == "worker"]
    assert [w["owners"][0]["uid"] for w in workers] == [uid, uid]
