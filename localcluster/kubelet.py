"""A process kubelet: runs the containers of Pods bound to simulated Nodes as local
processes and reports their status through ``pods/status`` in kubelet order
(Pending -> Running -> Succeeded/Failed, never backwards).

It enforces ``activeDeadlineSeconds`` (phase Failed, reason DeadlineExceeded), caps
termination messages at 4096 bytes, and on deletion stops the processes and completes
the delete with grace 0 and a uid precondition, as a real kubelet does. Restart policies
are not simulated: every container runs once. Init containers run first, in order.

It offers no SSH between Pods and runs no MPI: MPIJob checks run only on real nodes
(``localcluster.realnode``) with the real Kubeflow MPI operator (``localcluster.kubeflowmpi``).
The process kubelet stays for what real nodes cannot carry here: many simulated Nodes.

With ``tls_files`` it also answers the API server's kubelet connections (``pods/exec``, on
:attr:`ProcessKubelet.api_port`, for Nodes whose ``daemonEndpoints`` name that port) for one
command only, signalling a container's first process: ``<...>/argoexec kill <signal> 1`` or
``/bin/sh -c "kill -<signal> 1"``, which is how Argo's workflow-controller stops a step's
containers (Workflow shutdown, deadline). The signal is delivered and the upgrade refused
(there is no stream to attach); the caller ignores the answer, as Argo does. Any other
command is refused.
"""

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from kubeio.errors import ServerError, TooManyRequests, TransportError
from localcluster import kubeletapi
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.outages import through_outages
from localcluster.podprocess import (
    PodSpecError,
    ProcessSpec,
    materialise_volumes,
    pod_key,
    process_spec,
)
from localcluster.podstatus import now, running_statuses, terminated_status

log = structlog.get_logger("process-kubelet")
KILL_GRACE_SECONDS = 2.0
VOLUME_RETRY_SECONDS = 5.0
VOLUME_OUTAGE_SECONDS = 60.0
"""How long a mount is retried while the API server cannot answer (then the Pod fails)."""


@dataclass
class PodRun:
    """The kubelet's record of one Pod it is running."""

    pod: Obj
    task: asyncio.Task[None] | None = None
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    phase: str = "Pending"
    deleting: bool = False
    specs: dict[str, ProcessSpec] = field(default_factory=dict)


@dataclass
class ProcessKubelet:
    """Runs Pods bound to Nodes for which ``manages(node_name)`` is true."""

    kube: KubeClient
    workdir: Path
    manages: Callable[[str], bool]
    service_env: dict[str, str] = field(default_factory=dict)
    """What every container gets for in-cluster config (KUBERNETES_SERVICE_HOST and _PORT)."""
    tls_files: tuple[Path, Path] | None = None
    """Certificate and key for the kubelet API (``pods/exec`` kill only); None: no kubelet API."""
    api_port: int = 0
    runs: dict[str, PodRun] = field(default_factory=dict)
    _watcher: asyncio.Task[None] | None = None
    _background: set[asyncio.Task[None]] = field(default_factory=set)
    _api_server: asyncio.Server | None = None

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.tls_files is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*map(str, self.tls_files))
            serve = functools.partial(kubeletapi.serve, signal_container=self._signal_container)
            self._api_server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
            self.api_port = self._api_server.sockets[0].getsockname()[1]
        self._watcher = asyncio.create_task(self._watch_forever(), name="process-kubelet-watch")

    async def stop(self) -> None:
        if self._api_server:
            self._api_server.close()
        if self._watcher:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        for run in list(self.runs.values()):
            self._kill(run, signal.SIGKILL)
            if run.task:
                run.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await run.task

    # -- watching ------------------------------------------------------------------------

    async def _watch_forever(self) -> None:
        path = resource_path("v1", "pods")
        selector = {"fieldSelector": "spec.nodeName!="}
        while True:
            try:
                listing = await self.kube.get(path, **selector)
                for pod in listing.get("items", []):
                    self._observe(pod)
                version = listing["metadata"]["resourceVersion"]
                while True:
                    async for event in self.kube.watch(path, resourceVersion=version, **selector):
                        if event["type"] == "ERROR":
                            raise ApiError(
                                event["object"].get("code", 500),
                                "",
                                str(event["object"]),
                                "WATCH",
                                path,
                            )
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] in {"ADDED", "MODIFIED"}:
                            self._observe(event["object"])
                        elif event["type"] == "DELETED":
                            self._forget(event["object"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("pod watch failed; re-listing", error=str(exc))
                await asyncio.sleep(0.5)

    def _observe(self, pod: Obj) -> None:
        if not self.manages(pod["spec"].get("nodeName", "")):
            return
        uid = pod["metadata"]["uid"]
        run = self.runs.get(uid)
        if run is None:
            if pod.get("status", {}).get("phase") in {"Succeeded", "Failed"}:
                if pod["metadata"].get("deletionTimestamp"):
                    self._spawn(self._finish_delete(pod), f"delete {pod_key(pod)}")
                return
            run = self.runs[uid] = PodRun(pod)
            run.task = self._spawn(self._run_pod(run), f"pod {pod_key(pod)}")
        run.pod = pod
        if pod["metadata"].get("deletionTimestamp") and not run.deleting:
            run.deleting = True
            self._spawn(self._delete(run), f"delete {pod_key(pod)}")

    def _forget(self, pod: Obj) -> None:
        run = self.runs.pop(pod["metadata"]["uid"], None)
        if run is not None:
            self._kill(run, signal.SIGKILL)
            if run.task:
                run.task.cancel()
            shutil.rmtree(self._pod_dir(pod), ignore_errors=True)

    def _pod_dir(self, pod: Obj) -> Path:
        meta = pod["metadata"]
        return self.workdir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"

    def log_path(self, pod: Obj, container: str) -> Path:
        """Where a container's stdout and stderr go (``kubectl logs``); gone with the Pod."""
        return self._pod_dir(pod) / f"{container}.log"

    # -- running -------------------------------------------------------------------------

    async def _run_pod(self, run: PodRun) -> None:
        pod = run.pod
        pod_dir = self._pod_dir(pod)
        pod_dir.mkdir(parents=True, exist_ok=True)
        started = now()
        try:
            volumes = await self._volumes(pod, pod_dir)
            extra = dict(self.service_env)
            specs = run.specs = {
                c["name"]: process_spec(pod, c, pod_dir, volumes, extra)
                for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
            }
        except (PodSpecError, ApiError, KeyError, OSError) as exc:
            await self._write_status(run, "Failed", started, reason="SimulationError", message=str(exc)[:1000])
            return
        await self._write_status(run, "Running", started, containers=running_statuses(pod, started))
        deadline = pod["spec"].get("activeDeadlineSeconds")
        try:
            async with asyncio.timeout(deadline):
                statuses = await self._run_containers(run, specs, started)
        except TimeoutError:
            self._kill(run, signal.SIGKILL)
            await self._write_status(
                run,
                "Failed",
                started,
                reason="DeadlineExceeded",
                message=f"Pod was active on the node longer than the specified deadline ({deadline}s)",
                containers=[terminated_status(specs[c["name"]], c, 137, started) for c in pod["spec"]["containers"]],
            )
            return
        self._kill(run, signal.SIGKILL)
        phase = "Succeeded" if all(s["state"]["terminated"]["exitCode"] == 0 for s in statuses) else "Failed"
        await self._write_status(run, phase, started, containers=statuses)

    async def _volumes(self, pod: Obj, pod_dir: Path) -> dict[str, Path]:
        """Materialise the Pod's volumes, retrying while a ConfigMap or Secret is missing
        for a few seconds (as a kubelet retries mounts; e.g. kube-root-ca.crt is published
        shortly after its namespace is created)."""
        clock = asyncio.get_running_loop().time
        missing_until, transient_until = clock() + VOLUME_RETRY_SECONDS, clock() + VOLUME_OUTAGE_SECONDS
        while True:
            try:
                return await materialise_volumes(self.kube, pod, pod_dir)
            except (TransportError, ServerError, TooManyRequests):
                # The API server is down or overloaded (a restart, a paused etcd): a kubelet
                # keeps retrying the mount; failing the Pod here would fail a healthy step.
                if clock() > transient_until:
                    raise
            except ApiError as exc:
                if exc.status != 404 or clock() > missing_until:
                    raise
            await asyncio.sleep(0.2)

    async def _run_containers(self, run: PodRun, specs: dict[str, ProcessSpec], started: str) -> list[Obj]:
        pod = run.pod
        for container in pod["spec"].get("initContainers", []):
            code = await self._exec(run, container["name"], specs[container["name"]])
            if code != 0:
                return [terminated_status(specs[c["name"]], c, -1, started) for c in pod["spec"]["containers"]]
        containers = pod["spec"]["containers"]
        codes = await asyncio.gather(*(self._exec(run, c["name"], specs[c["name"]]) for c in containers))
        return [
            terminated_status(specs[c["name"]], c, code, started) for c, code in zip(containers, codes, strict=True)
        ]

    async def _exec(self, run: PodRun, name: str, spec: ProcessSpec) -> int:
        with spec.log_file.open("ab") as output:
            process = await asyncio.create_subprocess_exec(
                *spec.launch_argv(),
                env=spec.env,
                cwd=spec.host_cwd,
                stdout=output,
                stderr=output,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        run.processes[name] = process
        return await process.wait()

    def _kill(self, run: PodRun, sig: signal.Signals) -> None:
        for process in list(run.processes.values()):
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)

    # -- the kubelet API: pods/exec, for signals only (localcluster/kubeletapi.py) ---------

    def _signal_container(self, namespace: str, name: str, container: str, number: int) -> tuple[str, str]:
        """Send signal ``number`` to a running container's first process: (status, message)."""
        for run in self.runs.values():
            meta = run.pod["metadata"]
            if (meta["namespace"], meta["name"]) != (namespace, name):
                continue
            process = run.processes.get(container)
            if process is None or process.returncode is not None:
                return "409 Conflict", f"process kubelet: container {container} of {namespace}/{name} is not running"
            os.kill(process.pid, number)
            log.info("exec: signalled a container", pod=pod_key(run.pod), container=container, signal=number)
            return "200 OK", f"process kubelet: sent signal {number} to PID 1 of {namespace}/{name}/{container}"
        return "404 Not Found", f"process kubelet: no Pod {namespace}/{name} runs here"

    # -- status --------------------------------------------------------------------------

    async def _write_status(
        self,
        run: PodRun,
        phase: str,
        started: str,
        *,
        reason: str | None = None,
        message: str | None = None,
        containers: list[Obj] | None = None,
    ) -> None:
        order = ["Pending", "Running", "Succeeded", "Failed"]
        if run.deleting or order.index(phase) < order.index(run.phase) or run.phase in {"Succeeded", "Failed"}:
            return
        run.phase = phase
        ready = "True" if phase == "Running" else "False"
        status: Obj = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": started,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
                {"type": "Initialized", "status": "True", "lastTransitionTime": started},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": now()},
                {"type": "Ready", "status": ready, "lastTransitionTime": now()},
            ],
        }
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        if containers is not None:
            status["containerStatuses"] = containers
        meta = run.pod["metadata"]
        patch = {"metadata": {"uid": meta["uid"]}, "status": status}
        path = resource_path("v1", "pods", meta["namespace"], meta["name"], "status")
        await through_outages(lambda: self.kube.merge_patch(path, patch))

    # -- deletion ------------------------------------------------------------------------

    async def _delete(self, run: PodRun) -> None:
        self._kill(run, signal.SIGTERM)
        grace = min(float(run.pod["metadata"].get("deletionGracePeriodSeconds") or 0), KILL_GRACE_SECONDS)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                for process in list(run.processes.values()):
                    await process.wait()
        self._kill(run, signal.SIGKILL)
        if run.task:
            run.task.cancel()
        try:
            await self._finish_delete(run.pod)
        except ApiError:
            run.deleting = False  # the next event or re-list of the Pod tries again
            raise

    async def _finish_delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        path = resource_path("v1", "pods", meta["namespace"], meta["name"])
        await through_outages(lambda: self.kube.delete(path, body))
