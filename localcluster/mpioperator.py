"""A simulated Kubeflow MPI operator (v0.8, ``kubeflow.org/v2beta1`` MPIJobs) for the
local cluster: the real controller cannot be built here, so this produces its object
graph (see ``localcluster.mpigraph``) and lets the real control plane do the rest: the
kube-scheduler binds the worker Pods (honouring the template's affinity and
tolerations), the job-controller runs the launcher Job, the garbage collector deletes
everything when the MPIJob goes, and the process kubelet runs the Pods.

Honoured MPIJob fields: ``mpiReplicaSpecs.{Launcher,Worker}.template`` and
``.restartPolicy`` (``OnFailure`` or ``Never``), ``Worker.replicas``, ``slotsPerWorker``,
``sshAuthMountPath``, ``launcherCreationPolicy`` (``AtStartup``; ``WaitForWorkersReady``
creates the launcher once every worker Pod is Running), ``runPolicy.backoffLimit``
(default 0 here), ``runPolicy.activeDeadlineSeconds`` and ``ttlSecondsAfterFinished``
(passed to the launcher Job) and ``runPolicy.cleanPodPolicy`` (applied to workers only
when the MPIJob finishes: ``Running`` deletes Pending and Running workers, ``All`` every
worker, ``None``, the code default, nothing).

Status: conditions Created, Running, Succeeded and Failed with the operator's reasons
(``MPIJobCreated``, ``MPIJobRunning``, ``MPIJobSucceeded``, the launcher Job's failure
reason or ``MPIJobFailed``), ``replicaStatuses`` for Launcher and Worker, ``startTime``
and ``completionTime``, written through the status subresource.

Deviations from the real operator: deleted worker Pods are never recreated (the graph is
created once per MPIJob; after a restart, an MPIJob whose status already says Created
gets no new workers); worker failures do not fail the MPIJob (only the launcher decides);
``suspend``, ``runLauncherAsWorker``, gang scheduling and the Intel and MPICH
implementations are not simulated. Creation is idempotent (create if missing).
"""

import asyncio
import contextlib
import copy
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from localcluster import mpigraph as g
from localcluster.kube import ApiError, KubeClient, Obj, resource_path

log = structlog.get_logger("mpi-operator-sim")
MPIJOBS = ("kubeflow.org/v2beta1", "mpijobs")
Key = tuple[str, str]
FAKE_KEYS = (
    b"-----BEGIN FAKE SIMULATED KEY-----\nnot a key\n-----END FAKE SIMULATED KEY-----\n",
    b"fake-key simulated\n",
)


def generate_keypair() -> tuple[bytes, bytes]:
    """An ECDSA key pair from ssh-keygen, or a clearly fake one where it is missing
    (nothing in the simulation uses the keys: the rsh agent stands in for ssh)."""
    with tempfile.TemporaryDirectory(prefix="signal-mpi-ssh-") as tmp:
        key = Path(tmp) / "key"
        try:
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-N", "", "-C", "", "-f", str(key)],
                check=True,
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            return FAKE_KEYS
        return key.read_bytes(), key.with_suffix(".pub").read_bytes()


@dataclass
class MPIOperator:
    """Reconciles every MPIJob in every namespace; ``start`` then ``stop``."""

    kube: KubeClient
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _queue: asyncio.Queue[Key] = field(default_factory=asyncio.Queue)
    _queued: set[Key] = field(default_factory=set)
    _workers_created: set[str] = field(default_factory=set)

    async def start(self) -> None:
        selector = {"labelSelector": f"{g.OPERATOR_NAME_LABEL}={g.OPERATOR_NAME}"}
        watches: list[tuple[str, dict[str, str], Callable[[Obj], str | None]]] = [
            (resource_path(*MPIJOBS), {}, lambda o: o["metadata"]["name"]),
            (resource_path("v1", "pods"), selector, _job_label),
            (resource_path("batch/v1", "jobs"), selector, _job_label),
        ]
        for path, params, name_of in watches:
            self._tasks.append(asyncio.create_task(self._watch(path, params, name_of), name=f"mpi-operator {path}"))
        self._tasks.append(asyncio.create_task(self._work(), name="mpi-operator-worker"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    def _enqueue(self, key: Key) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    async def _watch(self, path: str, params: dict[str, str], name_of: Callable[[Obj], str | None]) -> None:
        def note(obj: Obj) -> None:
            name = name_of(obj)
            if name:
                self._enqueue((obj["metadata"]["namespace"], name))

        while True:
            try:
                listing = await self.kube.get(path, **params)
                for item in listing.get("items", []):
                    note(item)
                version = listing["metadata"]["resourceVersion"]
                while True:
                    async for event in self.kube.watch(path, resourceVersion=version, **params):
                        if event["type"] == "ERROR":
                            raise ApiError(event["object"].get("code", 500), "", str(event["object"]), "WATCH", path)
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            note(event["object"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("watch failed; re-listing", path=path, error=str(exc))
                await asyncio.sleep(0.5)

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            try:
                await self.reconcile(*key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("reconcile failed; retrying", mpijob="/".join(key), error=str(exc))
                asyncio.get_running_loop().call_later(1.0, self._enqueue, key)

    # -- reconcile -----------------------------------------------------------------------

    async def _get(self, path: str) -> Obj | None:
        try:
            return await self.kube.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def _create(self, path: str, body: Obj) -> Obj | None:
        try:
            return await self.kube.create(path, body)
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise

    async def reconcile(self, namespace: str, name: str) -> None:
        job = await self._get(resource_path(*MPIJOBS, namespace, name))
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        uid = job["metadata"]["uid"]
        status: Obj = copy.deepcopy(job.get("status") or {})
        status.setdefault("startTime", g.now())
        pods = await self.kube.get(resource_path("v1", "pods", namespace), labelSelector=f"{g.JOB_NAME_LABEL}={name}")
        workers = {
            int(p["metadata"]["labels"].get(g.REPLICA_INDEX_LABEL, -1)): p
            for p in pods.get("items", [])
            if p["metadata"]["labels"].get(g.JOB_ROLE_LABEL) == "worker"
            and any(ref.get("uid") == uid for ref in p["metadata"].get("ownerReferences", []))
        }
        launcher_pods = [
            p for p in pods.get("items", []) if p["metadata"]["labels"].get(g.JOB_ROLE_LABEL) == "launcher"
        ]
        if g.finished(status) is None:
            await self._ensure_graph(job, status, workers)
        running = {i for i, p in workers.items() if _phase(p) == "Running" and "deletionTimestamp" not in p["metadata"]}
        launcher = await self._get(resource_path("batch/v1", "jobs", namespace, g.launcher_name(job)))
        if g.finished(status) is None:
            await self._sync_discover_hosts(job, running)
            wait = job["spec"].get("launcherCreationPolicy") == "WaitForWorkersReady"
            if launcher is None and (not wait or len(running) == g.worker_replicas(job)):
                launcher = await self._create(resource_path("batch/v1", "jobs", namespace), g.launcher_job(job))
            self._update_conditions(job, status, launcher, launcher_pods, running)
        status["replicaStatuses"] = _replica_statuses(launcher, list(workers.values()))
        if g.finished(status) is not None:
            status.setdefault("completionTime", g.now())
            await self._clean_workers(job, list(workers.values()))
        if status != job.get("status"):
            patch = {"metadata": {"uid": uid}, "status": status}
            await self.kube.merge_patch(resource_path(*MPIJOBS, namespace, name, "status"), patch)

    async def _ensure_graph(self, job: Obj, status: Obj, workers: dict[int, Obj]) -> None:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        if await self._get(resource_path("v1", "services", namespace, name)) is None:
            await self._create(resource_path("v1", "services", namespace), g.service(job))
        if await self._get(resource_path("v1", "configmaps", namespace, f"{name}-config")) is None:
            await self._create(resource_path("v1", "configmaps", namespace), g.config_map(job, set()))
        if await self._get(resource_path("v1", "secrets", namespace, f"{name}-ssh")) is None:
            keys = await asyncio.to_thread(generate_keypair)
            await self._create(resource_path("v1", "secrets", namespace), g.ssh_secret(job, *keys))
        created = g.condition(status, "Created")
        if job["metadata"]["uid"] in self._workers_created or (created and created["status"] == "True"):
            return
        for index in range(g.worker_replicas(job)):
            if index not in workers:
                await self._create(resource_path("v1", "pods", namespace), g.worker_pod(job, index))
        self._workers_created.add(job["metadata"]["uid"])
        g.set_condition(status, "Created", True, "MPIJobCreated", f"MPIJob {namespace}/{name} is created.")

    async def _sync_discover_hosts(self, job: Obj, running: set[int]) -> None:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        path = resource_path("v1", "configmaps", namespace, f"{name}-config")
        current = await self._get(path)
        wanted = g.discover_hosts(job, running)
        if current is not None and current.get("data", {}).get("discover_hosts.sh") != wanted:
            await self.kube.merge_patch(path, {"data": {"discover_hosts.sh": wanted}})

    def _update_conditions(
        self, job: Obj, status: Obj, launcher: Obj | None, launcher_pods: list[Obj], running: set[int]
    ) -> None:
        ref = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        launcher_status: Obj = (launcher or {}).get("status", {})
        complete, failed = g.condition(launcher_status, "Complete"), g.condition(launcher_status, "Failed")
        if complete is not None and complete["status"] == "True":
            g.set_condition(status, "Succeeded", True, "MPIJobSucceeded", f"MPIJob {ref} successfully completed.")
        elif failed is not None and failed["status"] == "True":
            reason = failed.get("reason") or "MPIJobFailed"
            g.set_condition(status, "Failed", True, reason, failed.get("message") or f"MPIJob {ref} has failed")
        elif any(_phase(p) == "Running" for p in launcher_pods) and len(running) == g.worker_replicas(job):
            g.set_condition(status, "Running", True, "MPIJobRunning", f"MPIJob {ref} is running.")

    async def _clean_workers(self, job: Obj, workers: list[Obj]) -> None:
        policy = g.clean_pod_policy(job)
        if policy not in {"Running", "All"}:
            return
        for pod in workers:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if policy == "Running" and _phase(pod) not in {"Running", "Pending"}:
                continue
            meta = pod["metadata"]
            path = resource_path("v1", "pods", meta["namespace"], meta["name"])
            with contextlib.suppress(ApiError):
                await self.kube.delete(path, {"preconditions": {"uid": meta["uid"]}})


def _job_label(obj: Obj) -> str | None:
    name = obj["metadata"].get("labels", {}).get(g.JOB_NAME_LABEL)
    return str(name) if name else None


def _phase(pod: Obj) -> str:
    return str(pod.get("status", {}).get("phase") or "Pending")


def _replica_statuses(launcher: Obj | None, workers: list[Obj]) -> Obj:
    launcher_status: Obj = (launcher or {}).get("status", {})
    phases = [_phase(p) for p in workers]
    return {
        "Launcher": {k: int(launcher_status.get(k) or 0) for k in ("active", "succeeded", "failed")},
        "Worker": {
            "active": phases.count("Running"),
            "succeeded": phases.count("Succeeded"),
            "failed": phases.count("Failed"),
        },
    }
