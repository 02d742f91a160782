"""A check interrupted mid-way leaves nothing behind (issue 11, 2.4 and 2.5), on a real API
server with the process kubelet and the simulated MPI operator:

* SIGTERM (what Argo's Terminate sends the step's adapter) mid-Pod-check and mid-MPIJob-check:
  the adapter takes what exists as the check's results, persists them, removes the workloads
  with the same evidence-first quiescence, persists the evidence and exits 3;
* SIGKILL mid-MPIJob-check: the workers stay (with their own deadline) until the next adapter
  of that Run (the Workflow's exit handler, ``--sweep-checks-json``, or a retried step that
  finds the Run cancelled) removes them, evidence first.
"""

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapter.main import INTERRUPTED
from adapter.workloads import WORKER_GRACE_SECONDS
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from shared.evidence import CHECK_EVIDENCE_SCHEMA, RESULTS_SCHEMA, decode_document
from tests.adapter_support import AdapterWorld, check
from tests.controller_support import eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")

SLOW = """#!/bin/sh
echo "started on ${SIGNAL_NODE_NAME:-$HOSTNAME}"
sleep 300
"""
NO_SSHD = ("--mpi-worker-sshd", "/nonexistent/sshd")
MPIJOBS = ("kubeflow.org/v2beta1", "mpijobs")


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[AdapterWorld]:
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    yield w
    await w.cleanup()


async def workloads_of(world: AdapterWorld) -> list[str]:
    """Every Run-labelled Pod and MPIJob that still exists."""
    selector = f"{keys.RUN_UID_LABEL}={world.run['metadata']['uid']}"
    jobs = await world.admin.get(resource_path(*MPIJOBS, world.namespace), labelSelector=selector)
    return [f"Pod/{p['metadata']['name']}" for p in await world.pods()] + [
        f"MPIJob/{j['metadata']['name']}" for j in jobs["items"]
    ]


async def running(
    world: AdapterWorld, count: int, role: str | None = None, process: asyncio.subprocess.Process | None = None
) -> list[Obj]:
    async def ready() -> list[Obj] | None:
        if process is not None and process.returncode is not None:
            out = await process.stdout.read() if process.stdout else b""
            raise AssertionError(f"the adapter exited {process.returncode} early:\n{out.decode(errors='replace')}")
        pods = [p for p in await world.pods() if (p.get("status") or {}).get("phase") == "Running"]
        if role is not None:
            pods = [p for p in pods if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == role]
        return pods if len(pods) >= count else None

    found: list[Obj] = await eventually(ready, timeout=90, what=f"{count} running {role or 'backend'} Pod(s)")
    return found


async def evidence_of(world: AdapterWorld, check_index: int) -> Obj:
    name = f"{world.run['metadata']['name']}-c{check_index}-evidence"
    document, _ = decode_document(await world.config_map(name), CHECK_EVIDENCE_SCHEMA)
    return document


async def finish(process: asyncio.subprocess.Process) -> tuple[int, str]:
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode if process.returncode is not None else -1, out.decode(errors="replace")


async def test_sigterm_mid_pod_check_persists_evidence_then_removes_the_pods(world: AdapterWorld) -> None:
    await world.setup(2, {"slow.sh": SLOW}, [check("slow", "slow.sh", deadline="5m")])
    process, _ = await world.spawn(0)
    await running(world, 2, process=process)
    process.send_signal(signal.SIGTERM)
    code, log = await finish(process)
    assert code == INTERRUPTED, log
    assert await workloads_of(world) == [], "the interrupted check's Pods must be gone when the adapter exits"
    evidence = await evidence_of(world, 0)
    assert evidence["cleanup"]["state"] == "Complete"
    assert evidence["verdict"] == "Inconclusive"
    assert evidence["reason"].startswith("Interrupted:")
    # Evidence first: the results were persisted before anything was deleted, and name the Pods.
    results, _ = decode_document(await world.config_map(evidence["resultsConfigMap"]), RESULTS_SCHEMA)
    assert sorted(w["name"] for w in results["workloads"]) == sorted(w["name"] for w in evidence["cleanup"]["deleted"])
    assert len(results["workloads"]) == 2
    assert results["collectedAt"] <= evidence["cleanup"]["finishedAt"]


@pytest.mark.parametrize("scope", ["crossNode", "perNode"])
async def test_sigterm_mid_mpijob_check_removes_the_whole_tree(world: AdapterWorld, scope: str) -> None:
    await world.setup(
        2, {"slow.sh": SLOW}, [check("mpi", "slow.sh", backend="MPIJob", deadline="5m", mpi={"scope": scope})]
    )
    process, _ = await world.spawn(0, *NO_SSHD)
    await running(world, 2, role="worker", process=process)
    await running(world, 1 if scope == "crossNode" else 2, role="launcher")
    process.send_signal(signal.SIGTERM)
    code, log = await finish(process)
    assert code == INTERRUPTED, log
    assert await workloads_of(world) == []
    evidence = await evidence_of(world, 0)
    assert evidence["cleanup"]["state"] == "Complete", evidence["cleanup"]
    assert evidence["verdict"] == "Inconclusive"
    deleted = sorted((w["kind"], w["role"]) for w in evidence["cleanup"]["deleted"])
    jobs = 1 if scope == "crossNode" else 2
    assert deleted.count(("MPIJob", "mpijob")) == jobs
    assert deleted.count(("Pod", "worker")) == 2


async def test_a_killed_adapters_mpi_workers_are_removed_by_the_next_adapter_of_the_run(
    world: AdapterWorld, admin: KubeClient
) -> None:
    await world.setup(
        2,
        {"slow.sh": SLOW},
        [check("mpi", "slow.sh", backend="MPIJob", deadline="5m"), check("after", "slow.sh")],
    )
    process, _ = await world.spawn(0, *NO_SSHD)
    workers = await running(world, 2, role="worker", process=process)
    process.kill()
    await finish(process)
    # Nothing removed them: the workers are still there, bounded by their own deadline.
    left = await workloads_of(world)
    assert len([name for name in left if name.startswith("MPIJob/")]) == 2, left  # perNode: one per participant
    assert len([name for name in left if "-worker-" in name]) == 2, left
    for worker in workers:
        assert worker["spec"]["activeDeadlineSeconds"] == 300 + WORKER_GRACE_SECONDS

    # A retried step finds the Run cancelled: it refuses, but first removes them, evidence first.
    run_path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, world.namespace, world.run["metadata"]["name"])
    await admin.merge_patch(run_path, {"spec": {"cancel": True}})
    retried = await world.adapter(0, *NO_SSHD)
    assert retried.code == 2, retried.log
    assert "is cancelled" in retried.log
    assert await workloads_of(world) == []
    evidence = await evidence_of(world, 0)
    assert evidence["cleanup"]["state"] == "Complete"
    assert evidence["verdict"] == "Inconclusive"


async def test_the_exit_handlers_sweep_removes_what_a_killed_adapter_left(world: AdapterWorld) -> None:
    checks = [check("pods", "slow.sh", deadline="5m"), check("mpi", "slow.sh", backend="MPIJob", deadline="5m")]
    await world.setup(2, {"slow.sh": SLOW}, checks)
    process, _ = await world.spawn(0)
    await running(world, 2, process=process)
    process.kill()
    await finish(process)
    assert len(await workloads_of(world)) == 2
    parameters = world.parameters(0)
    sweep_args = [*parameters[: parameters.index("--check-index")], "--sweep-checks-json", json.dumps(checks)]
    swept = await world.adapter(0, args=sweep_args)
    assert swept.code == 0, swept.log
    assert await workloads_of(world) == []
    evidence = await evidence_of(world, 0)
    assert evidence["cleanup"]["state"] == "Complete"
    assert evidence["reason"].startswith("Interrupted:")
    # The check that never started gets no evidence from the sweep (nothing to take).
    name = f"{world.run['metadata']['name']}-c1-evidence"
    configmaps = (await world.admin.get(resource_path("v1", "configmaps", world.namespace)))["items"]
    assert name not in [c["metadata"]["name"] for c in configmaps]
    # A second sweep finds nothing to do.
    again = await world.adapter(0, args=sweep_args)
    assert again.code == 0, again.log


async def test_the_sweep_writes_the_evidence_an_adapter_killed_after_the_cleanup_still_owed(
    world: AdapterWorld,
) -> None:
    """An adapter killed after it persisted the results and removed the workloads, but before
    it persisted the evidence, leaves no workload for the sweep to find: the sweep still owes
    (and writes) the evidence, from the persisted results. Before: nothing to do, no evidence."""
    checks = [check("quick", "quick.sh"), check("after", "quick.sh")]
    await world.setup(2, {"quick.sh": "#!/bin/sh\necho done\n"}, checks)
    outcome = await world.adapter(0)
    assert outcome.code == 0, outcome.log
    first = await evidence_of(world, 0)
    # The state such a kill leaves: results persisted, workloads gone, no evidence.
    name = f"{world.run['metadata']['name']}-c0-evidence"
    await world.admin.delete(resource_path("v1", "configmaps", world.namespace, name))
    assert await workloads_of(world) == []
    parameters = world.parameters(0)
    sweep_args = [*parameters[: parameters.index("--check-index")], "--sweep-checks-json", json.dumps(checks)]
    swept = await world.adapter(0, args=sweep_args)
    assert swept.code == 0, swept.log
    evidence = await evidence_of(world, 0)
    assert evidence["results"] == first["results"], "the evidence is bound to the persisted results"
    assert evidence["resultsDigest"] == first["resultsDigest"]
    assert evidence["cleanup"]["state"] == "Complete"
    assert evidence["verdict"] == first["verdict"] == "Pass"
    # The check that never ran still gets nothing.
    configmaps = (await world.admin.get(resource_path("v1", "configmaps", world.namespace)))["items"]
    assert f"{world.run['metadata']['name']}-c1-evidence" not in [c["metadata"]["name"] for c in configmaps]
