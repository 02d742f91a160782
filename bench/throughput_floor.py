"""A floor for goal 2's whole window (issue 15): the same writes, by a bare client, in the same
kind of window.

Goal 2's window runs from the request (the bench's requester labelling every group's Nodes,
``REQUESTER_CONCURRENCY`` at a time) to the last group's Run status PATCH to Running, so the API
server serves the requester's label PATCHes and Signal's writes in it at once. The API write
floor (bench/floors.py) has the server to itself, with none of the requester's load.
:func:`throughput_window_floor` makes the window's writes with no Signal code: the requester's
label PATCHes, made as the bench makes them, and at the same time, group by group (a group once
its last label PATCH is answered, as Signal can admit a group only once all of it is
requested), a resourceVersion-conditioned PATCH of each of its Nodes (conditioned on the version
its label PATCH answered; ``concurrency`` at once, as Signal reserves) and ``creates`` ConfigMap
creates one after the other (Signal's other writes of a group: ledger, Run, snapshot, Workflow,
status, Event). The writes are undone outside the clock.

Not a strict lower bound: both streams are one Python process (httpx), so on a two-core machine
the client's own CPU is in it, as the bench's requester's is in Signal's window (the first
2,000-Node run: Signal's window 3.87 s, this one 6.10 s)."""

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.floors import FLOOR_ANNOTATION, Bare, _bounded, conditional_patch
from bench.window_floor import REQUEST_LABEL
from localcluster.cluster import LocalCluster
from localcluster.kube import resource_path

MERGE = "application/merge-patch+json"


@dataclass(frozen=True)
class ThroughputFloor:
    groups: int
    labels: int
    patches: int
    creates: int
    seconds: float
    labels_seconds: float
    """The requester's part alone: request -> its last label PATCH answered."""

    @property
    def signal_writes(self) -> int:
        """The writes of the window that stand for Signal's (the label PATCHes are the requester's)."""
        return self.patches + self.creates

    def describe(self) -> str:
        return (
            f"throughput-window floor ({self.labels} label PATCHes as the bench's requester makes them and, "
            f"at the same time, group by group once labelled, {self.patches} conditional Node PATCHes + "
            f"{self.creates} creates, bare httpx): {self.seconds:.2f}s "
            f"({self.signal_writes / self.seconds:.1f} of Signal's writes/s; the label PATCHes ended at "
            f"{self.labels_seconds:.2f}s)"
        )


async def throughput_window_floor(
    cluster: LocalCluster,
    groups: Sequence[Sequence[str]],
    creates: int,
    namespace: str,
    *,
    requester_concurrency: int,
    concurrency: int = 8,
) -> ThroughputFloor:
    """Label every Node of ``groups`` (``requester_concurrency`` at once, in order) while, group
    after group, each group's Nodes are patched conditionally and ``creates`` ConfigMaps made."""
    tag = uuid.uuid4().hex[:8]
    cm_path = resource_path("v1", "configmaps", namespace)
    made: list[str] = []
    async with Bare(cluster, connections=requester_concurrency + concurrency + 1) as bare:
        labelled: dict[str, asyncio.Future[Any]] = {}
        loop = asyncio.get_running_loop()
        for group in groups:
            for name in group:
                labelled[name] = loop.create_future()
        gate = asyncio.Semaphore(requester_concurrency)

        async def label(name: str) -> None:
            async with gate:
                body = {"metadata": {"labels": {REQUEST_LABEL: tag}}}
                answer = await bare.call("PATCH", resource_path("v1", "nodes", name=name), body, MERGE)
            labelled[name].set_result(answer)

        async def requester() -> float:
            await asyncio.gather(*(label(n) for group in groups for n in group))
            return time.perf_counter()

        async def writer() -> None:
            for index, group in enumerate(groups):
                answers = await asyncio.gather(*(labelled[n] for n in group))
                await _bounded(
                    concurrency,
                    [
                        bare.call(
                            "PATCH",
                            resource_path("v1", "nodes", name=n),
                            conditional_patch(a["metadata"]["resourceVersion"], tag),
                            MERGE,
                        )
                        for n, a in zip(group, answers, strict=True)
                    ],
                )
                for i in range(creates):
                    name = f"floor-throughput-{tag}-{index}-{i}"
                    await bare.call("POST", cm_path, {"metadata": {"name": name}, "data": {"k": "v"}})
                    made.append(name)

        began = time.perf_counter()
        labels_done, _ = await asyncio.gather(requester(), writer())
        seconds = time.perf_counter() - began
        undo = {"metadata": {"labels": {REQUEST_LABEL: None}, "annotations": {FLOOR_ANNOTATION: None}}}
        await _bounded(
            32,
            [
                *(bare.call("PATCH", resource_path("v1", "nodes", name=n), undo, MERGE) for g in groups for n in g),
                *(bare.call("DELETE", f"{cm_path}/{m}") for m in made),
            ],
        )
    nodes = sum(len(g) for g in groups)
    return ThroughputFloor(len(groups), nodes, nodes, creates * len(groups), seconds, labels_done - began)
