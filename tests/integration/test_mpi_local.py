"""MPIJobs on the local cluster: the simulated MPI operator's object graph, scheduled by
the real kube-scheduler, run by the process kubelet, with a real ``mpirun`` (OpenMPI)
reaching the workers through the kubelet's rsh agent, and cleaned up by the real
job-controller and garbage collector."""

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import ApiError, KubeClient, Obj, resource_path

MPIJOBS = ("kubeflow.org/v2beta1", "mpijobs")
JOB_LABEL = "training.kubeflow.org/job-name"
ROLE_LABEL = "training.kubeflow.org/job-role"


@pytest.fixture
async def two_nodes(cluster: LocalCluster) -> list[str]:
    stem = f"mpi-{uuid.uuid4().hex[:6]}"
    names = [f"{stem}-a", f"{stem}-b"]
    await cluster.add_nodes([SimNode(n) for n in names])
    return names


def _pinned(nodes: list[str]) -> Obj:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
                ]
            }
        }
    }


def mpijob(name: str, nodes: list[str], launcher: list[str], workers: int = 2, **spec: Any) -> Obj:
    """An MPIJob whose workers land one per Node (required node affinity over ``nodes`` and
    required anti-affinity on hostname over this job's workers), and whose launcher runs
    ``launcher`` on one of the same Nodes."""
    anti_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {JOB_LABEL: name, ROLE_LABEL: "worker"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
    worker_spec = {
        "automountServiceAccountToken": False,
        "affinity": {**_pinned(nodes), "podAntiAffinity": anti_affinity},
        "containers": [{"name": "worker", "image": "mpioperator/openmpi:0.8.0", "command": ["sleep", "3600"]}],
    }
    launcher_spec = {
        "automountServiceAccountToken": False,
        "affinity": _pinned(nodes),
        "containers": [{"name": "launcher", "image": "mpioperator/openmpi:0.8.0", "command": launcher}],
    }
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": launcher_spec}},
                "Worker": {
                    "replicas": workers,
                    "template": {"metadata": {"labels": {"app": name}}, "spec": worker_spec},
                },
            },
            **spec,
        },
    }


async def wait_for(
    kube: KubeClient, path: str, predicate: Callable[[Obj | None], bool], timeout: float = 90.0, **params: str
) -> Obj | None:
    deadline = time.monotonic() + timeout
    obj: Obj | None = None
    while time.monotonic() < deadline:
        try:
            obj = await kube.get(path, **params)
        except ApiError as exc:
            if exc.status != 404:
                raise
            obj = None
        if predicate(obj):
            return obj
        await asyncio.sleep(0.2)
    raise AssertionError(f"condition not met within {timeout}s for {path}; last: {obj}")


def has_condition(kind: str, status: str = "True") -> Callable[[Obj | None], bool]:
    def check(obj: Obj | None) -> bool:
        conditions = (obj or {}).get("status", {}).get("conditions", [])
        return any(c["type"] == kind and c["status"] == status for c in conditions)

    return check


def condition(obj: Obj, kind: str) -> Obj:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def items_are(count: int, phase: str | None = None) -> Callable[[Obj | None], bool]:
    def check(listing: Obj | None) -> bool:
        items = (listing or {}).get("items", [])
        return len(items) == count and all(phase is None or i.get("status", {}).get("phase") == phase for i in items)

    return check


async def test_mpirun_reaches_two_workers_on_two_nodes_and_foreground_delete_removes_the_graph(
    admin: KubeClient, namespace: str, two_nodes: list[str], cluster: LocalCluster
) -> None:
    name = "hello"
    script = "echo rank=$OMPI_COMM_WORLD_RANK size=$OMPI_COMM_WORLD_SIZE host=$HOSTNAME"
    launcher = ["mpirun", "-np", "2", "--hostfile", "/etc/mpi/hostfile", "sh", "-c", script]
    job_path = resource_path(*MPIJOBS, namespace, name)
    await admin.create(resource_path(*MPIJOBS, namespace), mpijob(name, two_nodes, launcher))

    done = await wait_for(admin, job_path, lambda o: has_condition("Succeeded")(o) or has_condition("Failed")(o))
    assert done is not None
    pods = resource_path("v1", "pods", namespace)
    launcher_pods = await admin.get(pods, labelSelector=f"{JOB_LABEL}={name},{ROLE_LABEL}=launcher")
    assert len(launcher_pods["items"]) == 1
    launcher_pod = launcher_pods["items"][0]
    assert cluster.kubelet is not None
    log = cluster.kubelet.log_path(launcher_pod, "launcher").read_text()
    assert has_condition("Succeeded")(done), f"{done['status']}\nlauncher log:\n{log}"

    lines = sorted(line for line in log.splitlines() if line.startswith("rank="))
    assert lines == [f"rank=0 size=2 host={name}-worker-0", f"rank=1 size=2 host={name}-worker-1"], log
    workers = await admin.get(pods, labelSelector=f"{JOB_LABEL}={name},{ROLE_LABEL}=worker")
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in workers["items"]}
    assert set(placed) == {f"{name}-worker-0", f"{name}-worker-1"}
    assert sorted(placed.values()) == sorted(two_nodes), "one worker per Node, chosen by the scheduler"
    assert all(p["status"]["phase"] == "Running" for p in workers["items"]), "cleanPodPolicy None keeps workers"

    launcher_job = await admin.get(resource_path("batch/v1", "jobs", namespace, f"{name}-launcher"))
    assert has_condition("Complete")(launcher_job)
    assert launcher_job["spec"]["backoffLimit"] == 0
    assert condition(done, "Succeeded")["reason"] == "MPIJobSucceeded"
    # Like the real operator, a Running condition is only there if a sync saw the launcher
    # running (a fast launcher on a busy machine may finish in between); once done, it is False.
    running = [c for c in done["status"]["conditions"] if c["type"] == "Running"]
    assert all(c["status"] == "False" for c in running), running
    assert condition(done, "Created")["reason"] == "MPIJobCreated"
    assert done["status"]["completionTime"]
    assert done["status"]["startTime"]
    assert done["status"]["replicaStatuses"]["Launcher"]["succeeded"] == 1
    assert done["status"]["replicaStatuses"]["Worker"]["active"] == 2

    config = await admin.get(resource_path("v1", "configmaps", namespace, f"{name}-config"))
    assert config["data"]["hostfile"] == "".join(
        f"{name}-worker-{i}.{name}.{namespace}.svc slots=1\n" for i in range(2)
    )
    secret = await admin.get(resource_path("v1", "secrets", namespace, f"{name}-ssh"))
    assert secret["type"] == "kubernetes.io/ssh-auth"
    service = await admin.get(resource_path("v1", "services", namespace, name))
    assert service["spec"]["clusterIP"] == "None"
    for obj in (config, secret, service, launcher_job, *workers["items"]):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("MPIJob", done["metadata"]["uid"], True)

    await admin.delete(job_path, {"propagationPolicy": "Foreground"})
    await wait_for(admin, job_path, lambda obj: obj is None)
    selector = f"{JOB_LABEL}={name}"
    for api, plural in (("v1", "services"), ("v1", "configmaps"), ("v1", "secrets"), ("batch/v1", "jobs")):
        await wait_for(admin, resource_path(api, plural, namespace), items_are(0), timeout=30, labelSelector=selector)
    await wait_for(admin, pods, items_are(0), timeout=30, labelSelector=selector)


async def test_a_command_started_through_the_rsh_agent_dies_with_its_worker_pod(
    admin: KubeClient, namespace: str, two_nodes: list[str], cluster: LocalCluster
) -> None:
    name = "exec"
    pidfile = Path(cluster.workdir()) / f"rsh-{uuid.uuid4().hex}"
    host = f"{name}-worker-0.{name}.{namespace}.svc"
    remote = f"'echo $$ > {pidfile}; exec sleep 300'"
    launcher = ["sh", "-c", f"$OMPI_MCA_plm_rsh_agent -o ConnectionAttempts=30 {host} {remote}"]
    job_path = resource_path(*MPIJOBS, namespace, name)
    await admin.create(resource_path(*MPIJOBS, namespace), mpijob(name, two_nodes, launcher, workers=1))

    for _ in range(600):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.1)
    pid = int(pidfile.read_text())
    environ = dict(
        entry.split("=", 1) for entry in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in entry
    )
    assert environ["HOSTNAME"] == f"{name}-worker-0", "the command runs in the worker Pod's context"

    worker = resource_path("v1", "pods", namespace, f"{name}-worker-0")
    await admin.delete(worker, {"gracePeriodSeconds": 30})
    await wait_for(admin, worker, lambda obj: obj is None, timeout=30)
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"process {pid} started through the rsh agent survived its Pod")

    failed = await wait_for(admin, job_path, has_condition("Failed"))
    assert failed is not None
    assert condition(failed, "Failed")["reason"] == "BackoffLimitExceeded"
    await asyncio.sleep(1.0)
    with pytest.raises(ApiError) as gone:
        await admin.get(worker)
    assert gone.value.status == 404, "deleted workers are not recreated"


async def test_clean_pod_policy_running_deletes_running_workers_and_wait_for_workers_ready(
    admin: KubeClient, namespace: str, two_nodes: list[str]
) -> None:
    name = "tidy"
    # No retries: reaching both workers at once proves they were Running before the launcher existed.
    probe = " && ".join(f"$OMPI_MCA_plm_rsh_agent {name}-worker-{i}.{name} true" for i in range(2))
    job_path = resource_path(*MPIJOBS, namespace, name)
    body = mpijob(
        name,
        two_nodes,
        ["sh", "-c", probe],
        runPolicy={"cleanPodPolicy": "Running"},
        launcherCreationPolicy="WaitForWorkersReady",
    )
    await admin.create(resource_path(*MPIJOBS, namespace), body)

    done = await wait_for(admin, job_path, lambda o: has_condition("Succeeded")(o) or has_condition("Failed")(o))
    assert done is not None
    assert has_condition("Succeeded")(done), done["status"]
    pods = resource_path("v1", "pods", namespace)
    await wait_for(admin, pods, items_are(0), timeout=30, labelSelector=f"{JOB_LABEL}={name},{ROLE_LABEL}=worker")
    launcher_pods = await admin.get(pods, labelSelector=f"{JOB_LABEL}={name},{ROLE_LABEL}=launcher")
    assert items_are(1, "Succeeded")(launcher_pods), "cleanPodPolicy acts on workers only"
    assert (await admin.get(resource_path("v1", "services", namespace, name)))["metadata"]["name"] == name


async def test_the_rsh_agent_fails_like_ssh_for_a_host_that_is_no_pod(
    admin: KubeClient, namespace: str, two_nodes: list[str]
) -> None:
    script = (
        "$OMPI_MCA_plm_rsh_agent -o ConnectionAttempts=2 nosuch.job true 2> err; code=$?;"
        ' printf "%s %s" "$code" "$(cat err)" > /dev/termination-log'
    )
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "prober"},
        "spec": {
            "nodeName": two_nodes[0],
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}],
        },
    }
    pods = resource_path("v1", "pods", namespace)
    await admin.create(pods, body)
    done = await wait_for(admin, f"{pods}/prober", lambda o: (o or {}).get("status", {}).get("phase") == "Succeeded")
    assert done is not None
    message = done["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
    assert message.startswith("255 localcluster.rsh: nosuch.job: no running Pod"), message
    assert namespace in message, "a short host name resolves in the caller's namespace"
