"""The real Kubeflow MPI operator v0.8.0 (built from its source tree) against a local API
server of its own, as its own ServiceAccount with its RBAC: an MPIJob gets its launcher Job,
its worker Pods with the SSH key mounted where the job asks, its headless Service and its
hostfile ConfigMap, all owned by the MPIJob. (Its own control plane: the session cluster runs
the simulated operator, and two operators must not act on the same MPIJobs.)"""

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from localcluster import identities
from localcluster.binaries import mpi_operator_src
from localcluster.controlplane import ControlPlane
from localcluster.crds import install_crds
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.kubeflowmpi import KubeflowMPIOperator
from shared import keys

MPI_API = "kubeflow.org/v2beta1"


@dataclass
class Stack:
    plane: ControlPlane
    admin: KubeClient
    operator: KubeflowMPIOperator


@pytest.fixture(scope="module")
async def stack() -> AsyncIterator[Stack]:
    plane = ControlPlane(with_scheduler=False)
    await asyncio.to_thread(plane.start_api)
    admin = identities.admin(plane).client()
    operator = KubeflowMPIOperator(plane, admin)
    try:
        await install_crds(admin, [mpi_operator_src() / "manifests" / "base" / "kubeflow.org_mpijobs.yaml"])
        # ServiceAccounts (every namespace's "default", which Pod admission requires), Jobs, GC.
        await asyncio.to_thread(plane.start_controllers)
        await operator.start()
        yield Stack(plane, admin, operator)
    finally:
        await operator.stop()
        await admin.close()
        await asyncio.to_thread(plane.stop)


async def eventually(
    probe: Callable[[], Awaitable[Obj | None]], what: str, logs: Callable[[], str], timeout: float = 60.0
) -> Obj:
    """The probe's first non-None answer within the deadline (else the operator's log)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            found = await probe()
        except ApiError as exc:
            if exc.status != 404:
                raise
            found = None
        if found is not None:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not there after {timeout}s; mpi-operator log:\n{logs()}")
        await asyncio.sleep(0.2)


def container(name: str, args: list[str]) -> Obj:
    return {"name": name, "image": "projectsignal.dev/runner:0.1.0", "args": args}


def mpijob(name: str, namespace: str, workers: int) -> Obj:
    return {
        "apiVersion": MPI_API,
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "slotsPerWorker": 1,
            "sshAuthMountPath": keys.RUNNER_SSH_DIR,
            "mpiImplementation": "OpenMPI",
            "runPolicy": {"cleanPodPolicy": "None"},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [container("launcher", ["launcher"])]}},
                },
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [container("worker", ["worker"])]}},
                },
            },
        },
    }


async def test_the_real_operator_creates_launcher_workers_service_and_hostfile(stack: Stack) -> None:
    admin = stack.admin
    namespace = f"mpi-{uuid.uuid4().hex[:8]}"
    await admin.create(resource_path("v1", "namespaces"), {"metadata": {"name": namespace}})
    job = await admin.create(resource_path(MPI_API, "mpijobs", namespace), mpijob("pi", namespace, 2))
    uid = job["metadata"]["uid"]
    assert stack.operator.component is not None
    logs = stack.operator.component.tail

    def get(api: str, plural: str, name: str) -> Callable[[], Awaitable[Obj | None]]:
        return lambda: admin.get(resource_path(api, plural, namespace, name))

    config = await eventually(get("v1", "configmaps", "pi-config"), "hostfile ConfigMap", logs)
    hosts = [line.split() for line in config["data"]["hostfile"].splitlines() if line.strip()]
    assert hosts == [[f"pi-worker-{i}.pi.{namespace}.svc", "slots=1"] for i in range(2)]
    secret = await eventually(get("v1", "secrets", "pi-ssh"), "SSH Secret", logs)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert set(secret["data"]) == {"ssh-privatekey", "ssh-publickey"}
    service = await eventually(get("v1", "services", "pi"), "headless Service", logs)
    assert service["spec"]["clusterIP"] == "None"
    workers = [await eventually(get("v1", "pods", f"pi-worker-{i}"), f"worker {i}", logs) for i in range(2)]
    launcher = await eventually(get("batch/v1", "jobs", "pi-launcher"), "launcher Job", logs)

    for obj in (config, secret, service, launcher, *workers):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("MPIJob", uid, True), obj["metadata"]["name"]
    for pod in workers:
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["ssh-auth"] == keys.RUNNER_SSH_DIR
        items = {i["path"] for i in volumes["ssh-auth"]["secret"]["items"]}
        assert items == {"id_rsa", "id_rsa.pub", "authorized_keys"}
        assert volumes["ssh-auth"]["secret"]["secretName"] == "pi-ssh"
    launcher_spec = launcher["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in launcher_spec["containers"][0]["env"]}
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert {m["mountPath"] for m in launcher_spec["containers"][0]["volumeMounts"]} >= {
        keys.RUNNER_SSH_DIR,
        "/etc/mpi",
    }

    async def created() -> Obj | None:
        status = (await admin.get(resource_path(MPI_API, "mpijobs", namespace, "pi"))).get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        return status if conditions.get("Created") == "True" else None

    await eventually(created, "the MPIJob's Created condition", logs)
    assert stack.operator.component is not None
    assert stack.operator.component.running(), stack.operator.component.tail()
