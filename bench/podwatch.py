"""Where a workload's seconds go, from a watch of its namespace's Pods (bench/realnode_checks.py):
when each Pod appeared, all its containers started, all terminated, and it was gone, as the
kubelet's status writes reach the API server; ``--timeline`` prints each event."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bench.polling import wait_for
from localcluster.kube import KubeClient, Obj, resource_path

POLL = 0.05
"""How often the bare client and the watch's last check poll (50 ms, as the floors were measured)."""
SHOW = {"timeline": False}
"""``--timeline``: print every watch event of each workload's Pods, from the work's start."""


@dataclass
class PodTimes:
    """When this process saw each Pod appear, its containers all started, all terminated, and
    the Pod gone (monotonic)."""

    seen: dict[str, float] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    bodies: dict[str, Obj] = field(default_factory=dict)
    events: list[tuple[float, str, str]] = field(default_factory=list)

    def note(self, kind: str, pod: Obj, now: float) -> None:
        name = pod["metadata"]["name"]
        self.events.append((now, name, _summary(kind, pod)))
        self.seen.setdefault(name, now)
        self.bodies.setdefault(name, pod)
        states = [s.get("state", {}) for s in pod.get("status", {}).get("containerStatuses") or []]
        wanted = len(pod["spec"]["containers"])
        if len(states) == wanted and all("running" in s or "terminated" in s for s in states):
            self.started.setdefault(name, now)
        if len(states) == wanted and all("terminated" in s for s in states):
            self.ended.setdefault(name, now)
        if kind == "DELETED":
            self.gone.setdefault(name, now)

    def phases(self, began: float, finished: float) -> dict[str, float]:
        """start / run / gone of the whole workload (its last Pod's), and the rest of the span."""
        if not self.seen or len(self.gone) < len(self.seen):
            raise RuntimeError(f"not every Pod was seen gone: seen {sorted(self.seen)}, gone {sorted(self.gone)}")
        first = min(self.seen.values())
        started = max(self.started.values(), default=first)
        ended = max(self.ended.values(), default=started)
        gone = max(self.gone.values())
        return {
            "start": started - first,
            "run": ended - started,
            "gone": gone - ended,
            "adapter": (first - began) + (finished - gone),
        }


async def _watch(admin: KubeClient, path: str, version: str, times: PodTimes) -> None:
    async for event in admin.watch(path, resourceVersion=version):
        if event["type"] != "BOOKMARK":
            times.note(event["type"], event["object"], time.monotonic())


async def timed(
    admin: KubeClient, namespace: str, work: Callable[[], Awaitable[None]]
) -> tuple[float, PodTimes, dict[str, float]]:
    """Wall time of ``work`` with every Pod of the namespace watched meanwhile."""
    times = PodTimes()
    path = resource_path("v1", "pods", namespace)
    version = (await admin.get(path))["metadata"]["resourceVersion"]  # every event after it is seen
    watcher = asyncio.create_task(_watch(admin, path, version, times))
    try:
        began = time.monotonic()
        await work()
        finished = time.monotonic()

        async def delivered() -> bool:  # the work proved every Pod gone; its events may still be in flight
            return bool(times.seen) and len(times.gone) == len(times.seen)

        await wait_for("every Pod's deletion seen by the watch", delivered, 30, POLL)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    if SHOW["timeline"]:
        for at, name, line in times.events:
            print(f"    {at - began:6.3f} s  {name}  {line}")
        print(f"    {finished - began:6.3f} s  (the work returned)")
    return finished - began, times, times.phases(began, finished)


def _summary(kind: str, pod: Obj) -> str:
    """One watch event of a Pod as a line: its phase, conditions and container states."""
    status = pod.get("status") or {}
    conditions = ",".join(c["type"] for c in status.get("conditions") or [] if c.get("status") == "True")
    states = ",".join(next(iter(s.get("state") or {"-": 0})) for s in status.get("containerStatuses") or [])
    deleting = " deleting" if pod["metadata"].get("deletionTimestamp") else ""
    return f"{kind} {status.get('phase', '-')} [{conditions}] containers [{states}]{deleting}"
