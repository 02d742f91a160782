"""The adapter's MPIJob backend on a real API server: real OpenMPI ranks across two
simulated workers, launcher evidence, exact quiescence of the MPIJob's whole ownership
tree before the step returns, and a retained worker stopping the suite (issue 4,
acceptance 4 and 5)."""

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapter.inputs import Inputs
from adapter.workloads import mpijob_name
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, resource_path
from shared import keys
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from shared.result import LauncherReport
from tests.adapter_support import AdapterWorld, check
from tests.controller_support import eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")

RANKS = """#!/bin/sh
echo "rank $SIGNAL_RANK of $SIGNAL_WORLD_SIZE on $(hostname)"
printf '{"world": %s, "tmp_writable": %s}' "$SIGNAL_WORLD_SIZE" "$(touch "$TMPDIR/x" && echo true || echo false)" \
  > "$SIGNAL_MEASUREMENTS_FILE"
if [ "$SIGNAL_RANK" = "$FAIL_RANK" ]; then exit 4; fi
"""
NO_SSHD = ("--mpi-worker-sshd", "/nonexistent/sshd")
CROSS = {"scope": "crossNode"}


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[AdapterWorld]:
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    yield w
    await w.cleanup()


def _job(world: AdapterWorld, index: int) -> str:
    uid = world.run["metadata"]["uid"]
    return mpijob_name(Inputs(world.namespace, "", uid, (), "", index, None))  # type: ignore[arg-type]


async def _tree(admin: KubeClient, namespace: str, job: str) -> list[str]:
    """Everything of the MPIJob's ownership tree that still exists."""
    left = []
    for api, plural, name in [
        ("kubeflow.org/v2beta1", "mpijobs", job),
        ("batch/v1", "jobs", f"{job}-launcher"),
        ("v1", "services", job),
        ("v1", "configmaps", f"{job}-config"),
        ("v1", "secrets", f"{job}-ssh"),
    ]:
        listing = await admin.get(resource_path(api, plural, namespace))
        left += [f"{plural}/{name}" for o in listing["items"] if o["metadata"]["name"] == name]
    pods = await admin.get(resource_path("v1", "pods", namespace))
    left += [f"pods/{p['metadata']['name']}" for p in pods["items"] if p["metadata"]["name"].startswith(job)]
    return left


async def test_two_ranks_pass_then_a_rank_fails(world: AdapterWorld, admin: KubeClient) -> None:
    scripts = {"ranks.sh": RANKS.replace("$FAIL_RANK", "none"), "fail.sh": RANKS.replace("$FAIL_RANK", "1")}
    checks = [
        check("mpi-ok", "ranks.sh", backend="MPIJob", deadline="60s", mpi=CROSS),
        check("mpi-fail", "fail.sh", backend="MPIJob", deadline="60s", mpi=CROSS),
    ]
    await world.setup(2, scripts, checks)
    outcome = await world.adapter(0, *NO_SSHD)
    assert outcome.code == 0, outcome.log
    evidence, digest = decode_document(
        await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA
    )
    assert outcome.verdict == "Pass", json.dumps(evidence["results"].get("launcher"), indent=1)
    assert outcome.outputs["proceed"] == "true"
    evidence, digest = decode_document(
        await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA
    )
    assert digest == outcome.outputs["evidence-digest"]
    results = evidence["results"]
    job = _job(world, 0)
    report = LauncherReport.model_validate(results["launcher"]["launcher"])
    assert report.world_size == 2
    # Rank 0's measurements are the check's, carried by the launcher's result.
    assert results["launcher"]["measurements"] == {"world": 2, "tmp_writable": True}
    assert report.hosts == [f"{job}-worker-0", f"{job}-worker-1"]
    assert [(r.rank, r.host, r.exit_code) for r in report.ranks] == [
        (0, f"{job}-worker-0", 0),
        (1, f"{job}-worker-1", 0),
    ]
    workers = [w for w in results["workloads"] if w["role"] == "worker"]
    assert sorted((w["participantIndex"], w["nodeName"]) for w in workers) == list(enumerate(world.nodes))
    kinds = sorted({w["kind"] for w in results["workloads"]})
    assert kinds == ["Job", "MPIJob", "Pod"]
    assert [p["verdict"] for p in results["participants"]] == ["Pass", "Pass"]
    assert evidence["cleanup"]["state"] == "Complete"
    assert sorted(w["name"] for w in evidence["cleanup"]["deleted"] if w["role"] == "worker") == sorted(
        w["name"] for w in workers
    )
    # The whole ownership tree was gone before the step returned.
    assert await _tree(admin, world.namespace, job) == []

    second = await world.adapter(1, *NO_SSHD)
    assert second.code == 0, second.log
    evidence, _ = decode_document(await world.config_map(second.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    assert second.verdict == "Fail", json.dumps(evidence["results"], indent=1)[:6000]
    assert second.outputs["proceed"] == "false"
    verdicts = {p["index"]: p["verdict"] for p in evidence["results"]["participants"]}
    failing_worker = f"{_job(world, 1)}-worker-1"
    failing_index = next(w["participantIndex"] for w in evidence["results"]["workloads"] if w["name"] == failing_worker)
    # A collective check that failed proves nothing good about the other rank either.
    reasons = {p["index"]: p["reason"] for p in evidence["results"]["participants"]}
    assert verdicts[failing_index] == "Fail"
    assert verdicts[1 - failing_index] == "Inconclusive"
    assert reasons[1 - failing_index].startswith("Launcher:")
    assert await _tree(admin, world.namespace, _job(world, 1)) == []


async def test_retained_worker_is_inconclusive_and_stops_the_suite(world: AdapterWorld, admin: KubeClient) -> None:
    scripts = {"ranks.sh": RANKS.replace("$FAIL_RANK", "none")}
    checks = [check("mpi", "ranks.sh", backend="MPIJob", deadline="60s", mpi=CROSS), check("after", "ranks.sh")]
    await world.setup(2, scripts, checks)
    task = asyncio.create_task(world.adapter(0, *NO_SSHD, "--quiesce-seconds", "4"))
    job = _job(world, 0)
    held = f"{job}-worker-0"

    async def worker_exists() -> bool:
        return any(p["metadata"]["name"] == held for p in await world.pods())

    await eventually(worker_exists, timeout=60, what="the first MPI worker")
    await admin.merge_patch(
        resource_path("v1", "pods", world.namespace, held),
        {"metadata": {"finalizers": ["test.projectsignal.dev/hold"]}},
    )
    outcome = await task
    assert outcome.code == 0, outcome.log
    assert outcome.verdict == "Inconclusive"
    assert outcome.outputs["proceed"] == "false"
    evidence, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    assert evidence["results"]["verdict"] == "Pass"
    assert evidence["cleanup"]["state"] == "Failed"
    assert held in [w["name"] for w in evidence["cleanup"]["retained"]]
    next_check = await world.adapter(1)
    assert next_check.code == 2
    assert "workloads of another check still exist" in next_check.log
    assert not [p for p in await world.pods() if p["metadata"]["labels"].get(keys.CHECK_LABEL) == "after"]
