"""The floor of a window's own requests (issue 47, goal 2): every request the controller sent in
it (its request log: time, verb, path), made again by a bare client (bench/floors.py ``Bare``),
one after the other and, for the record, ``concurrency`` at once, with the controller stopped.

Each request is made on the same object or collection, with a body of its size class:

* a GET (or LIST): the same path (a 404 costs what it costs);
* a PATCH of a Node: a merge patch of an annotation about the size of Signal's projection
  patch; of a Node's status: a strategic patch of one condition (Signal's projection writes two);
* a PATCH of a Run's status: a merge patch of its message;
* any other PATCH or PUT: a merge patch of an annotation on that object;
* a POST: a create in the same collection of an Event (events) or else a ConfigMap holding
  ``payload`` bytes (the Run evidence ConfigMap's size);
* a DELETE: the delete of a ConfigMap created for it before the clock starts.

What a run changed is undone after its clock stops (annotations and conditions removed,
messages restored, objects deleted). Lease renewals are left out (time-based: a write every
few seconds whatever the work), as the admission windows count them apart."""

import asyncio
import base64
import json
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.floors import FLOOR_ANNOTATION, Bare
from bench.requestlog import Request
from bench.window_floor import LEASE_RENEWALS, write_kind
from localcluster.cluster import LocalCluster
from shared import keys

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
FLOOR_CONDITION = "BenchFloor"

Job = Callable[[], Awaitable[Any]]


@dataclass(frozen=True)
class ReplayFloor:
    requests: int
    kinds: dict[str, int]
    sequential_runs: tuple[float, ...]
    concurrent_runs: tuple[float, ...]
    concurrency: int

    @property
    def sequential(self) -> float:
        return statistics.median(self.sequential_runs)

    @property
    def concurrent(self) -> float:
        return statistics.median(self.concurrent_runs)

    def describe(self) -> str:
        def shown(runs: tuple[float, ...]) -> str:
            return ", ".join(f"{r:.3f}" for r in runs)

        return (
            f"replay floor ({self.requests} requests, the window's own, by a bare client): one after the other "
            f"{self.sequential:.3f}s [{shown(self.sequential_runs)}], {self.concurrency} at once "
            f"{self.concurrent:.3f}s [{shown(self.concurrent_runs)}]; by kind {self.kinds}"
        )


def _collection(path: str) -> tuple[str, str]:
    """(the collection's path, its resource) of a POST's path."""
    return path, path.rstrip("/").rsplit("/", 1)[-1]


def _namespace_of(path: str) -> str:
    parts = path.strip("/").split("/")
    return parts[parts.index("namespaces") + 1] if "namespaces" in parts else "default"


class _Plan:
    """One replay: the jobs in order, what they need made first, and how to undo them."""

    def __init__(self, bare: Bare, tag: str, payload: int) -> None:
        self.bare, self.tag, self.payload = bare, tag, payload
        self.jobs: list[Job] = []
        self.before: list[Job] = []
        self.undo: list[Job] = []
        self.count = 0

    async def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        content = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if content is not None else {}
        response = await self.bare.http.request(method, path, content=content, headers=headers)
        if response.status_code >= 300 and not (method == "GET" and response.status_code == 404):
            raise RuntimeError(f"replay floor: {method} {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else {}

    def _name(self) -> str:
        self.count += 1
        return f"floor-{self.tag}-{self.count}"

    def _config_map(self, name: str) -> dict[str, Any]:
        data = base64.b64encode(uuid.uuid4().bytes * max(1, self.payload // 16)).decode()
        return {"metadata": {"name": name, "labels": {FLOOR_ANNOTATION: self.tag}}, "binaryData": {"b": data}}

    def add(self, request: Request) -> None:
        path = request.path.split("?", 1)[0]
        verb = request.verb
        if verb in ("GET", "LIST"):  # the request log names a collection's GET LIST
            self.jobs.append(lambda: self.call("GET", request.path))
        elif verb == "POST":
            self._post(path)
        elif verb == "DELETE":
            namespace = _namespace_of(path)
            name = self._name()
            collection = f"/api/v1/namespaces/{namespace}/configmaps"
            self.before.append(lambda: self.call("POST", collection, self._config_map(name)))
            self.jobs.append(lambda: self.call("DELETE", f"{collection}/{name}"))
        elif path.startswith("/api/v1/nodes/") and path.endswith("/status"):
            condition = {"type": FLOOR_CONDITION, "status": "True", "reason": "Floor", "message": self.tag}
            self.jobs.append(lambda: self.call("PATCH", path, {"status": {"conditions": [condition]}}, STRATEGIC))
            remove = {"status": {"conditions": [{"$patch": "delete", "type": FLOOR_CONDITION}]}}
            self.undo.append(lambda: self.call("PATCH", path, remove, STRATEGIC))
        elif f"/{keys.RUN_PLURAL}/" in path and path.endswith("/status"):
            self._run_status(path)
        else:
            target = path.removesuffix("/status")
            detail = json.dumps({"run": "floor", "uid": self.tag, "verdict": "Pass", "padding": "x" * 96})
            patch = {"metadata": {"annotations": {FLOOR_ANNOTATION: detail}}}
            self.jobs.append(lambda: self.call("PATCH", target, patch, MERGE))
            unset = {"metadata": {"annotations": {FLOOR_ANNOTATION: None}}}
            self.undo.append(lambda: self.call("PATCH", target, unset, MERGE))

    def _post(self, path: str) -> None:
        collection, resource = _collection(path)
        name = self._name()
        if resource == "events":
            namespace = _namespace_of(path)
            # A Node's Events go to default (a cluster-scoped object's); a Run's to its namespace.
            involved = {"kind": "Node", "name": name, "apiVersion": "v1"}
            if namespace != "default":
                involved = {"kind": keys.RUN_KIND, "name": name, "apiVersion": keys.API_VERSION, "namespace": namespace}
            body: dict[str, Any] = {
                "metadata": {"name": name},
                "involvedObject": involved,
                "reason": "CertificationPass",
                "message": f"floor: Pass (Run floor, evidence sha256:{'0' * 64})",
                "type": "Normal",
                "source": {"component": "bench-floor"},
            }
        else:
            collection = f"/api/v1/namespaces/{_namespace_of(path)}/configmaps"
            body = self._config_map(name)
        self.jobs.append(lambda: self.call("POST", collection, body))
        self.undo.append(lambda: self.call("DELETE", f"{collection}/{name}"))

    def _run_status(self, path: str) -> None:
        kept: dict[str, Any] = {}

        async def read() -> None:
            kept["message"] = ((await self.call("GET", path)).get("status") or {}).get("message")

        self.before.append(read)
        self.jobs.append(lambda: self.call("PATCH", path, {"status": {"message": f"floor {self.tag}"}}, MERGE))
        self.undo.append(lambda: self.call("PATCH", path, {"status": {"message": kept.get("message")}}, MERGE))


async def _one(bare: Bare, window: Sequence[Request], payload: int, concurrency: int) -> float:
    plan = _Plan(bare, uuid.uuid4().hex[:8], payload)
    for request in window:
        plan.add(request)
    for job in plan.before:
        await job()
    began = time.perf_counter()
    if concurrency <= 1:
        for job in plan.jobs:
            await job()
    else:
        gate = asyncio.Semaphore(concurrency)

        async def gated(job: Job) -> None:
            async with gate:
                await job()

        await asyncio.gather(*(gated(j) for j in plan.jobs))
    elapsed = time.perf_counter() - began
    for job in plan.undo:
        await job()
    return elapsed


def replayable(window: Sequence[Request]) -> list[Request]:
    """The window's requests less the Lease's (renewals and reads: time-based) and watches (a
    cache's stream resumed in the window is no request of the work)."""
    return [r for r in window if "/leases/" not in r.path and write_kind(r) != LEASE_RENEWALS and r.verb != "WATCH"]


async def replay_floor(
    cluster: LocalCluster, window: Sequence[Request], *, payload: int, repeats: int = 3, concurrency: int = 8
) -> ReplayFloor:
    """Replay ``window`` ``repeats`` times each way (alternating); the floor is the median."""
    requests = replayable(window)
    kinds = Counter(write_kind(r) for r in requests)
    runs: dict[int, list[float]] = {1: [], concurrency: []}
    async with Bare(cluster, connections=concurrency) as bare:
        for mode in (1, concurrency) * repeats:
            runs[mode].append(await _one(bare, requests, payload, mode))
    kept = dict(sorted(kinds.items()))
    return ReplayFloor(len(requests), kept, tuple(runs[1]), tuple(runs[concurrency]), concurrency)
