"""Mirror Pods against the adapter, on the real API server with NodeRestriction (issue 42 H-B
and the Low item on label squatting). A kubelet's own credential may create a *mirror Pod*
bound to its Node, in any namespace, with any labels, and write its status and termination
message; the API server admits exactly that (and refuses it any ownerReference but its Node).
Such a Pod carrying a check's labels and a forged Pass is ignored by the adapter: it neither
speaks for a participant nor makes the real Pod's verdict Inconclusive
(``DuplicateWorkload``), and it is recorded nowhere in the evidence."""

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.controlplane import KUBELET_NODE, KUBELET_USER
from localcluster.fleet import SimNode
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys, ownership
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from shared.result import render_result
from tests.adapter_support import AdapterWorld, check
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


async def forge_mirror_pod(world: AdapterWorld, kubelet: KubeClient, labels: dict[str, str], name: str) -> Obj:
    """A mirror Pod with ``labels`` on the kubelet's own Node, finished, its runner claiming Pass."""
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
    result = make_result(
        index=0, node=participant["nodeName"], pod_name=pod["metadata"]["name"], pod_uid=pod["metadata"]["uid"]
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
