"""Both MPI worlds on a real API server with real OpenMPI ranks (issue 11, 2.8; the simulated
MPI operator for now): ``perNode`` runs one MPIJob per participant, a local world of
``slotsPerWorker`` ranks on that Node, each participant judged by its own launcher;
``crossNode`` runs one world of participants x slotsPerWorker ranks. Rank results stay bound
to the participant whose worker ran them, and acceptance agrees with the adapter."""

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapter.inputs import Inputs
from adapter.workloads import mpijob_name
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, resource_path
from shared.acceptance import validate_check
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from shared.result import LauncherReport
from shared.run import Verdict
from tests.adapter_support import AdapterWorld, check

pytestmark = pytest.mark.asyncio(loop_scope="session")

RANKS = """#!/bin/sh
echo "rank $SIGNAL_RANK of $SIGNAL_WORLD_SIZE on ${HOSTNAME:-$(hostname)}"
printf '{"world": %s}' "$SIGNAL_WORLD_SIZE" > "$SIGNAL_MEASUREMENTS_FILE"
case "$SIGNAL_POD_NAME" in $FAIL_HOST) if [ "$SIGNAL_RANK" = "1" ]; then exit 4; fi ;; esac
"""
NO_SSHD = ("--mpi-worker-sshd", "/nonexistent/sshd")


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[AdapterWorld]:
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    yield w
    await w.cleanup()


def job(world: AdapterWorld, index: int, participant: int | None = None) -> str:
    inputs = Inputs(world.namespace, "", world.run["metadata"]["uid"], (), "", index, None)  # type: ignore[arg-type]
    return mpijob_name(inputs, participant)


async def leftovers(admin: KubeClient, namespace: str) -> list[str]:
    left = [
        f"mpijobs/{j['metadata']['name']}"
        for j in (await admin.get(resource_path("kubeflow.org/v2beta1", "mpijobs", namespace)))["items"]
    ]
    left += [
        f"pods/{p['metadata']['name']}" for p in (await admin.get(resource_path("v1", "pods", namespace)))["items"]
    ]
    return left


async def test_pernode_each_participant_runs_its_own_local_world_and_gets_its_own_verdict(
    world: AdapterWorld, admin: KubeClient
) -> None:
    # The second check fails rank 1 of participant 1's local world only.
    scripts = {
        "ranks.sh": RANKS.replace("$FAIL_HOST", "none"),
        "fail.sh": RANKS.replace("$FAIL_HOST", "*-c1-p1-worker-*"),
    }
    mpi = {"slotsPerWorker": 2}
    checks = [
        check("local", "ranks.sh", backend="MPIJob", deadline="60s", gpuCount=2, mpi=mpi),
        check("local-fail", "fail.sh", backend="MPIJob", deadline="60s", gpuCount=2, mpi=mpi),
    ]
    await world.setup(2, scripts, checks)

    outcome = await world.adapter(0, *NO_SSHD)
    assert outcome.code == 0, outcome.log
    evidence, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    assert outcome.verdict == "Pass", json.dumps(evidence["results"]["participants"], indent=1)
    results = evidence["results"]
    assert results.get("launcher") is None, "perNode: no single launcher speaks for the group"
    jobs = sorted((w["participantIndex"], w["name"]) for w in results["workloads"] if w["kind"] == "MPIJob")
    assert jobs == [(0, job(world, 0, 0)), (1, job(world, 0, 1))]
    launchers = {w["participantIndex"]: w["nodeName"] for w in results["workloads"] if w["role"] == "launcher"}
    workers = {w["participantIndex"]: w["nodeName"] for w in results["workloads"] if w["role"] == "worker"}
    assert launchers == workers == dict(enumerate(world.nodes)), "launcher and worker on the participant's Node"
    for participant in results["participants"]:
        assert participant["reason"] == "Succeeded: rank(s) 0, 1 exited 0"
        assert participant["measurements"] == {"world": 2}, "a local world of slotsPerWorker ranks"
    assert validate_check(world.run, 0, evidence)[:2] == (Verdict.PASS, None)
    assert evidence["cleanup"]["state"] == "Complete"
    assert await leftovers(admin, world.namespace) == []

    second = await world.adapter(1, *NO_SSHD)
    assert second.code == 0, second.log
    assert second.verdict == "Fail"
    evidence, _ = decode_document(await world.config_map(second.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    verdicts = {p["index"]: (p["verdict"], p["reason"]) for p in evidence["results"]["participants"]}
    # Participant 1's local world failed; participant 0's own launcher proved it passed.
    assert verdicts == {0: ("Pass", "Succeeded: rank(s) 0, 1 exited 0"), 1: ("Fail", "Failed: rank 1 exited 4")}
    assert validate_check(world.run, 1, evidence)[:3] == (Verdict.FAIL, None, {0: Verdict.PASS, 1: Verdict.FAIL})
    assert await leftovers(admin, world.namespace) == []


async def test_crossnode_is_one_world_of_slots_ranks_on_every_node(world: AdapterWorld, admin: KubeClient) -> None:
    cross = {"scope": "crossNode", "slotsPerWorker": 2}
    await world.setup(
        2,
        {"ranks.sh": RANKS.replace("$FAIL_HOST", "none")},
        [check("world", "ranks.sh", backend="MPIJob", deadline="60s", gpuCount=2, mpi=cross)],
    )
    outcome = await world.adapter(0, *NO_SSHD)
    assert outcome.code == 0, outcome.log
    evidence, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    assert outcome.verdict == "Pass", json.dumps(evidence["results"], indent=1)[:3000]
    report = LauncherReport.model_validate(evidence["results"]["launcher"]["launcher"])
    assert report.world_size == 4
    name = job(world, 0)
    per_host: dict[str, list[int]] = {}
    for rank in report.ranks:
        per_host.setdefault(rank.host, []).append(rank.rank)
    assert sorted(per_host) == [f"{name}-worker-0", f"{name}-worker-1"]
    assert all(len(ranks) == 2 for ranks in per_host.values())
    node_of = {w["name"]: w["participantIndex"] for w in evidence["results"]["workloads"] if w["role"] == "worker"}
    for participant in evidence["results"]["participants"]:
        own = sorted(per_host[participant["workload"]])
        assert node_of[participant["workload"]] == participant["index"]
        assert participant["reason"] == f"Succeeded: rank(s) {', '.join(map(str, own))} exited 0"
    assert validate_check(world.run, 0, evidence)[:2] == (Verdict.PASS, None)
    assert await leftovers(admin, world.namespace) == []
