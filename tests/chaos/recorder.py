"""The fault campaign's history recorder: a watcher of its own, independent of the controller's
code (it uses the local cluster's support client, not kubeio's informers), that records every
change of the campaign's Nodes, Runs, Workflows, Pods, MPIJobs and evidence ConfigMaps.

Each kind is listed, then watched from the list's resourceVersion. When a watch ends (the API
server restarted, a 410 Gone, a dropped connection) it lists again and records what changed
meanwhile: objects it did not know as ADDED, changed ones as MODIFIED (with their own
resourceVersion) and vanished ones as DELETED (at the list's resourceVersion). Intermediate
states a restart hid are lost, which can only hide a violation, never invent one.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from tests.chaos import history
from tests.chaos.history import FAULT, OPERATOR, Record


@dataclass(frozen=True)
class Source:
    kind: str
    path: str
    keep: Callable[[Obj], bool] = lambda _: True


def sources(namespace: str, node_prefix: str) -> list[Source]:
    def evidence(obj: Obj) -> bool:
        name = str(obj.get("metadata", {}).get("name", ""))
        return name.endswith("-evidence") or name.endswith("-results")

    return [
        Source("Node", resource_path("v1", "nodes"), lambda o: o["metadata"]["name"].startswith(node_prefix)),
        Source("Run", resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace)),
        Source("Workflow", resource_path("argoproj.io/v1alpha1", "workflows", namespace)),
        Source("Pod", resource_path("v1", "pods", namespace)),
        Source("MPIJob", resource_path("kubeflow.org/v2beta1", "mpijobs", namespace)),
        Source("ConfigMap", resource_path("v1", "configmaps", namespace), evidence),
    ]


@dataclass
class Recorder:
    admin: KubeClient
    path: Path
    watched: list[Source]
    started: float = field(default_factory=time.monotonic)
    records: list[Record] = field(default_factory=list)
    relists: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _ready: dict[str, asyncio.Event] = field(default_factory=dict)

    def now(self) -> float:
        return time.monotonic() - self.started

    def _add(self, kind: str, type_: str, rv: int, obj: Obj) -> None:
        record = Record(kind, type_, rv, self.now(), history.trim(kind, obj), seq=len(self.records))
        self.records.append(record)
        history.write(self.path, [record])

    def operator(self, action: str, answer: Obj | None = None, /, **detail: object) -> None:
        """An action of the campaign; ``answer`` is the API server's reply to its write."""
        rv = int((answer or {}).get("metadata", {}).get("resourceVersion") or 0)
        self._add(OPERATOR, action, rv, dict(detail))

    def fault(self, what: str, /, **detail: object) -> None:
        self._add(FAULT, what, 0, dict(detail))

    async def start(self) -> None:
        for source in self.watched:
            self._ready[source.kind] = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._follow(source), name=f"record-{source.kind}"))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._ready.values())), 60)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow(self, source: Source) -> None:
        known: dict[str, tuple[str, int]] = {}  # namespace/name -> (uid, rv)
        while True:
            try:
                listed = await self.admin.get(source.path)
            except Exception:  # the API server is down: try again shortly
                await asyncio.sleep(0.5)
                continue
            list_rv = int(listed["metadata"]["resourceVersion"])
            seen: set[str] = set()
            for item in listed.get("items") or []:
                if not source.keep(item):
                    continue
                meta = item["metadata"]
                key = f"{meta.get('namespace', '')}/{meta['name']}"
                seen.add(key)
                rv = int(meta["resourceVersion"])
                before = known.get(key)
                if before is None or before[0] != meta["uid"]:
                    if before is not None:
                        gone = {
                            "metadata": {"name": meta["name"], "namespace": meta.get("namespace", ""), "uid": before[0]}
                        }
                        self._add(source.kind, "DELETED", rv, gone)
                    self._add(source.kind, "ADDED", rv, item)
                elif before[1] != rv:
                    self._add(source.kind, "MODIFIED", rv, item)
                known[key] = (meta["uid"], rv)
            for key in sorted(set(known) - seen):
                namespace, name = key.split("/", 1)
                gone = {"metadata": {"name": name, "namespace": namespace, "uid": known.pop(key)[0]}}
                self._add(source.kind, "DELETED", list_rv, gone)
            self._ready[source.kind].set()
            await self._watch(source, known, str(list_rv))
            self.relists += 1

    async def _watch(self, source: Source, known: dict[str, tuple[str, int]], rv: str) -> None:
        try:
            async for event in self.admin.watch(source.path, resourceVersion=rv, timeoutSeconds="60"):
                obj, type_ = event.get("object") or {}, event.get("type")
                if type_ == "BOOKMARK":
                    continue
                if type_ == "ERROR":
                    return  # 410 Gone and friends: list again
                if type_ not in ("ADDED", "MODIFIED", "DELETED") or not source.keep(obj):
                    continue
                meta = obj["metadata"]
                key = f"{meta.get('namespace', '')}/{meta['name']}"
                self._add(source.kind, str(type_), int(meta["resourceVersion"]), obj)
                if type_ == "DELETED":
                    known.pop(key, None)
                else:
                    known[key] = (meta["uid"], int(meta["resourceVersion"]))
        except Exception:  # a dropped watch: list again
            await asyncio.sleep(0.2)


def load(path: Path) -> list[Record]:
    return list(history.read(path))


__all__ = ["FAULT", "OPERATOR", "Recorder", "load", "resource_path", "sources"]
