"""A check interrupted mid-way leaves nothing behind (issue 11, 2.4 and 2.5), on a real API
server with the process kubelet's simulated Nodes:

* SIGTERM (what Argo's Terminate sends the step's adapter) mid-Pod-check: the adapter takes
  what exists as the check's results, persists them, removes the workloads with the same
  evidence-first quiescence, persists the evidence and exits 3;
* SIGKILL mid-check: the workloads stay until the Workflow's exit handler
  (``--sweep-checks-json``) removes them, evidence first; the sweep also writes the evidence
  that an adapter killed after its cleanup still owed.

The same for MPIJob checks (SIGTERM, SIGKILL, a retried step that finds the Run cancelled) runs
on real nodes with the real MPI operator: tests/integration/test_checks_on_real_nodes.py and
tests/integration/test_runs_on_real_nodes.py.
"""

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapter.main import INTERRUPTED
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
