"""Watching what real Kueue does to a namespace's objects (tests with localcluster.kueuemanager):
every version of every Pod, MPIJob and Kueue Workload a watch saw, so a test can tell, after a
Run, that Kueue suspended or gated a workload when it was created, admitted it, and what it
changed when it let it run, although the adapter has deleted all of it by then."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from localcluster.kube import KubeClient, Obj, resource_path
from localcluster.kueuemanager import KUEUE_API

ADMISSION_GATE = "kueue.x-k8s.io/admission"


@dataclass
class Watched:
    """Every version of the objects under ``path`` that one watch saw, by name, in order."""

    admin: KubeClient
    path: str
    versions: dict[str, list[Obj]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None

    async def start(self) -> "Watched":
        listing = await self.admin.get(self.path)
        for item in listing["items"]:
            self.versions.setdefault(item["metadata"]["name"], []).append(item)
        self.task = asyncio.create_task(self._watch(listing["metadata"]["resourceVersion"]))
        return self

    async def _watch(self, version: str) -> None:
        async for event in self.admin.watch(self.path, resourceVersion=version):
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                item = event["object"]
                self.versions.setdefault(item["metadata"]["name"], []).append(item)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


@dataclass
class KueueWatch:
    """The namespace's Kueue Workloads, MPIJobs and Pods, watched."""

    workloads: Watched
    mpijobs: Watched
    pods: Watched

    def admitted(self) -> dict[str, Obj]:
        """Each Workload Kueue admitted (condition Admitted=True in some version), by name: its
        last version seen admitted."""
        found = {}
        for name, versions in self.workloads.versions.items():
            for version in versions:
                conditions = (version.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions):
                    found[name] = version
        return found

    def pods_of(self, check_label: str, check: str) -> dict[str, list[Obj]]:
        return {
            name: versions
            for name, versions in self.pods.versions.items()
            if (versions[0]["metadata"].get("labels") or {}).get(check_label) == check
        }


@contextlib.asynccontextmanager
async def kueue_watch(admin: KubeClient, namespace: str) -> AsyncIterator[KueueWatch]:
    watched = [
        await Watched(admin, resource_path(api, plural, namespace)).start()
        for api, plural in [(KUEUE_API, "workloads"), ("kubeflow.org/v2beta1", "mpijobs"), ("v1", "pods")]
    ]
    try:
        yield KueueWatch(*watched)
    finally:
        for each in watched:
            await each.stop()


def owner_kinds(item: Obj) -> list[str]:
    return sorted({o["kind"] for o in item["metadata"].get("ownerReferences") or []})


def pod_count(workload: Obj) -> int:
    return sum(int(s["count"]) for s in workload["spec"]["podSets"])


def gates(pod: Obj) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def node_selector(spec: dict[str, Any]) -> dict[str, str]:
    return dict(spec.get("nodeSelector") or {})
