"""Whole Runs on real nodes (issue 11: the simulated MPI operator and the rsh stand-in retire, so
every MPIJob of the suite runs here or in test_checks_on_real_nodes.py): two real nodes (kubelet,
containerd, runc), the runner image built from this repository, the real Kubeflow MPI operator
v0.8.0, and Argo's real workflow-controller, whose step Pods (the adapter) run on the cluster's
simulated system node while the checks' Pods, launchers and workers run on the real nodes (a
``crossNode`` launcher on ``node-3``, which no Run requests).
One cluster for the module (tests/realnode_support.py), a namespace under Pod Security
``restricted`` with Signal's admission policies per test.

* the full path through the controller: request -> admission -> Workflow -> a Pod check and a
  ``crossNode`` MPIJob check over real SSH -> evidence -> verdicts -> projection -> release,
  with the MPIJob's whole ownership tree gone and no container of the Run left on a node;
* cancel mid-Pod-check and mid-MPIJob-check (acceptance 2.4): ``Canceled`` with
  ``WorkloadCleanupComplete=True``, no workload left and no container of the check running on
  either node (read from each node's containerd), the group reserved until ``spec.release``;
* a worker that outlives its deletion (a finalizer) is retained: Inconclusive, the suite stops;
* a SIGKILLed adapter's MPI workers run on (bounded by their own deadline) until the next
  adapter of the Run, a retried step that finds the Run cancelled, removes and stops them;
* real Kueue (issue 41 §4; started for that test alone): a Pod check and a ``crossNode``
  MPIJob check that name a queue are each admitted as one Workload and pass.
"""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapter.inputs import Inputs
from adapter.workloads import WORKER_GRACE_SECONDS, mpijob_name
from localcluster.controlplane import free_port
from localcluster.kube import KubeClient, Obj, resource_path
from localcluster.kueuemanager import KUEUE_API, KueueManager
from shared import keys
from shared.acceptance import validate_check
from shared.digests import bundle_digest
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from shared.result import LauncherReport
from tests.adapter_support import check
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by
from tests.kueue_support import ADMISSION_GATE, KueueWatch, gates, kueue_watch, node_selector, owner_kinds, pod_count
from tests.realnode_support import (
    RealCluster,
    RealWorld,
    assert_stopped,
    containers_of,
    keep_cluster_dir,
    leftovers,
    prepare_namespace,
    running_containers,
    start_real_cluster,
    stop_real_cluster,
)
from tests.run_builders import stored_run_evidence

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(900)]

NODES = ("node-1", "node-2")
SPARE = "node-3"
"""The real node no Run requests: where a crossNode launcher runs (never a participant's Node)."""
MPIJOBS = ("kubeflow.org/v2beta1", "mpijobs")
TERMINAL = {"Succeeded", "Failed", "Inconclusive", "Canceled"}
SCRIPTS = {
    "inventory.sh": '#!/bin/sh\necho "gpus on $SIGNAL_NODE_NAME"\nprintf \'{"gpus": 8}\' > "$SIGNAL_MEASUREMENTS_FILE"\n',
    "ranks.sh": '#!/bin/sh\necho "rank $SIGNAL_RANK of $SIGNAL_WORLD_SIZE on $(hostname)"\n'
    'printf \'{"world": %s, "uid": %s}\' "$SIGNAL_WORLD_SIZE" "$(id -u)" > "$SIGNAL_MEASUREMENTS_FILE"\n',
    "slow.sh": '#!/bin/sh\necho "started on $SIGNAL_NODE_NAME"\nsleep 300\n',
}


@pytest.fixture(scope="module")
async def real() -> AsyncIterator[RealCluster]:
    started = await start_real_cluster(keep_cluster_dir(), argo=True)
    print("\nreal-node cluster with Argo: " + ", ".join(f"{k} {v:.1f}s" for k, v in started.timings.items()))
    try:
        yield started
    finally:
        await stop_real_cluster(started)


@dataclass
class Signal:
    """One test's Signal on the real nodes: its namespace, the controller, one profile, and
    both real Nodes requested for it."""

    real: RealCluster
    world: World
    controller: ControllerProcess
    profile: str

    @property
    def namespace(self) -> str:
        return self.world.namespace

    def run_path(self, run: Obj) -> str:
        return resource_path(keys.API_VERSION, keys.RUN_PLURAL, self.namespace, run["metadata"]["name"])

    async def run_in(self, phases: set[str], timeout: float) -> Obj:
        async def found() -> Obj | None:
            runs = await self.world.runs()
            return runs[0] if runs and (runs[0].get("status") or {}).get("phase") in phases else None

        run: Obj = await eventually(found, timeout=timeout, interval=0.5, what=f"a Run in {phases}\n{self.logs()}")
        return run

    async def workloads(self, run: Obj) -> list[str]:
        """Every Pod and MPIJob labelled with the Run's uid that still exists."""
        selector = f"{keys.RUN_UID_LABEL}={run['metadata']['uid']}"
        pods = await self.real.admin.get(resource_path("v1", "pods", self.namespace), labelSelector=selector)
        jobs = await self.real.admin.get(resource_path(*MPIJOBS, self.namespace), labelSelector=selector)
        return [f"Pod/{p['metadata']['name']}" for p in pods["items"]] + [
            f"MPIJob/{j['metadata']['name']}" for j in jobs["items"]
        ]

    def logs(self) -> str:
        return f"{self.controller.logs()}\n{self.real.logs()}"


@contextlib.asynccontextmanager
async def signal_on_real_nodes(
    real: RealCluster, tmp_path: Path, checks: list[Obj], before: Callable[[str], Awaitable[None]] | None = None
) -> AsyncIterator[Signal]:
    """A namespace with Signal's controller for a profile of ``checks`` over both real Nodes,
    both requested (``before(namespace)`` first, e.g. its Kueue queues). On the way out every Run
    is cancelled (if still running) and released, and the Nodes are waited for until nothing
    holds them: the next test finds them free."""
    namespace = await prepare_namespace(real.admin, argo=True)
    if before is not None:
        await before(namespace)
    world = World(real.cluster, real.admin, namespace)
    await world.setup(scripts=SCRIPTS)
    profile = f"{namespace}-suite"
    await world.add_profile(profile_body(profile, namespace, 2, digest=bundle_digest(SCRIPTS, {}), checks=checks))
    controller = ControllerProcess(
        real.cluster,
        namespace,
        tmp_path,
        resync=1.0,
        policies=False,
        workflow_instance_id=real.cluster.workflow_instance_id,
        metrics_port=free_port(),
    )
    labels = {keys.CERTIFY_LABEL: profile, "pool": "gpu"}
    signal = Signal(real, world, controller, profile)
    try:
        await controller.start()
        for node in NODES:
            await real.admin.merge_patch(resource_path("v1", "nodes", name=node), {"metadata": {"labels": labels}})
        yield signal
    finally:
        try:
            for run in await world.runs():
                done = (run.get("status") or {}).get("phase") in TERMINAL
                spec = {"release": True} if done else {"cancel": True, "release": True}
                await real.admin.merge_patch(signal.run_path(run), {"spec": spec})

            async def free() -> bool:
                nodes = await world.nodes(NODES)
                return all(reserved_by(n) is None and not n["spec"].get("unschedulable") for n in nodes)

            await eventually(free, timeout=180, interval=1.0, what=f"the real Nodes released\n{signal.logs()}")
        finally:
            controller.stop()
            unlabel = {"metadata": {"labels": dict.fromkeys([*labels, keys.certified_label(profile)])}}
            for node in NODES:
                await real.admin.merge_patch(resource_path("v1", "nodes", name=node), unlabel)
            await world.cleanup()
            await real.cluster.delete_namespace(namespace)


def job_of(namespace: str, run: Obj, check_index: int, participant: int | None = None) -> str:
    """The name adapter.workloads gives a check's MPIJob (perNode: ``participant``'s)."""
    inputs = Inputs(namespace, "", run["metadata"]["uid"], (), "", check_index, None)  # type: ignore[arg-type]
    return mpijob_name(inputs, participant)


async def ownership_tree(admin: KubeClient, namespace: str, job: str) -> list[str]:
    """What of the MPIJob's ownership tree (the operator's launcher Job, Service, ConfigMap,
    Secret, and every Pod) still exists."""
    left = []
    for api, plural, name in [
        (*MPIJOBS, job),
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


async def test_the_full_path_with_an_mpijob_check_over_ssh_on_real_nodes(real: RealCluster, tmp_path: Path) -> None:
    checks = [
        check("inventory", "inventory.sh", gpuCount=1, deadline="90s"),
        check("allreduce", "ranks.sh", backend="MPIJob", gpuCount=1, deadline="2m", mpi={"scope": "crossNode"}),
    ]
    async with signal_on_real_nodes(real, tmp_path, checks) as signal:
        run = await signal.run_in(TERMINAL, timeout=300)
        status = run["status"]
        assert status["phase"] == "Succeeded", (status, signal.logs())
        assert status["checkVerdicts"] == [
            {"name": "inventory", "verdict": "Pass"},
            {"name": "allreduce", "verdict": "Pass"},
        ]
        document = await stored_run_evidence(real.admin, run)
        for each in document["checks"]:
            verdict, problem, _ = validate_check(run, each["index"], each["evidence"])
            assert (verdict.value, problem) == ("Pass", None)
        # One world of two ranks over SSH, a worker on each real node, the ranks as the runner user.
        results = document["checks"][1]["evidence"]["results"]
        report = LauncherReport.model_validate(results["launcher"]["launcher"])
        job = job_of(signal.namespace, run, 1)
        assert report.world_size == 2
        assert sorted(r.host for r in report.ranks) == [f"{job}-worker-0", f"{job}-worker-1"]
        assert results["launcher"]["measurements"] == {"world": 2, "uid": keys.RUNNER_UID}
        workers = sorted(w["nodeName"] for w in results["workloads"] if w.get("role") == "worker")
        assert workers == list(NODES)
        # The launcher, whose report decides both participants, ran on neither: on the spare node.
        launchers = [w["nodeName"] for w in results["workloads"] if w.get("role") == "launcher"]
        assert launchers == [SPARE]
        assert SPARE not in [p["nodeName"] for p in run["spec"]["participants"]]
        inventory = document["checks"][0]["evidence"]["results"]["workloads"]
        assert sorted(w["nodeName"] for w in inventory if w["kind"] == "Pod") == list(NODES)

        async def released() -> list[Obj] | None:
            nodes: list[Obj] = await signal.world.nodes(NODES)
            return nodes if all(reserved_by(n) is None for n in nodes) else None

        for node in await eventually(released, timeout=60, what=f"automatic release\n{signal.logs()}"):
            assert node["metadata"]["labels"][keys.certified_label(signal.profile)] == "Pass"
            assert not [t for t in node["spec"].get("taints") or [] if t["key"] == keys.RESERVED_TAINT_KEY]
            assert not node["spec"].get("unschedulable")
        # Nothing of the Run is left: no object of the MPIJob's tree, no container on a node.
        assert await ownership_tree(real.admin, signal.namespace, job) == []
        assert await signal.workloads(run) == []
        assert await running_containers(real, signal.namespace) == []


@pytest.mark.parametrize("backend", ["Pod", "MPIJob"])
async def test_cancel_mid_check_on_real_nodes_removes_and_stops_every_workload(
    real: RealCluster, tmp_path: Path, backend: str
) -> None:
    slow: dict[str, Any] = check("slow", "slow.sh", backend=backend, gpuCount=1, deadline="5m")
    if backend == "MPIJob":
        slow["mpi"] = {"scope": "crossNode"}
    checks = [slow, check("never", "slow.sh", gpuCount=1, deadline="5m")]
    async with signal_on_real_nodes(real, tmp_path, checks) as signal:
        run = await signal.run_in({"Running"}, timeout=120)
        uid, name = run["metadata"]["uid"], run["metadata"]["name"]
        view = RealWorld(real.cluster, real.admin, signal.namespace, tmp_path)
        prefix = f"{job_of(signal.namespace, run, 0)}-worker-" if backend == "MPIJob" else name
        # Positive control: the check's runner containers run on both real nodes.
        running = await containers_of(real, view, prefix, 2)
        assert sorted(c.node for c in running) == list(NODES)
        await real.admin.merge_patch(signal.run_path(run), {"spec": {"cancel": True}})
        current = await signal.run_in({"Canceled"}, timeout=180)
        conditions = {c["type"]: c for c in current["status"]["conditions"]}
        assert conditions["WorkloadCleanupComplete"]["status"] == "True", conditions
        assert await signal.workloads(run) == []
        # "Proven gone" means stopped: nothing of the namespace runs on either node.
        assert await running_containers(real, signal.namespace) == []
        stored = await real.admin.get(
            resource_path("v1", "configmaps", signal.namespace, keys.check_evidence_name(name, 0))
        )
        evidence, _ = decode_document(stored, CHECK_EVIDENCE_SCHEMA)
        assert (evidence["verdict"], evidence["cleanup"]["state"]) == ("Inconclusive", "Complete")
        assert evidence["reason"].startswith("Interrupted:")
        kinds = sorted({w["kind"] for w in evidence["cleanup"]["deleted"]})
        assert kinds == (["MPIJob", "Pod"] if backend == "MPIJob" else ["Pod"]), evidence["cleanup"]
        configmaps = (await real.admin.get(resource_path("v1", "configmaps", signal.namespace)))["items"]
        assert keys.check_results_name(name, 1) not in [c["metadata"]["name"] for c in configmaps]
        for node in await signal.world.nodes(NODES):
            assert reserved_by(node) == uid, "Canceled keeps the group reserved until release"


@pytest.fixture
async def world(real: RealCluster, tmp_path: Path) -> AsyncIterator[RealWorld]:
    """An adapter-only world (no controller, no Argo) in a namespace of its own."""
    w = RealWorld(real.cluster, real.admin, await prepare_namespace(real.admin, argo=False), tmp_path)
    try:
        yield w
    finally:
        with contextlib.suppress(Exception):
            for pod in await w.pods(""):
                if pod["metadata"].get("finalizers"):
                    path = resource_path("v1", "pods", w.namespace, pod["metadata"]["name"])
                    await real.admin.merge_patch(path, {"metadata": {"finalizers": None}})
        await w.cleanup()
        await real.cluster.delete_namespace(w.namespace)


async def test_a_retained_worker_is_inconclusive_and_stops_the_suite(real: RealCluster, world: RealWorld) -> None:
    checks = [
        check("mpi", "ranks.sh", backend="MPIJob", deadline="90s", gpuCount=1, mpi={"scope": "crossNode"}),
        check("after", "ranks.sh", gpuCount=1),
    ]
    await world.setup_real(NODES, SCRIPTS, checks)
    job = job_of(world.namespace, world.run, 0)
    held = f"{job}-worker-0"
    task = asyncio.create_task(world.adapter(0, "--quiesce-seconds", "4"))

    async def worker_exists() -> bool:
        return any(p["metadata"]["name"] == held for p in await world.pods())

    await eventually(worker_exists, timeout=90, what="the first MPI worker")
    hold = {"metadata": {"finalizers": ["test.projectsignal.dev/hold"]}}
    await real.admin.merge_patch(resource_path("v1", "pods", world.namespace, held), hold)
    outcome = await task
    assert outcome.code == 0, outcome.log
    assert (outcome.verdict, outcome.outputs["proceed"]) == ("Inconclusive", "false"), outcome.log
    evidence, _ = decode_document(await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA)
    assert evidence["results"]["verdict"] == "Pass", json.dumps(evidence["results"], indent=1)[:3000]
    assert evidence["cleanup"]["state"] == "Failed"
    assert held in [w["name"] for w in evidence["cleanup"]["retained"]]
    next_check = await world.adapter(1)
    assert next_check.code == 2
    assert "workloads of another check still exist" in next_check.log
    assert not [p for p in await world.pods() if p["metadata"]["labels"].get(keys.CHECK_LABEL) == "after"]


async def test_a_killed_adapters_mpi_workers_are_removed_by_the_next_adapter_of_the_run(
    real: RealCluster, world: RealWorld
) -> None:
    checks = [
        check("mpi", "slow.sh", backend="MPIJob", deadline="5m", gpuCount=1),
        check("after", "slow.sh", gpuCount=1),
    ]
    await world.setup_real(NODES, SCRIPTS, checks)
    prefixes = [job_of(world.namespace, world.run, 0, p) for p in (0, 1)]  # perNode: one MPIJob each
    process, _ = await world.spawn(0)
    for prefix in prefixes:
        await containers_of(real, world, f"{prefix}-worker-", 1)
    process.kill()
    await asyncio.wait_for(process.communicate(), 60)
    # Nothing removed them: the workers still run on the nodes, bounded by their own deadline.
    left = await leftovers(world)
    assert len([n for n in left if n.startswith("MPIJob/")]) == 2, left
    workers = [p for p in await world.pods() if "-worker-" in p["metadata"]["name"]]
    assert len(workers) == 2, left
    assert {w["spec"]["activeDeadlineSeconds"] for w in workers} == {300 + WORKER_GRACE_SECONDS}
    still = [c for c in await running_containers(real, world.namespace, "") if c.container == "runner"]
    assert sorted(c.node for c in still if "-worker-" in c.pod) == list(NODES)
    # A retried step finds the Run cancelled: it refuses, but first removes them, evidence first.
    runs = resource_path(keys.API_VERSION, keys.RUN_PLURAL, world.namespace, world.run["metadata"]["name"])
    await real.admin.merge_patch(runs, {"spec": {"cancel": True}})
    retried = await world.adapter(0)
    assert retried.code == 2, retried.log
    assert "is cancelled" in retried.log
    assert await leftovers(world) == []
    await assert_stopped(real, world, prefixes)
    evidence, _ = decode_document(
        await world.config_map(keys.check_evidence_name(world.run["metadata"]["name"], 0)), CHECK_EVIDENCE_SCHEMA
    )
    assert (evidence["verdict"], evidence["cleanup"]["state"]) == ("Inconclusive", "Complete")


@pytest.fixture(scope="module")
async def kueue(real: RealCluster) -> AsyncIterator[KueueManager]:
    """Real Kueue v0.17.0 beside the real nodes (started only for the tests that ask for it)."""
    manager = KueueManager(real.cluster.plane, real.admin)
    await manager.start()
    print(f"\nkueue: started in {manager.started_seconds:.1f}s, {manager.rss_bytes() / 2**20:.0f} MiB resident")
    try:
        yield manager
    finally:
        await manager.stop()


async def test_a_pod_check_and_an_mpijob_check_that_name_a_queue_are_admitted_by_real_kueue_and_pass(
    real: RealCluster, kueue: KueueManager, tmp_path: Path
) -> None:
    """Issue 41 §4 on real nodes, Signal's admission policies in force: Kueue gates the Pod
    check's two Pods (one pod group) and suspends the MPIJob when the adapter creates them, admits
    each from a ClusterQueue with 2 GPUs whose flavor selects on the GPU product label, and lets
    them run with the flavor's node selector; both checks pass and nothing of them is left."""
    queued = {"kueueQueueName": "gpu"}
    checks = [
        check("inventory", "inventory.sh", gpuCount=1, deadline="2m", workload=queued),
        check("allreduce", "ranks.sh", "MPIJob", "3m", gpuCount=1, mpi={"scope": "crossNode"}, workload=queued),
    ]
    flavor = {"nvidia.com/gpu.product": "SIM-GPU-80GB"}  # every real node's, not the system node's
    began, namespaces = time.monotonic(), list[str]()
    async with contextlib.AsyncExitStack() as stack:

        async def queue(namespace: str) -> None:
            namespaces.append(namespace)
            await kueue.manage(namespace, gpus=2, node_labels=flavor)
            watched.append(await stack.enter_async_context(kueue_watch(real.admin, namespace)))

        watched: list[KueueWatch] = []
        try:
            async with signal_on_real_nodes(real, tmp_path, checks, before=queue) as signal:
                run = await signal.run_in(TERMINAL, timeout=420)
                if run["status"]["phase"] != "Succeeded":
                    print(signal.logs(), kueue.component.tail(60) if kueue.component else "", sep="\n--- kueue ---\n")
                    checks_seen = (await stored_run_evidence(real.admin, run))["checks"]
                    reasons = [(c["evidence"]["reason"], c["evidence"]["results"]) for c in checks_seen]
                    raise AssertionError(f"{run['status']['phase']}: {reasons}")
                assert [v["verdict"] for v in run["status"]["checkVerdicts"]] == ["Pass", "Pass"]
                (seen,) = watched
                # One Workload per check: the Pod check's pod group, the MPIJob (its launcher and workers).
                admitted = sorted((owner_kinds(w), pod_count(w)) for w in seen.admitted().values())
                assert admitted == [(["MPIJob"], 3), (["Pod"], 2)], list(seen.workloads.versions)
                for versions in seen.pods_of(keys.CHECK_LABEL, "inventory").values():
                    assert ADMISSION_GATE in gates(versions[0]), versions[0]["spec"]
                    assert node_selector(versions[-1]["spec"]) == flavor
                (job_versions,) = seen.mpijobs.versions.values()
                assert job_versions[0]["spec"]["runPolicy"]["suspend"] is True, "suspended by Kueue on creation"
                mpi_pods = seen.pods_of(keys.CHECK_LABEL, "allreduce")
                assert len(mpi_pods) == 3, mpi_pods.keys()  # the launcher and a worker per participant
                # The workers' GPUs came from the flavor; the launcher requests nothing: no flavor, no selector.
                selectors = {name: node_selector(v[-1]["spec"]) for name, v in mpi_pods.items()}
                workers = [s for name, s in selectors.items() if "-worker-" in name]
                assert workers == [flavor, flavor], selectors
                job = job_of(signal.namespace, run, 1)
                assert await ownership_tree(real.admin, signal.namespace, job) == []
                assert await signal.workloads(run) == []

                async def no_workloads() -> bool:
                    path = resource_path(KUEUE_API, "workloads", signal.namespace)
                    return not (await real.admin.get(path))["items"]

                await eventually(no_workloads, timeout=60, what="Kueue's Workloads gone with the checks' workloads")
        finally:
            for namespace in namespaces:
                await kueue.unmanage(namespace)
    print(f"queued Pod + MPIJob checks through real Kueue: {time.monotonic() - began:.1f}s")
