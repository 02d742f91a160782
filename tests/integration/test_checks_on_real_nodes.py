"""Signal's checks on real nodes (issue 11, section 2: items 2, 4, 5, 6, 7, 8 and 9): real
kubelets, containerd and runc, the runner image built from this repository, the real Kubeflow
MPI operator v0.8.0, a namespace under Pod Security ``restricted``, and the adapter as a process
with its ServiceAccount (tests/realnode_support.py). One cluster for the module.

* a Pod check runs on both real nodes as the runner user and a failure is bound to its Node;
* an MPIJob check over real SSH (non-root sshd on 2222, the operator's key at the runner's
  ``~/.ssh``): ``crossNode`` (one world, the launcher on the real node not under test, a worker
  on each participant's) and ``perNode``
  (a local world per Node), each passing, and a failing rank proven on the right Node;
* SIGTERM mid-Pod-check and mid-MPIJob-check: evidence first, then everything removed; a
  SIGKILLed adapter's workers keep running until the exit handler's sweep removes them;
* "proven gone" means stopped: once the adapter reports a check's workloads gone, no container
  of that check runs on any node, read from each node's containerd;
* Kueue: a gated Pod placed by required node affinity is accepted and runs on its real node once
  the gate is lifted; a Node tainted ``nvidia.com/gpu:NoSchedule`` runs a check that tolerates
  it, and eligibility reports it for a suite that does not.
"""

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapter.inputs import Inputs, parse_inputs
from adapter.main import INTERRUPTED
from adapter.workloads import DEFAULT_RUNNER_IMAGE, MPI_JOB_LABEL, backend_pod, mpijob_name
from controller.rules.eligibility import ineligibility
from controller.rules.nodes import node_view
from kubeio.client import Kube
from kubeio.errors import AlreadyExists as KubeAlreadyExists
from kubeio.errors import NotFound as KubeNotFound
from localcluster.kube import ApiError, Obj, resource_path
from shared import keys
from shared.digests import bundle_digest, sha256_digest
from shared.evidence import CHECK_EVIDENCE_SCHEMA, RESULTS_SCHEMA, decode_document
from shared.ownership import MIRROR_ANNOTATION
from shared.profile import CertificationProfile
from shared.result import LauncherReport, RankResult, render_result
from tests.adapter_support import AdapterOutcome, check
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by
from tests.realnode_support import (
    PodClock,
    RealCluster,
    RealWorld,
    assert_stopped,
    containers_of,
    keep_cluster_dir,
    leftovers,
    running_containers,
    start_real_cluster,
    stop_real_cluster,
)
from tests.unit.signal_builders import make_result

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(900)]

NODES = ("node-1", "node-2")
SPARE = "node-3"
"""The real node no Run requests: where a crossNode launcher runs (never a participant's Node)."""
MPIJOBS = ("kubeflow.org/v2beta1", "mpijobs")
GATE = {"name": "kueue.x-k8s.io/admission"}
REQUESTED = {keys.CERTIFY_LABEL: "gpu-suite", "pool": "gpu"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
POD_SCRIPT = """#!/bin/sh
echo "participant $SIGNAL_PARTICIPANT_INDEX on $SIGNAL_NODE_NAME as $(id -u)"
printf '{"node": "%s", "uid": %s}' "$SIGNAL_NODE_NAME" "$(id -u)" > "$SIGNAL_MEASUREMENTS_FILE"
if [ "$SIGNAL_PARTICIPANT_INDEX" = "1" ]; then echo "ECC errors found" >&2; exit 4; fi
"""
# A rank reports its world, its user and the commands of its process ancestry (read from
# /proc): started by OpenMPI's orted, which the worker's sshd started for the launcher's ssh.
# On a real node a rank's host name is its worker Pod's name.
RANKS = """#!/bin/sh
p=$$; via=""
while [ "$p" -gt 1 ]; do
  via="$via $(cat /proc/$p/comm)"; p=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$p/status)
done
via="$via $(cat /proc/1/comm)"
echo "rank $SIGNAL_RANK of $SIGNAL_WORLD_SIZE on $(hostname) as $(id -u) via$via"
printf '{"world": %s, "uid": %s, "via": "%s", "pod": "%s", "node": "%s"}' "$SIGNAL_WORLD_SIZE" "$(id -u)" \\
  "${via# }" "${SIGNAL_POD_NAME:-}" "${SIGNAL_NODE_NAME:-}" > "$SIGNAL_MEASUREMENTS_FILE"
case "$(hostname)" in $FAIL_POD) if [ "$SIGNAL_RANK" = "$FAIL_RANK" ]; then exit 4; fi ;; esac
"""


def ranks(fail_host: str = "none", fail_rank: int = -1) -> str:
    """RANKS where rank ``fail_rank`` exits 4 if it runs on a host matching ``fail_host``."""
    return RANKS.replace("$FAIL_POD", fail_host).replace("$FAIL_RANK", str(fail_rank))


# Ignores SIGTERM, as many diagnostics do: only a kill stops it.
SLOW = """#!/bin/sh
trap '' TERM
echo "started on $SIGNAL_NODE_NAME"
sleep 300
"""
FIGURES: dict[str, float] = {}


@pytest.fixture(scope="module")
async def real() -> AsyncIterator[RealCluster]:
    started = await start_real_cluster(keep_cluster_dir())
    print("\nreal-node cluster: " + ", ".join(f"{k} {v:.1f}s" for k, v in started.timings.items()))
    try:
        yield started
    finally:
        if FIGURES:
            print("\nfigures on real nodes: " + ", ".join(f"{k} {v:.2f}s" for k, v in FIGURES.items()))
        await stop_real_cluster(started)


@pytest.fixture
async def world(real: RealCluster, tmp_path: Path) -> AsyncIterator[RealWorld]:
    w = RealWorld(real.cluster, real.admin, real.namespace, tmp_path)
    yield w
    await w.cleanup()


async def evidence(world: RealWorld, outcome: AdapterOutcome) -> Obj:
    assert outcome.code == 0, outcome.log
    document, digest = decode_document(
        await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA
    )
    assert digest == outcome.outputs["evidence-digest"]
    return document


async def test_a_pod_check_runs_on_real_nodes_and_its_failure_is_bound_to_its_node(
    real: RealCluster, world: RealWorld
) -> None:
    await world.setup_real(NODES, {"diag.sh": POD_SCRIPT}, [check("diag", "diag.sh")])
    began = time.monotonic()
    async with PodClock(world) as clock:
        outcome = await world.adapter(0)
    wall = time.monotonic() - began
    document = await evidence(world, outcome)
    await assert_stopped(real, world, [world.run["metadata"]["name"]])
    assert outcome.verdict == "Fail", json.dumps(document["results"]["participants"], indent=1)
    results = document["results"]
    placed = sorted((w["participantIndex"], w["nodeName"]) for w in results["workloads"] if w["kind"] == "Pod")
    assert placed == list(enumerate(NODES))
    verdicts = {p["index"]: (p["verdict"], p.get("exitCode")) for p in results["participants"]}
    assert verdicts == {0: ("Pass", 0), 1: ("Fail", 4)}
    assert "ECC errors" in results["participants"][1]["stderr"]["tail"]
    # The script ran on each participant's own real node, as the runner user.
    assert [p["measurements"] for p in results["participants"]] == [
        {"node": node, "uid": keys.RUNNER_UID} for node in NODES
    ]
    assert document["cleanup"]["state"] == "Complete"
    assert await leftovers(world) == []
    starts = clock.start_seconds()
    assert len(starts) == 2, (clock.seen, clock.started)
    FIGURES["pod_start_max"] = max(starts)
    FIGURES["pod_check_wall"] = wall
    print(f"\nPod check on real nodes: {wall:.1f}s; Pod created -> container started {sorted(starts)}")


def assert_over_ssh(via: str) -> None:
    """A rank's ancestry (innermost first): orted under an sshd session, under the worker's
    sshd (the container's first process)."""
    chain = via.split()
    assert "orted" in chain, via
    assert chain[-1] == "sshd", via
    assert "sshd" in chain[chain.index("orted") + 1 : -1], via


def job_name(world: RealWorld, check_index: int, participant: int | None = None) -> str:
    """The name adapter.workloads gives the check's MPIJob (perNode: ``participant``'s)."""
    inputs = Inputs(world.namespace, "", world.run["metadata"]["uid"], (), "", check_index, None)  # type: ignore[arg-type]
    return mpijob_name(inputs, participant)


async def test_crossnode_mpijob_over_ssh_passes_and_a_failing_rank_fails_its_node(
    real: RealCluster, world: RealWorld
) -> None:
    cross = {"scope": "crossNode", "slotsPerWorker": 2}
    checks = [
        check("world", "ranks.sh", backend="MPIJob", deadline="90s", gpuCount=2, mpi=cross),
        check("world-fail", "fail.sh", backend="MPIJob", deadline="90s", gpuCount=2, mpi=cross),
    ]
    # Ranks 0 and 1 run on worker-0, 2 and 3 on worker-1 (hostfile order, 2 slots each).
    scripts = {"ranks.sh": ranks(), "fail.sh": ranks("*-worker-1", 3)}
    await world.setup_real(NODES, scripts, checks)
    began = time.monotonic()
    outcome = await world.adapter(0)
    FIGURES["mpi_crossnode_check_wall"] = time.monotonic() - began
    print(f"\ncrossNode MPIJob check (2 nodes x 2 ranks) on real nodes: {FIGURES['mpi_crossnode_check_wall']:.1f}s")
    document = await evidence(world, outcome)
    await assert_stopped(real, world, [job_name(world, 0)])
    results = document["results"]
    assert outcome.verdict == "Pass", json.dumps(results, indent=1)[:4000] + real.logs()
    job = job_name(world, 0)
    report = LauncherReport.model_validate(results["launcher"]["launcher"])
    assert report.world_size == 4
    assert sorted({r.host for r in report.ranks}) == [f"{job}-worker-0", f"{job}-worker-1"]
    roles = {(w["role"], w["name"]): w.get("nodeName") for w in results["workloads"] if w["kind"] == "Pod"}
    workers = {name: node for (role, name), node in roles.items() if role == "worker"}
    launchers = [node for (role, _), node in roles.items() if role == "launcher"]
    # The launcher on the real node that is not under test; one worker on each participant's node.
    assert launchers == [SPARE]
    assert SPARE not in [p["nodeName"] for p in world.run["spec"]["participants"]]
    assert sorted(workers.values()) == list(NODES)
    # Rank 0 ran on worker-0 as the runner user, started over an ssh session.
    measured = results["launcher"]["measurements"]
    assert (measured["world"], measured["uid"]) == (4, keys.RUNNER_UID)
    assert_over_ssh(measured["via"])
    print(f"rank 0 saw SIGNAL_POD_NAME={measured['pod']!r} SIGNAL_NODE_NAME={measured['node']!r} via {measured['via']}")
    # The ssh session has none of the container's environment: the worker recorded it for its ranks.
    assert (measured["pod"], measured["node"]) == (f"{job}-worker-0", workers[f"{job}-worker-0"])
    assert document["cleanup"]["state"] == "Complete"
    assert await leftovers(world) == []

    second = await world.adapter(1)
    document = await evidence(world, second)
    await assert_stopped(real, world, [job_name(world, 1)])
    results = document["results"]
    assert second.verdict == "Fail", json.dumps(results["participants"], indent=1)
    failing = next(w for w in results["workloads"] if w["name"] == f"{job_name(world, 1)}-worker-1")
    verdicts = {p["index"]: p["verdict"] for p in results["participants"]}
    # The failed rank ran on worker-1: its real node is the participant that fails.
    assert verdicts[NODES.index(failing["nodeName"])] == "Fail"
    assert failing["participantIndex"] == NODES.index(failing["nodeName"])
    assert sorted(verdicts.values()) == ["Fail", "Inconclusive"]
    assert await leftovers(world) == []


async def _forge_mirror_launchers(
    world: RealWorld, kubeconfig: Path, job: str, script: str, stop: asyncio.Event
) -> set[str]:
    """What a compromised Node not under test does with its own kubelet credential, again and
    again (its honest kubelet would delete an orphaned mirror Pod): a mirror Pod with the
    check's launcher labels and a complete launcher report in which every rank exited 0. The
    uids of the forgeries made."""
    made: set[str] = set()
    jobs = resource_path(*MPIJOBS, world.namespace, job)

    async def launcher_template() -> Obj | None:
        try:
            found = await world.admin.get(jobs)
        except ApiError as error:
            if error.status != 404:
                raise
            return None
        template: Obj = found["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
        return template

    template = await eventually(launcher_template, timeout=60, what="the check's MPIJob")
    image = template["spec"]["containers"][0]["image"]
    node = SPARE
    hosts = [f"{job}-worker-0", f"{job}-worker-1"]
    ranks = [RankResult(rank=r, host=hosts[r // 2], exit_code=0) for r in range(4)]
    report = LauncherReport.build(hosts, ranks, world_size=4, mpirun_exit_code=0)
    kubelet = await Kube.connect(kubeconfig=str(kubeconfig), field_manager="forger")
    pods = resource_path("v1", "pods", world.namespace)
    name = f"{job}-launcher-{node}"
    try:
        owner = (await kubelet.get(resource_path("v1", "nodes", name=node)))["metadata"]
        while not stop.is_set():
            body = {
                "metadata": {
                    "name": name,
                    "labels": dict(template["metadata"]["labels"]) | {MPI_JOB_LABEL: job},
                    "annotations": {MIRROR_ANNOTATION: "forged"},
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": owner["uid"], "controller": True}
                    ],
                },
                # Pod Security "restricted" holds for a kubelet's mirror Pods too.
                "spec": {
                    "nodeName": node,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": "runner",
                            "image": image,
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                                "runAsUser": keys.RUNNER_UID,
                            },
                        }
                    ],
                },
            }
            with contextlib.suppress(KubeAlreadyExists, KubeNotFound):
                pod = await kubelet.create(pods, body)
                made.add(pod["metadata"]["uid"])
                result = make_result(
                    index=None,
                    role="launcher",
                    node=node,
                    pod_name=name,
                    pod_uid=pod["metadata"]["uid"],
                    launcher=report,
                    script_digest=sha256_digest(script.encode()),
                )
                terminated = {"exitCode": 0, "reason": "Completed", "message": render_result(result).decode()}
                status = {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {
                            "name": "runner",
                            "image": image,
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": terminated},
                        }
                    ],
                }
                await kubelet.merge_patch(f"{pods}/{name}/status", {"status": status})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        with contextlib.suppress(KubeNotFound):
            await kubelet.delete(f"{pods}/{name}")
    finally:
        await kubelet.close()
    return made


async def test_a_kubelets_mirror_launcher_is_ignored_and_the_real_launchers_verdict_stands(
    real: RealCluster, world: RealWorld
) -> None:
    """Issue 42 H-B on real nodes: while a crossNode MPIJob check runs, the Node not under test
    forges mirror launchers with its own kubelet's client certificate (every rank exited 0).
    The verdict is the real launcher's: its rank 3 failed on worker-1."""
    cross = {"scope": "crossNode", "slotsPerWorker": 2}
    script = ranks("*-worker-1", 3)
    await world.setup_real(
        NODES,
        {"fail.sh": script},
        [check("world-fail", "fail.sh", backend="MPIJob", deadline="90s", gpuCount=2, mpi=cross)],
    )
    job = job_name(world, 0)
    spare = next(n for n in real.nodes if n.name == SPARE)
    stop = asyncio.Event()
    forger = asyncio.create_task(
        _forge_mirror_launchers(world, spare.directory / "kubelet" / "kubeconfig", job, script, stop)
    )
    try:
        outcome = await world.adapter(0)
    finally:
        stop.set()
        forged = await forger
    document = await evidence(world, outcome)
    results = document["results"]
    assert forged, "no mirror launcher was forged"
    assert outcome.verdict == "Fail", json.dumps(results["participants"], indent=1)
    failing = next(w for w in results["workloads"] if w["name"] == f"{job}-worker-1")
    verdicts = {p["index"]: p["verdict"] for p in results["participants"]}
    assert verdicts[NODES.index(failing["nodeName"])] == "Fail"
    assert sorted(verdicts.values()) == ["Fail", "Inconclusive"]
    (launcher,) = [w for w in results["workloads"] if w["role"] == "launcher"]
    assert launcher["uid"] not in forged
    assert [link["kind"] for link in launcher["owners"]] == ["Job", "MPIJob", keys.RUN_KIND]
    assert all(w["uid"] not in forged for w in results["workloads"])
    assert await leftovers(world) == []


async def test_pernode_mpijob_runs_a_local_world_on_each_real_node(real: RealCluster, world: RealWorld) -> None:
    local = {"scope": "perNode", "slotsPerWorker": 2}
    checks = [
        check("local", "ranks.sh", backend="MPIJob", deadline="90s", gpuCount=2, mpi=local),
        check("local-fail", "fail.sh", backend="MPIJob", deadline="90s", gpuCount=2, mpi=local),
    ]
    scripts = {
        "ranks.sh": ranks(),
        "fail.sh": ranks("*-c1-p1-worker-*", 1),
    }
    await world.setup_real(NODES, scripts, checks)
    began = time.monotonic()
    outcome = await world.adapter(0)
    FIGURES["mpi_pernode_check_wall"] = time.monotonic() - began
    print(f"\nperNode MPIJob check (2 local worlds of 2 ranks) on real nodes: {FIGURES['mpi_pernode_check_wall']:.1f}s")
    document = await evidence(world, outcome)
    await assert_stopped(real, world, [job_name(world, 0, 0), job_name(world, 0, 1)])
    results = document["results"]
    assert outcome.verdict == "Pass", json.dumps(results, indent=1)[:4000] + real.logs()
    for role in ("launcher", "worker"):
        placed = {w["participantIndex"]: w["nodeName"] for w in results["workloads"] if w.get("role") == role}
        assert placed == dict(enumerate(NODES)), f"{role}s on their participant's own node"
    for participant in results["participants"]:
        assert participant["reason"] == "Succeeded: rank(s) 0, 1 exited 0"
        assert participant["measurements"]["world"] == 2
        assert participant["measurements"]["uid"] == keys.RUNNER_UID
        assert_over_ssh(participant["measurements"]["via"])
    assert await leftovers(world) == []

    second = await world.adapter(1)
    document = await evidence(world, second)
    await assert_stopped(real, world, [job_name(world, 1, 0), job_name(world, 1, 1)])
    verdicts = {p["index"]: (p["verdict"], p["reason"]) for p in document["results"]["participants"]}
    expected = {0: ("Pass", "Succeeded: rank(s) 0, 1 exited 0"), 1: ("Fail", "Failed: rank 1 exited 4")}
    assert verdicts == expected, json.dumps(document["results"]["participants"], indent=1)
    assert await leftovers(world) == []


async def test_sigterm_mid_pod_check_persists_evidence_then_stops_every_container(
    real: RealCluster, world: RealWorld
) -> None:
    await world.setup_real(NODES, {"slow.sh": SLOW}, [check("slow", "slow.sh", deadline="5m")])
    run_name = world.run["metadata"]["name"]
    async with PodClock(world) as clock:
        process, _ = await world.spawn(0)
        running = await containers_of(real, world, run_name, 2)
        assert sorted(c.node for c in running) == list(NODES)
        process.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(process.communicate(), 180)
        await assert_stopped(real, world, [run_name])
    assert process.returncode == INTERRUPTED, out.decode(errors="replace")
    assert await leftovers(world) == []
    name = f"{run_name}-c0-evidence"
    document, _ = decode_document(await world.config_map(name), CHECK_EVIDENCE_SCHEMA)
    assert (document["verdict"], document["cleanup"]["state"]) == ("Inconclusive", "Complete")
    assert document["reason"].startswith("Interrupted:")
    results_cm = await world.config_map(document["resultsConfigMap"])
    results, _ = decode_document(results_cm, RESULTS_SCHEMA)
    assert sorted(w["nodeName"] for w in results["workloads"]) == list(NODES)
    # Evidence first, by the API server's own order: the results before the first deletion.
    assert clock.deleted_versions, "no Pod deletion was observed"
    assert int(results_cm["metadata"]["resourceVersion"]) < min(clock.deleted_versions)


async def test_sigterm_mid_mpijob_check_removes_and_stops_the_whole_tree(real: RealCluster, world: RealWorld) -> None:
    checks = [check("mpi", "slow.sh", backend="MPIJob", deadline="5m", gpuCount=1, mpi={"scope": "perNode"})]
    await world.setup_real(NODES, {"slow.sh": SLOW}, checks)
    prefixes = [job_name(world, 0, 0), job_name(world, 0, 1)]
    process, _ = await world.spawn(0)
    # Launchers and workers of both local worlds run (the launchers' ranks sleep on the workers).
    for prefix in prefixes:
        await containers_of(real, world, prefix, 2)
    process.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(process.communicate(), 180)
    await assert_stopped(real, world, prefixes)
    assert process.returncode == INTERRUPTED, out.decode(errors="replace")
    assert await leftovers(world) == []
    document, _ = decode_document(
        await world.config_map(f"{world.run['metadata']['name']}-c0-evidence"), CHECK_EVIDENCE_SCHEMA
    )
    assert (document["verdict"], document["cleanup"]["state"]) == ("Inconclusive", "Complete"), document["cleanup"]
    deleted = sorted((w["kind"], w["role"]) for w in document["cleanup"]["deleted"])
    assert deleted.count(("MPIJob", "mpijob")) == 2
    assert deleted.count(("Pod", "worker")) == 2


async def test_a_killed_adapters_workers_run_until_the_exit_handler_removes_them(
    real: RealCluster, world: RealWorld
) -> None:
    checks = [check("mpi", "slow.sh", backend="MPIJob", deadline="5m", gpuCount=1, mpi={"scope": "crossNode"})]
    await world.setup_real(NODES, {"slow.sh": SLOW}, checks)
    job = job_name(world, 0)
    process, _ = await world.spawn(0)
    await containers_of(real, world, f"{job}-worker-", 2)
    process.kill()
    await asyncio.wait_for(process.communicate(), 60)
    # Nothing removed them: the workers still run on both nodes, bounded by their own deadline.
    workers = [c for c in await running_containers(real, world.namespace, f"{job}-worker-") if c.container]
    assert sorted(c.node for c in workers) == list(NODES)
    for pod in await world.pods(
        f"{keys.RUN_UID_LABEL}={world.run['metadata']['uid']},training.kubeflow.org/job-role=worker"
    ):
        assert pod["spec"]["activeDeadlineSeconds"] > 300
    # The Workflow's exit handler: the adapter's sweep takes the evidence, then removes them.
    parameters = world.parameters(0)
    sweep = [
        *parameters[: parameters.index("--check-index")],
        "--sweep-checks-json",
        json.dumps(world.run["spec"]["checks"]),
    ]
    swept = await world.adapter(0, args=sweep)
    assert swept.code == 0, swept.log
    await assert_stopped(real, world, [job])
    assert await leftovers(world) == []
    document, _ = decode_document(
        await world.config_map(f"{world.run['metadata']['name']}-c0-evidence"), CHECK_EVIDENCE_SCHEMA
    )
    assert (document["verdict"], document["cleanup"]["state"]) == ("Inconclusive", "Complete")
    assert sorted(w["nodeName"] for w in document["cleanup"]["deleted"] if w.get("role") == "worker") == list(NODES)


def adapter_pod(world: RealWorld, participant: int) -> Obj:
    """The adapter's Pod for the Run's check 0 and ``participant`` (adapter.workloads)."""
    spec = world.run["spec"]
    inputs = parse_inputs(
        run_namespace=world.namespace,
        run_name=world.run["metadata"]["name"],
        run_uid=world.run["metadata"]["uid"],
        participants_json=json.dumps(spec["participants"]),
        snapshot=spec["source"]["snapshotConfigMap"],
        check_index="0",
        check_json=json.dumps(spec["checks"][0]),
    )
    return backend_pod(inputs, participant, world.nodes[participant], DEFAULT_RUNNER_IMAGE)


async def pod_phase(world: RealWorld, name: str, wanted: set[str]) -> Obj:
    path = resource_path("v1", "pods", world.namespace, name)

    async def reached() -> Obj | None:
        current: Obj = await world.admin.get(path)
        return current if current.get("status", {}).get("phase") in wanted else None

    found: Obj = await eventually(reached, timeout=120, what=f"Pod {name} in {wanted}")
    return found


async def test_a_kueue_gated_pod_is_accepted_and_runs_on_its_real_node_once_admitted(
    real: RealCluster, world: RealWorld
) -> None:
    await world.setup_real(NODES, {"a.sh": POD_SCRIPT}, [check("inv", "a.sh", workload={"kueueQueueName": "gpu"})])
    body: dict[str, Any] = adapter_pod(world, 0)
    assert "nodeName" not in body["spec"]
    gated = {**body, "spec": {**body["spec"], "schedulingGates": [GATE]}}
    pods = resource_path("v1", "pods", world.namespace)
    created = await real.admin.create(pods, gated)  # Pod Security restricted admits it too
    name = created["metadata"]["name"]
    assert created["spec"]["schedulingGates"] == [GATE]
    current = await real.admin.get(f"{pods}/{name}")
    assert not current["spec"].get("nodeName")
    assert await running_containers(real, world.namespace, name) == []
    await real.admin.merge_patch(f"{pods}/{name}", {"spec": {"schedulingGates": None}})
    done = await pod_phase(world, name, {"Succeeded", "Failed"})
    assert (done["spec"]["nodeName"], done["status"]["phase"]) == (NODES[0], "Succeeded"), done["status"]


async def test_a_gpu_tainted_real_node_runs_a_tolerating_check_and_is_reported_otherwise(
    real: RealCluster, world: RealWorld
) -> None:
    node_path = resource_path("v1", "nodes", name=NODES[1])
    original = (await real.admin.get(node_path))["spec"].get("taints") or []
    await real.admin.merge_patch(node_path, {"spec": {"taints": [*original, GPU_TAINT]}})
    try:
        tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        workload = {"kueueQueueName": "gpu", "tolerations": tolerations}  # placed by kube-scheduler
        await world.setup_real(
            NODES[1:], {"a.sh": POD_SCRIPT.replace('"1"', '"none"')}, [check("inv", "a.sh", workload=workload)]
        )
        outcome = await world.adapter(0)
        document = await evidence(world, outcome)
        assert outcome.verdict == "Pass", json.dumps(document["results"]["participants"], indent=1)
        assert [w["nodeName"] for w in document["results"]["workloads"]] == [NODES[1]]
        await assert_stopped(real, world, [world.run["metadata"]["name"]])
        # Eligibility over the real Node as the API server has it (requested for the suite):
        # a suite that does not tolerate the taint is told which taint; one that does is not.
        await real.admin.merge_patch(node_path, {"metadata": {"labels": REQUESTED}})
        node = node_view(await real.admin.get(node_path))
        base = profile_body("gpu-suite", real.namespace, 1)
        reason = ineligibility(node, CertificationProfile.model_validate(base), {}, set())
        assert reason is not None
        assert "taint not tolerated: nvidia.com/gpu=present:NoSchedule" in reason, reason
        for entry in base["spec"]["checks"]:
            entry.setdefault("workload", {})["tolerations"] = tolerations
        assert ineligibility(node, CertificationProfile.model_validate(base), {}, set()) is None
    finally:
        unlabel = {"metadata": {"labels": dict.fromkeys(REQUESTED)}}
        await real.admin.merge_patch(node_path, {"spec": {"taints": original or None}, **unlabel})


async def test_the_namespace_enforces_pod_security_restricted(real: RealCluster) -> None:
    """Control: the namespace really enforces Pod Security restricted (a root Pod is refused)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root"},
        "spec": {"nodeName": NODES[0], "containers": [{"name": "c", "image": DEFAULT_RUNNER_IMAGE}]},
    }
    with pytest.raises(ApiError) as refused:
        await real.admin.create(resource_path("v1", "pods", real.namespace), body)
    assert refused.value.status == 403
    assert "restricted" in refused.value.message


async def test_the_controller_holds_the_real_nodes_while_a_killed_adapters_workers_run(
    real: RealCluster, world: RealWorld, tmp_path: Path
) -> None:
    """The controller admits both real Nodes (reserved and cordoned) and submits the Workflow;
    the test plays Argo's step: the adapter starts the MPIJob check and is SIGKILLed. Cancelled,
    the Run waits in WorkloadsRemain while the workers run on the nodes; the Nodes stay
    reserved. The exit handler's sweep removes them; the Run ends Canceled with
    WorkloadCleanupComplete=True, and only then does release give the Nodes back."""
    scripts = {"slow.sh": SLOW}
    signal_world = World(real.cluster, real.admin, real.namespace)
    await signal_world.setup(scripts=scripts)
    controller = ControllerProcess(real.cluster, real.namespace, tmp_path, resync=1.0, policies=False)
    profile = f"{real.namespace}-hold"
    mpi = {"name": "mpi", "scriptKey": "slow.sh", "backend": "MPIJob", "gpuCount": 1, "backendActiveDeadline": "5m"}
    mpi["mpi"] = {"scope": "crossNode"}
    labels = {keys.CERTIFY_LABEL: profile, "pool": "gpu"}
    try:
        await controller.start()
        await signal_world.add_profile(
            profile_body(profile, real.namespace, 2, digest=bundle_digest(scripts, {}), checks=[mpi])
        )
        for node in NODES:
            await real.admin.merge_patch(resource_path("v1", "nodes", name=node), {"metadata": {"labels": labels}})

        async def running() -> Obj | None:
            runs = [r for r in await signal_world.runs() if r["spec"]["profile"]["name"] == profile]
            return runs[0] if runs and runs[0].get("status", {}).get("phase") == "Running" else None

        run = await eventually(running, timeout=120, what=f"a Running Run\n{controller.logs()}")
        uid = run["metadata"]["uid"]
        assert sorted(p["nodeName"] for p in run["spec"]["participants"]) == list(NODES)
        world.run, world.nodes = run, [p["nodeName"] for p in run["spec"]["participants"]]
        job = job_name(world, 0)
        process, _ = await world.spawn(0)
        await containers_of(real, world, f"{job}-worker-", 2)
        process.kill()
        await asyncio.wait_for(process.communicate(), 60)

        run_path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, real.namespace, run["metadata"]["name"])
        await real.admin.merge_patch(run_path, {"spec": {"cancel": True}})

        async def cleanup(status: str) -> Obj | None:
            current: Obj = await real.admin.get(run_path)
            cond = {c["type"]: c for c in current.get("status", {}).get("conditions", [])}
            found = cond.get("WorkloadCleanupComplete")
            return current if found and found["status"] == status else None

        waiting = await eventually(lambda: cleanup("False"), timeout=60, what=f"WorkloadsRemain\n{controller.logs()}")
        assert waiting["status"]["phase"] == "Running"
        workers = [c for c in await running_containers(real, world.namespace, f"{job}-worker-") if c.container]
        assert sorted(c.node for c in workers) == list(NODES), "the killed adapter's workers still run"
        for obj in await signal_world.nodes(NODES):
            assert reserved_by(obj) == uid, "no Node is released while a workload of the Run exists"

        parameters = world.parameters(0)
        sweep = [*parameters[: parameters.index("--check-index")], "--sweep-checks-json", json.dumps([mpi])]
        swept = await world.adapter(0, args=sweep)
        assert swept.code == 0, swept.log
        await assert_stopped(real, world, [job])
        done = await eventually(lambda: cleanup("True"), timeout=60, what=f"cleanup complete\n{controller.logs()}")
        assert done["status"]["phase"] == "Canceled", done["status"]
        for obj in await signal_world.nodes(NODES):
            assert reserved_by(obj) == uid, "Canceled keeps the group reserved until release"
        await real.admin.merge_patch(run_path, {"spec": {"release": True}})

        async def released() -> list[Obj] | None:
            nodes: list[Obj] = await signal_world.nodes(NODES)
            return nodes if all(reserved_by(n) is None for n in nodes) else None

        for obj in await eventually(released, timeout=60, what=f"the Nodes released\n{controller.logs()}"):
            assert not [t for t in obj["spec"].get("taints") or [] if t["key"] == keys.RESERVED_TAINT_KEY]
            assert not obj["spec"].get("unschedulable")
    finally:
        controller.stop()
        unlabel = {"metadata": {"labels": dict.fromkeys(labels)}}
        for node in NODES:
            await real.admin.merge_patch(resource_path("v1", "nodes", name=node), unlabel)
        await signal_world.cleanup()
