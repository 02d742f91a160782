"""The fault campaign's faults: a seeded schedule (pure) and the injector that carries each one
out on the campaign's own local cluster (I/O).

Every fault is undone by the injector itself (a stopped process continued, a killed one
restarted, a cordon lifted) before the campaign's quiet phase, so that the end invariants
judge the system, not a fault left in place.
"""

import asyncio
import contextlib
import os
import random
import signal
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from localcluster.argoworkflows import StartError
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import ApiError, KubeClient, Obj, resource_path, transport
from shared import keys
from shared.digests import bundle_digest
from tests.chaos.recorder import Recorder
from tests.controller_support import ControllerProcess

OUTAGE_WAIT = 120.0
"""Seconds an undo (Argo's restart) waits out an API server another fault stopped."""
NO_TARGET_RETRIES = 2
NO_TARGET_DELAY = 5.0
"""A fault that finds no target (no live Run to cancel, no Workflow to delete) is tried again
this many seconds later, up to NO_TARGET_RETRIES times: how many faults a seed injects then
depends less on how fast the machine runs the Runs."""
ADAPTER_WAIT = 20.0
"""Seconds kill-adapter waits for an adapter to run (one runs only while a check does)."""
KINDS = (
    "kill-leader",
    "pause-leader",
    "restart-apiserver",
    "pause-etcd",
    "restart-argo",
    "kill-adapter",
    "delete-backend",
    "delete-workflow",
    "cordon",
    "replace-node",
    "change-source",
    "cancel",
    "release",
)


@dataclass(frozen=True)
class Planned:
    at: float
    """Seconds after the campaign's start."""
    kind: str
    tries: int = 0
    """How often it was tried before and found no target."""


def schedule(seed: int, count: int, span: float, kinds: Sequence[str] = KINDS) -> list[Planned]:
    """``count`` faults spread over ``span`` seconds, each kind at least once when count allows. Pure."""
    rng = random.Random(seed)
    chosen = list(kinds[:count]) + [rng.choice(list(kinds)) for _ in range(max(0, count - len(kinds)))]
    rng.shuffle(chosen)
    times = sorted(rng.uniform(0.0, span) for _ in chosen)
    return [Planned(round(t, 3), kind) for t, kind in zip(times, chosen, strict=True)]


@dataclass
class Injector:
    cluster: LocalCluster
    admin: KubeClient
    namespace: str
    replicas: list[ControllerProcess]
    recorder: Recorder
    rng: random.Random
    node_names: list[str]
    zones: dict[str, str]
    profiles: list[str]
    injected: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    paused: set[int] = field(default_factory=set)
    """Pids stopped on purpose (SIGSTOP): not to be restarted while they sleep."""
    _undo: list[asyncio.Task[None]] = field(default_factory=list)
    _sources: int = 0

    async def inject(self, kind: str, *, last_try: bool = True) -> bool:
        """Carry out one fault; False when it found no target (counted as skipped on its last try)."""
        action: Callable[[], Awaitable[bool]] = getattr(self, "_" + kind.replace("-", "_"))
        try:
            done = await action()
        except ApiError as exc:  # e.g. the object went away meanwhile: nothing was injected
            self.recorder.fault(kind, skipped=str(exc)[:200])
            done = False
        if done or last_try:
            counter = self.injected if done else self.skipped
            counter[kind] = counter.get(kind, 0) + 1
        return done

    async def settle(self) -> None:
        """Undo every fault still in place (restart Argo, continue what is stopped, uncordon)."""
        for task in self._undo:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._undo.clear()

    async def abort(self) -> None:
        """Cancel the undos still pending (the campaign failed before it settled): none may run
        on, with its clients, past the campaign's end."""
        for task in self._undo:
            task.cancel()
        for task in self._undo:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._undo.clear()

    def later(self, delay: float, undo: Callable[[], Awaitable[None]]) -> None:
        async def run() -> None:
            await asyncio.sleep(delay)
            await undo()

        self._undo.append(asyncio.create_task(run()))

    # --- the faults ------------------------------------------------------------------------

    async def _leader(self) -> ControllerProcess | None:
        lease = await self.admin.get(resource_path("coordination.k8s.io/v1", "leases", self.namespace))
        holders = {(i.get("spec") or {}).get("holderIdentity") for i in lease["items"]}
        for replica in self.replicas:
            if f"controller-{self.namespace}-{replica.identity}" in holders and replica.process:
                return replica
        return None

    async def _kill_leader(self) -> bool:
        leader = await self._leader()
        if leader is None or leader.process is None or leader.process.poll() is not None:
            return False
        leader.process.kill()  # the campaign's supervisor restarts it, as a Deployment would
        self.recorder.fault("kill-leader", identity=leader.identity)
        return True

    async def _pause_leader(self) -> bool:
        leader = await self._leader()
        if leader is None or leader.process is None or leader.process.poll() is not None:
            return False
        pid = leader.process.pid
        self.paused.add(pid)
        os.kill(pid, signal.SIGSTOP)
        self.recorder.fault("pause-leader", identity=leader.identity)

        async def wake() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            self.paused.discard(pid)
            self.recorder.fault("resume-leader", identity=leader.identity)

        self.later(15 + self.rng.uniform(2, 6), wake)  # past the 15 s Lease
        return True

    async def _restart_apiserver(self) -> bool:
        plane = self.cluster.plane
        await asyncio.to_thread(plane.stop_apiserver)
        self.recorder.fault("stop-apiserver")
        await asyncio.sleep(self.rng.uniform(2, 6))
        await asyncio.to_thread(plane.start_apiserver)
        self.recorder.fault("start-apiserver")
        return True

    async def _pause_etcd(self) -> bool:
        pid = self.cluster.plane.pids().get("etcd")
        if pid is None:
            return False
        os.kill(pid, signal.SIGSTOP)
        self.recorder.fault("pause-etcd")
        await asyncio.sleep(self.rng.uniform(1, 4))
        os.kill(pid, signal.SIGCONT)
        self.recorder.fault("resume-etcd")
        return True

    async def _restart_argo(self) -> bool:
        argo = self.cluster.argo
        if argo is None:
            return False
        await asyncio.to_thread(argo.stop)
        self.recorder.fault("stop-argo")

        async def restart() -> None:
            # Another fault may have the API server down right now: wait it out, as an
            # operator restarting Argo would (its start writes its ConfigMap first, and the
            # workflow-controller exits, or never syncs, while the API server cannot answer).
            deadline = time.monotonic() + OUTAGE_WAIT
            while True:
                try:
                    await argo.start()
                    break
                except ApiError as exc:  # TransportError (no answer) included
                    if time.monotonic() > deadline or not (exc.retryable or exc.status >= 500):
                        raise
                except StartError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.to_thread(argo.stop)
                await self._until_api_ready(deadline)
            self.recorder.fault("start-argo")

        self.later(self.rng.uniform(3, 10), restart)
        return True

    async def _until_api_ready(self, deadline: float) -> None:
        """Poll the API server's ``/readyz`` until it answers 200 or ``deadline`` passes (then
        the caller's next attempt fails and says why)."""
        plane = self.cluster.plane
        headers = {"Authorization": f"Bearer {plane.admin_token}"}
        # The harness client's transport: this poll runs while the API server starts, and a task
        # cancelled mid-handshake must not leave its socket to the garbage collector.
        context = ssl.create_default_context(cafile=str(plane.ca_file))
        async with httpx.AsyncClient(transport=transport(context, httpx.Limits()), timeout=2.0) as http:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{plane.server}/readyz", headers=headers)).status_code == 200:
                        return
                await asyncio.sleep(0.2)

    async def _kill_adapter(self) -> bool:
        """SIGKILL a running adapter of this namespace (the process itself, not Argo's emissary
        around it); an adapter runs only while a check does, so wait up to ADAPTER_WAIT for one."""
        deadline = time.monotonic() + ADAPTER_WAIT
        while not (victims := self._adapters()):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.5)
        pid = self.rng.choice(victims)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.recorder.fault("kill-adapter", pid=pid)
        return True

    def _adapters(self) -> list[int]:
        found = []
        for pid, argv in _processes():
            words = argv.split()
            if (
                any(Path(w).name == "signal-adapter" for w in words[:2])
                and f"--run-namespace {self.namespace} " in argv
            ):
                found.append(pid)
        return found

    async def _backend(self) -> list[tuple[str, Obj]]:
        found: list[tuple[str, Obj]] = []
        for kind, path in (
            ("Pod", resource_path("v1", "pods", self.namespace)),
            ("MPIJob", resource_path("kubeflow.org/v2beta1", "mpijobs", self.namespace)),
        ):
            listed = await self.admin.get(path, labelSelector=keys.RUN_UID_LABEL)
            found += [
                (path, item)
                for item in listed["items"]
                if kind == "MPIJob" or "job-name" not in item["metadata"].get("labels", {})
            ]
        return found

    async def _delete_backend(self) -> bool:
        candidates = await self._backend()
        if not candidates:
            return False
        path, victim = self.rng.choice(candidates)
        await self.admin.delete(f"{path}/{victim['metadata']['name']}")
        self.recorder.fault("delete-backend", name=victim["metadata"]["name"])
        return True

    async def _delete_workflow(self) -> bool:
        path = resource_path("argoproj.io/v1alpha1", "workflows", self.namespace)
        running = [
            w for w in (await self.admin.get(path))["items"] if (w.get("status") or {}).get("phase") != "Succeeded"
        ]
        if not running:
            return False
        victim = self.rng.choice(running)["metadata"]["name"]
        await self.admin.delete(f"{path}/{victim}")
        self.recorder.fault("delete-workflow", name=victim)
        return True

    async def _reserved(self) -> list[Obj]:
        nodes = [await self.admin.get(resource_path("v1", "nodes", name=n)) for n in self.node_names]
        return [n for n in nodes if keys.RESERVED_BY_LABEL in (n["metadata"].get("labels") or {})]

    async def _cordon(self) -> bool:
        reserved = [n for n in await self._reserved() if not (n.get("spec") or {}).get("unschedulable")]
        if not reserved:
            return False
        name = self.rng.choice(reserved)["metadata"]["name"]
        path = resource_path("v1", "nodes", name=name)
        self.recorder.operator(
            "cordon", await self.admin.merge_patch(path, {"spec": {"unschedulable": True}}), node=name
        )

        async def uncordon() -> None:
            answer = await self.admin.merge_patch(path, {"spec": {"unschedulable": None}})
            self.recorder.operator("uncordon", answer, node=name)

        self.later(self.rng.uniform(2, 15), uncordon)
        return True

    async def _replace_node(self) -> bool:
        reserved = await self._reserved()
        if not reserved:
            return False
        name = self.rng.choice(reserved)["metadata"]["name"]
        await self.cluster.remove_node(name)
        self.recorder.fault("replace-node", name=name)
        await self.cluster.add_nodes([SimNode(name, zone=self.zones[name], labels={"pool": "gpu"})])
        return True

    async def _change_source(self) -> bool:
        self._sources += 1
        profile = self.rng.choice(self.profiles)
        name = f"scripts-v{self._sources}"
        body = await self.admin.get(resource_path("v1", "configmaps", self.namespace, "scripts"))
        data = {**body["data"], "version.txt": f"{self._sources}\n"}
        await self.admin.create(
            resource_path("v1", "configmaps", self.namespace),
            {"metadata": {"name": name}, "data": data, "immutable": True},
        )
        patch = {"spec": {"source": {"name": name, "digest": bundle_digest(data, {})}}}
        await self.admin.merge_patch(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profile), patch)
        self.recorder.fault("change-source", profile=profile, source=name)
        return True

    async def _runs(self) -> list[Obj]:
        items: list[Obj] = (await self.admin.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, self.namespace)))[
            "items"
        ]
        return items

    async def _cancel(self) -> bool:
        live = [r for r in await self._runs() if (r.get("status") or {}).get("phase") not in TERMINAL]
        if not live:
            return False
        run = self.rng.choice(live)
        path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, self.namespace, run["metadata"]["name"])
        self.recorder.operator(
            "cancel", await self.admin.merge_patch(path, {"spec": {"cancel": True}}), run=run["metadata"]["name"]
        )
        return True

    async def _release(self) -> bool:
        ended = [
            r
            for r in await self._runs()
            if (r.get("status") or {}).get("phase") in TERMINAL and not r["spec"].get("release")
        ]
        if not ended:
            return False
        run = self.rng.choice(ended)
        path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, self.namespace, run["metadata"]["name"])
        self.recorder.operator(
            "release", await self.admin.merge_patch(path, {"spec": {"release": True}}), run=run["metadata"]["name"]
        )
        return True


TERMINAL = ("Succeeded", "Failed", "Inconclusive", "Canceled")


def _processes() -> list[tuple[int, str]]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                out.append(
                    (int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                )
    return out
