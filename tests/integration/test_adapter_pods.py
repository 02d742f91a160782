"""The adapter's Pod backend on a real API server with the process kubelet: one Pod per
participant, typed results, evidence persisted before teardown, exact quiescence, and
fail-closed handling of every kind of bad or missing result (issue 4, acceptance 1-3, 5-6)."""

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, resource_path
from shared import keys
from shared.evidence import CHECK_EVIDENCE_SCHEMA, RESULTS_SCHEMA, decode_document
from tests.adapter_support import AdapterWorld, check, fake_runner_image
from tests.controller_support import eventually
from tests.policy_support import configure_adapter_workloads

pytestmark = pytest.mark.asyncio(loop_scope="session")

FAIL_ON_ONE = """#!/bin/sh
echo "participant $SIGNAL_PARTICIPANT_INDEX on $SIGNAL_NODE_NAME"
printf '{"gpus": 8, "node": "%s"}' "$SIGNAL_NODE_NAME" > "$SIGNAL_MEASUREMENTS_FILE"
if [ "$SIGNAL_PARTICIPANT_INDEX" = "1" ]; then echo "ECC errors found" >&2; exit 4; fi
"""


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[AdapterWorld]:
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    yield w
    await w.cleanup()


async def _watch_pod_deletions(admin: KubeClient, namespace: str, version: str, seen: list[int]) -> None:
    async for event in admin.watch(resource_path("v1", "pods", namespace), resourceVersion=version):
        obj = event["object"]
        deleting = event["type"] == "DELETED" or obj["metadata"].get("deletionTimestamp")
        if deleting:
            seen.append(int(obj["metadata"]["resourceVersion"]))


async def test_three_participants_one_fails(world: AdapterWorld, admin: KubeClient) -> None:
    await world.setup(3, {"diag.sh": FAIL_ON_ONE}, [check("diag", "diag.sh")])
    start = (await admin.get(resource_path("v1", "pods", world.namespace)))["metadata"]["resourceVersion"]
    deletions: list[int] = []
    watcher = asyncio.create_task(_watch_pod_deletions(admin, world.namespace, start, deletions))
    try:
        outcome = await world.adapter(0)
        await asyncio.sleep(0.5)
    finally:
        watcher.cancel()
    assert outcome.code == 0, outcome.log
    assert outcome.verdict == "Fail"
    assert outcome.outputs["proceed"] == "false"

    evidence_cm = await world.config_map(outcome.outputs["evidence-config-map"])
    document, digest = decode_document(evidence_cm, CHECK_EVIDENCE_SCHEMA)
    assert digest == outcome.outputs["evidence-digest"]
    assert document["verdict"] == "Fail"
    assert document["cleanup"]["state"] == "Complete"
    results = document["results"]
    pods = [w for w in results["workloads"] if w["kind"] == "Pod"]
    assert sorted((w["participantIndex"], w["nodeName"]) for w in pods) == list(enumerate(world.nodes))
    assert len({w["uid"] for w in pods}) == 3
    verdicts = {p["index"]: p["verdict"] for p in results["participants"]}
    assert verdicts == {0: "Pass", 1: "Fail", 2: "Pass"}
    failed = results["participants"][1]
    assert failed["exitCode"] == 4
    assert "ECC errors" in failed["stderr"]["tail"]
    assert results["participants"][0]["measurements"] == {"gpus": 8, "node": world.nodes[0]}
    # The results document is the one persisted separately before teardown.
    results_cm = await world.config_map(document["resultsConfigMap"])
    stored, results_digest = decode_document(results_cm, RESULTS_SCHEMA)
    assert stored == results
    assert results_digest == document["resultsDigest"]
    assert results_cm["immutable"] is True
    assert evidence_cm["immutable"] is True
    owner = results_cm["metadata"]["ownerReferences"][0]
    assert owner["uid"] == world.run["metadata"]["uid"]
    assert owner["kind"] == keys.RUN_KIND
    # Evidence first: the API server's own ordering (resourceVersions) puts the results
    # ConfigMap before the first Pod deletion.
    assert deletions, "no Pod deletion was observed"
    assert int(results_cm["metadata"]["resourceVersion"]) < min(deletions)
    assert await world.pods() == []


async def test_pod_spec_is_constrained(world: AdapterWorld, admin: KubeClient) -> None:
    """Backend Pods: pinned, tolerating exactly the Run's cordon, no API token (the API
    server's ServiceAccount admission injects none), restricted security context."""
    policy = {"kueueQueueName": "gpu-queue", "capabilities": ["IPC_LOCK"], "cpu": "1", "memory": "1Gi"}
    await world.setup(1, {"t.sh": "#!/bin/sh\nsleep 2\n"}, [check("t", "t.sh", gpuCount=2, workload=policy)])
    # IPC_LOCK is outside the adapter policy's default (empty) capability list: an operator adds it.
    await configure_adapter_workloads(world.cluster, world.admin, world.namespace, capabilities="IPC_LOCK")
    task = asyncio.create_task(world.adapter(0))

    async def bound() -> list[dict[str, Any]]:
        # A Pod naming a Kueue queue is pinned by affinity, not nodeName (a gated Pod may not
        # carry one): the scheduler binds it, a moment after the adapter creates it.
        return [p for p in await world.pods() if p["spec"].get("nodeName")]

    pods = await eventually(bound, what="the backend Pod, bound by the scheduler")
    pod = pods[0]
    spec = pod["spec"]
    assert spec["nodeName"] == world.nodes[0]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [field["values"] for term in terms for field in term.get("matchFields", [])] == [[world.nodes[0]]]
    assert spec["automountServiceAccountToken"] is False
    assert not [v for v in spec.get("volumes", []) if "projected" in v or "secret" in v]
    assert all(
        not c.get("volumeMounts") or all("serviceaccount" not in m["mountPath"] for m in c["volumeMounts"])
        for c in spec["containers"]
    )
    assert spec["activeDeadlineSeconds"] == 30
    assert {
        "key": keys.RESERVED_TAINT_KEY,
        "operator": "Equal",
        "value": world.run["metadata"]["uid"],
        "effect": "NoSchedule",
    } in spec["tolerations"]
    labels = pod["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert labels[keys.RUN_NAME_LABEL] == world.run["metadata"]["name"]
    assert labels[keys.PARTICIPANT_LABEL] == "0"
    container = spec["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi", keys.GPU_RESOURCE: "2"}
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert security["allowPrivilegeEscalation"] is False
    assert security["runAsNonRoot"] is True
    # Control: without automountServiceAccountToken: false the same API server injects a token.
    probe = {"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    created = await admin.create(resource_path("v1", "pods", world.namespace), probe)
    assert [v for v in created["spec"]["volumes"] if "projected" in v]
    await admin.delete(resource_path("v1", "pods", world.namespace, "probe"), {"gracePeriodSeconds": 0})
    outcome = await task
    assert outcome.verdict == "Pass", outcome.log


async def test_every_bad_result_is_inconclusive(world: AdapterWorld) -> None:
    # Participant 0 is honest but participant 6 claims its index: a claimed identity is
    # never trusted, so both are Inconclusive; participant 7 is honest and unclaimed.
    modes = ["honest", "malformed", "oversized", "duplicated", "foreign-node", "foreign-uid", "other-index", "honest"]
    script = json.dumps({str(i): m for i, m in enumerate(modes)})
    await world.setup(len(modes), {"fake.json": script}, [check("fake", "fake.json")])
    with fake_runner_image() as image:
        # The adapter's admission policy admits only the configured runner image.
        await configure_adapter_workloads(world.cluster, world.admin, world.namespace, runner_image=image)
        outcome = await world.adapter(0, "--runner-image", image)
    assert outcome.code == 0, outcome.log
    assert outcome.verdict == "Inconclusive"
    assert outcome.outputs["proceed"] == "false"
    document, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    got = [(p["verdict"], p["reason"].split(":")[0]) for p in document["results"]["participants"]]
    assert got == [
        ("Inconclusive", "DuplicateResult"),
        ("Inconclusive", "MalformedResult"),
        ("Inconclusive", "MalformedResult"),
        ("Inconclusive", "MalformedResult"),
        ("Inconclusive", "ForeignResult"),
        ("Inconclusive", "ForeignResult"),
        ("Inconclusive", "ForeignResult"),
        ("Pass", "Succeeded"),
    ]
    assert await world.pods() == []


async def test_deadline_and_never_started_are_inconclusive(world: AdapterWorld) -> None:
    scripts = {"slow.sh": "#!/bin/sh\nsleep 60\n"}
    await world.setup(2, scripts, [check("slow", "slow.sh", deadline="3s")], unmanaged=[1])
    outcome = await world.adapter(0, "--start-grace-seconds", "4")
    assert outcome.code == 0, outcome.log
    assert outcome.verdict == "Inconclusive"
    document, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    reasons = {p["index"]: p["reason"] for p in document["results"]["participants"]}
    verdicts = {p["verdict"] for p in document["results"]["participants"]}
    assert verdicts == {"Inconclusive"}
    assert "Deadline" in reasons[0]
    assert reasons[1].startswith("NotFinished: the Pod is Pending")
    # The never-started Pod was still deleted (grace 0, uid precondition) and is gone.
    assert document["cleanup"]["state"] == "Complete"
    assert await world.pods() == []


async def test_undeletable_pod_stops_the_suite(world: AdapterWorld, admin: KubeClient) -> None:
    scripts = {"ok.sh": "#!/bin/sh\nsleep 1\n"}
    await world.setup(2, scripts, [check("first", "ok.sh"), check("second", "ok.sh")])
    task = asyncio.create_task(world.adapter(0, "--quiesce-seconds", "3"))
    pods = await eventually(world.pods, what="backend Pods")
    held = pods[0]["metadata"]["name"]
    await admin.merge_patch(
        resource_path("v1", "pods", world.namespace, held),
        {"metadata": {"finalizers": ["test.projectsignal.dev/hold"]}},
    )
    outcome = await task
    assert outcome.code == 0, outcome.log
    assert outcome.verdict == "Inconclusive"
    assert outcome.outputs["proceed"] == "false"
    document, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    assert document["cleanup"]["state"] == "Failed"
    assert [w["name"] for w in document["cleanup"]["retained"]] == [held]
    assert document["results"]["verdict"] == "Pass"
    assert document["reason"].startswith("CleanupFailed")
    # Even if something started the next check, the adapter refuses while a workload remains.
    second = await world.adapter(1)
    assert second.code == 2, second.log
    assert "workloads of another check still exist" in second.log
    assert [p["metadata"]["labels"][keys.CHECK_LABEL] for p in await world.pods()] == ["first"]


async def test_retry_reuses_evidence_and_refuses_foreign_runs(world: AdapterWorld, admin: KubeClient) -> None:
    await world.setup(1, {"ok.sh": "#!/bin/sh\nexit 0\n"}, [check("only", "ok.sh")])
    first = await world.adapter(0)
    again = await world.adapter(0)
    assert first.verdict == again.verdict == "Pass"
    assert first.outputs == again.outputs
    assert "already persisted" in again.log
    # A replaced Run (another uid), a cancelled Run and a terminal Run are refused.
    params = world.parameters(0)
    params[params.index("--run-uid") + 1] = "00000000-0000-0000-0000-000000000000"
    replaced = await world.adapter(0, args=params)
    assert replaced.code == 2
    assert "was replaced" in replaced.log
    name = world.run["metadata"]["name"]
    path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, world.namespace, name)
    await admin.merge_patch(path, {"spec": {"cancel": True}})
    cancelled = await world.adapter(0)
    assert cancelled.code == 2
    assert "cancelled" in cancelled.log


async def test_adapter_identity_is_namespaced(cluster: LocalCluster, world: AdapterWorld) -> None:
    await world.setup(1, {"ok.sh": "#!/bin/sh\nexit 0\n"}, [check("only", "ok.sh")])
    sa = await identities.service_account(cluster.plane, world.namespace, "signal-adapter", create=False)
    forbidden: list[Any] = []
    async with sa.client() as kube:
        attempts = [
            kube.merge_patch(resource_path("v1", "nodes", name=world.nodes[0]), {"metadata": {"labels": {"x": "y"}}}),
            kube.get(resource_path("v1", "nodes")),
            kube.get(resource_path("v1", "namespaces")),
            kube.get(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL)),
            kube.get(resource_path("v1", "secrets", world.namespace)),
            kube.get(resource_path("v1", "pods", "default")),
        ]
        for attempt in attempts:
            with pytest.raises(ApiError) as caught:
                await attempt
            forbidden.append(caught.value.status)
        # What it needs, it has.
        await kube.get(resource_path("v1", "pods", world.namespace))
    assert forbidden == [403] * len(attempts)
