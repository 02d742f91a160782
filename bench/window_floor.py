"""What goal 1's admission window holds, and a floor for all of it (issue 15).

Goal 1's window runs from the request (the requester labelling ``--group`` Nodes, all at once)
to the controller's Run status PATCH to Running. The API write floor (bench/floors.py) counts
only Signal's writes; :func:`request_window_floor` times the same writes as the whole window:
the requester's label PATCHes made the way the bench's requester makes them (unconditional
merge patches, all at once), then, one after the other, a resourceVersion-conditioned PATCH of
each of those Nodes (conditioned on the version the label PATCH answered) and the other writes
as ConfigMap creates, by the same bare client. The patches are undone outside the clock.

:func:`write_kinds` names each write in a request log by verb and resource (the ledger by its
name), so a window's writes can be printed by kind; :data:`LEASE_RENEWALS` is the kind the
leader's Lease renewal has (a write every few seconds whatever the work: not an admission's)."""

import asyncio
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bench.floors import FLOOR_ANNOTATION, Bare, conditional_patch
from bench.requestlog import WRITES, Request
from controller.rules.ledger import LEDGER_NAME
from localcluster.cluster import LocalCluster
from localcluster.kube import resource_path

REQUEST_LABEL = "bench.projectsignal.dev/floor-request"
LEASE_RENEWALS = "PUT leases"


def write_kind(request: Request) -> str:
    """``VERB resource[/subresource]`` of one request (the ledger ConfigMap by its name)."""
    parts = request.path.split("?", 1)[0].strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]  # /api/v1/... or /apis/group/version/...
    if len(parts) > 2 and parts[0] == "namespaces":
        parts = parts[2:]
    resource = parts[0] if parts else "?"
    if resource == "configmaps" and len(parts) > 1 and parts[1] == LEDGER_NAME:
        resource = f"configmaps/{LEDGER_NAME}"
    if len(parts) > 2:
        resource += f"/{parts[2]}"
    return f"{request.verb} {resource}"


def write_kinds(requests: Sequence[Request]) -> Counter[str]:
    return Counter(write_kind(r) for r in requests if r.verb in WRITES)


@dataclass(frozen=True)
class WindowFloor:
    requests: int
    patches: int
    creates: int
    runs: tuple[float, ...]
    request_runs: tuple[float, ...]
    """The requester's part of each run (its label PATCHes, all at once)."""

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    def describe(self) -> str:
        return (
            f"request-window floor ({self.requests} label PATCHes at once as the bench's requester makes them, "
            f"then {self.patches} conditional Node PATCHes + {self.creates} creates one after the other, bare httpx): "
            f"{self.median:.3f}s [median of {len(self.runs)}: {min(self.runs):.3f}-{max(self.runs):.3f}s; "
            f"the label PATCHes alone {statistics.median(self.request_runs):.3f}s]"
        )


async def request_window_floor(
    cluster: LocalCluster, nodes: Sequence[str], creates: int, namespace: str, repeats: int = 5
) -> WindowFloor:
    """Label ``nodes`` all at once, then patch each of them (conditioned on the version its
    label PATCH answered) and make ``creates`` ConfigMaps, sequentially; ``repeats`` times."""
    runs, request_runs = [], []
    async with Bare(cluster) as bare:
        paths = [resource_path("v1", "nodes", name=n) for n in nodes]
        cm_path = resource_path("v1", "configmaps", namespace)
        for _ in range(repeats):
            tag = uuid.uuid4().hex[:8]
            made = [f"floor-window-{tag}-{i}" for i in range(creates)]
            began = time.perf_counter()
            labelled = await asyncio.gather(
                *(
                    bare.call(
                        "PATCH", p, {"metadata": {"labels": {REQUEST_LABEL: tag}}}, "application/merge-patch+json"
                    )
                    for p in paths
                )
            )
            request_runs.append(time.perf_counter() - began)
            for path, node in zip(paths, labelled, strict=True):
                rv = node["metadata"]["resourceVersion"]
                await bare.call("PATCH", path, conditional_patch(rv, tag), "application/merge-patch+json")
            for name in made:
                await bare.call("POST", cm_path, {"metadata": {"name": name}, "data": {"k": "v"}})
            runs.append(time.perf_counter() - began)
            undo = {"metadata": {"labels": {REQUEST_LABEL: None}, "annotations": {FLOOR_ANNOTATION: None}}}
            await asyncio.gather(
                *(bare.call("PATCH", p, undo, "application/merge-patch+json") for p in paths),
                *(bare.call("DELETE", f"{cm_path}/{m}") for m in made),
            )
    return WindowFloor(len(nodes), len(nodes), creates, tuple(runs), tuple(request_runs))
