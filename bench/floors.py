"""Floors: what the same machine and the same local cluster do with no Signal code in the way,
measured in the same run as the figure they bound (issue 15). Every benchmark reuses these.

* :func:`api_write_floor` - a bare HTTP client (httpx, the admin's token) making N
  resourceVersion-conditioned merge PATCHes of Nodes plus C creates (ConfigMaps), once one
  after the other and once with bounded concurrency. The resourceVersions are read by one LIST
  before the clock starts; the patches are undone after it stops.
* :func:`pod_fanout_floor` - N trivial Pods (``true``), one per simulated Node, created, run
  to Succeeded and deleted (until gone), by the same bare client.
* :func:`step_floor` - a bare Argo Workflow whose one step starts one Pod (the step itself)
  that creates one trivial Pod on a simulated Node and waits for it to succeed: Workflow
  created -> Workflow Succeeded, with the same executor image, the same kubelet and the same
  Argo as Signal's Workflows.

Helpers shared by the benchmarks (the request log is bench/requestlog.py): :func:`rss_mib`,
:func:`row` (one line per goal: floor, Signal, ratio, goal) and :func:`growth`."""

import asyncio
import json
import ssl
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lanes import Lanes
from localcluster.cluster import LocalCluster
from localcluster.kube import resource_path
from localcluster.rbac import rbac_in_effect

FLOOR_ANNOTATION = "bench.projectsignal.dev/floor"
POLL = 0.05
"""How often the floors look at what they wait for (bounds their own resolution)."""


def rss_mib(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def row(goal: str, floor: float | None, signal: float, unit: str, target: str) -> str:
    """One printed line per goal: the floor, Signal's figure, their ratio and the goal."""
    if floor is None or floor <= 0:
        return f"GOAL {goal:<34} floor {'-':>9}  signal {signal:9.3f} {unit:<3} ratio {'-':>6}  goal {target}"
    return (
        f"GOAL {goal:<34} floor {floor:9.3f} {unit:<3} signal {signal:9.3f} {unit:<3} "
        f"ratio {signal / floor:6.2f}  goal {target}"
    )


def judged(goal: str, floor: float | None, signal: float, unit: str, limit: float, target: str) -> str:
    """One issue-47 line: the figure (and its ratio to ``floor`` when there is one) against
    ``limit`` (a ratio when there is a floor, else an absolute bound), PASS or MISS."""
    if floor is not None and floor > 0:
        ratio = signal / floor
        shown = f"floor {floor:9.3f} {unit:<3} signal {signal:9.3f} {unit:<3} ratio {ratio:6.2f}"
        ok = ratio <= limit
    else:
        shown = f"floor {'-':>9}     signal {signal:9.3f} {unit:<3} ratio {'-':>6}"
        ok = signal <= limit
    return f"GOAL {goal:<34} {shown}  goal {target}  {'PASS' if ok else 'MISS'}"


def growth(label: str, small: float, large: float, factor: int, unit: str) -> str:
    """The growth line of a figure measured at 1/``factor`` of the size and at full size."""
    ratio = large / small if small > 0 else float("inf")
    verdict = "super-linear" if ratio > factor * 1.2 else ("linear" if ratio > factor * 0.8 else "sub-linear")
    return (
        f"GROWTH {label:<32} 1/{factor} size {small:9.3f} {unit:<3} full {large:9.3f} {unit:<3} "
        f"x{ratio:6.2f} ({verdict})"
    )


class Bare:
    """A bare httpx client with the cluster admin's token, ``connections`` requests at once at
    most, one connection each (bench/lanes.py): no Signal code in the way."""

    def __init__(self, cluster: LocalCluster, connections: int = 64) -> None:
        plane = cluster.plane
        # One connection per lane (bench/lanes.py): a pooled client's bookkeeping at 64 requests
        # in flight took the API server's CPU and made the floors slower than a bare client is.
        self.http = Lanes(
            connections,
            base_url=plane.server,
            verify=ssl.create_default_context(cafile=str(plane.ca_file)),
            headers={"Authorization": f"Bearer {plane.admin_token}", "Accept": "application/json"},
            timeout=60.0,
        )

    async def __aenter__(self) -> "Bare":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        content = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if content is not None else {}
        response = await self.http.request(method, path, content=content, headers=headers)
        if response.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else {}


async def _bounded(concurrency: int, jobs: Sequence[Any]) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Any) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


@dataclass(frozen=True)
class WriteFloor:
    patches: int
    creates: int
    sequential: float
    concurrent: float
    concurrency: int
    sequential_runs: tuple[float, ...] = ()
    concurrent_runs: tuple[float, ...] = ()
    """Every measurement; ``sequential``/``concurrent`` are their medians (on a shared two-core
    machine one measurement varied 0.38-1.02 s between runs)."""

    @property
    def writes(self) -> int:
        return self.patches + self.creates

    def describe(self) -> str:
        def spread(runs: tuple[float, ...]) -> str:
            return f" [median of {len(runs)}: {min(runs):.3f}-{max(runs):.3f}s]" if len(runs) > 1 else ""

        return (
            f"API write floor ({self.patches} conditional Node PATCHes + {self.creates} creates, bare httpx): "
            f"sequential {self.sequential:.3f}s ({self.writes / self.sequential:.0f} writes/s)"
            f"{spread(self.sequential_runs)}, concurrency {self.concurrency} {self.concurrent:.3f}s "
            f"({self.writes / self.concurrent:.0f} writes/s){spread(self.concurrent_runs)}"
        )


async def _versions(bare: Bare, names: Sequence[str]) -> dict[str, str]:
    wanted = set(names)
    listing = await bare.call("GET", resource_path("v1", "nodes"))
    return {
        n["metadata"]["name"]: n["metadata"]["resourceVersion"]
        for n in listing["items"]
        if n["metadata"]["name"] in wanted
    }


def conditional_patch(rv: str, tag: str) -> dict[str, Any]:
    """About the size of Signal's reservation patch: a label, an annotation, a taint-sized value."""
    detail = json.dumps({"run": "floor", "uid": tag, "index": 0, "request": "floor", "padding": "x" * 64})
    return {"metadata": {"resourceVersion": rv, "annotations": {FLOOR_ANNOTATION: detail}}}


async def api_write_floor(
    cluster: LocalCluster, nodes: Sequence[str], creates: int, namespace: str, concurrency: int = 8, repeats: int = 5
) -> WriteFloor:
    """Time ``len(nodes)`` conditional Node PATCHes plus ``creates`` ConfigMap creates, each way
    ``repeats`` times (alternating); the floor is the median."""
    async with Bare(cluster) as bare:
        runs: dict[str, list[float]] = {"sequential": [], "concurrent": []}
        for mode in ("sequential", "concurrent") * repeats:
            versions = await _versions(bare, nodes)
            tag = uuid.uuid4().hex[:8]
            paths = [resource_path("v1", "nodes", name=n) for n in nodes]
            cm_path = resource_path("v1", "configmaps", namespace)
            made = [f"floor-{tag}-{i}" for i in range(creates)]

            jobs = [
                *(
                    bare.call("PATCH", p, conditional_patch(versions[n], tag), "application/merge-patch+json")
                    for p, n in zip(paths, nodes, strict=True)
                ),
                *(bare.call("POST", cm_path, {"metadata": {"name": m}, "data": {"k": "v"}}) for m in made),
            ]
            began = time.perf_counter()
            if mode == "sequential":
                for job in jobs:
                    await job
            else:
                await _bounded(concurrency, jobs)
            runs[mode].append(time.perf_counter() - began)
            # Undo, outside the clock.
            await _bounded(
                32,
                [
                    *(
                        bare.call(
                            "PATCH",
                            p,
                            {"metadata": {"annotations": {FLOOR_ANNOTATION: None}}},
                            "application/merge-patch+json",
                        )
                        for p in paths
                    ),
                    *(bare.call("DELETE", f"{cm_path}/{m}") for m in made),
                ],
            )
    sequential, concurrent = tuple(runs["sequential"]), tuple(runs["concurrent"])
    return WriteFloor(
        len(nodes),
        creates,
        statistics.median(sequential),
        statistics.median(concurrent),
        concurrency,
        sequential,
        concurrent,
    )


@dataclass(frozen=True)
class FanoutFloor:
    pods: int
    succeeded: float
    """Created -> every Pod Succeeded."""
    gone: float
    """Created -> every Pod Succeeded and then deleted until gone."""
    client: str = "bare httpx in the benchmark's process, polling"
    command: str = "true"
    """What each Pod runs."""

    def describe(self) -> str:
        return (
            f"Pod fan-out floor ({self.pods} Pods `{self.command}` on {self.pods} simulated Nodes, {self.client}): "
            f"created -> all Succeeded {self.succeeded:.2f}s, -> all deleted and gone {self.gone:.2f}s"
        )


async def _wait_pods(bare: Bare, namespace: str, selector: str, done: Any, deadline: float) -> None:
    path = resource_path("v1", "pods", namespace) + f"?labelSelector={selector}"
    while True:
        items = (await bare.call("GET", path))["items"]
        if done(items):
            return
        if time.monotonic() > deadline:
            phases = Counter((p.get("status") or {}).get("phase") for p in items)
            raise TimeoutError(f"Pods {selector} in {namespace} not done within the deadline: {dict(phases)}")
        await asyncio.sleep(POLL)


async def pod_fanout_floor(
    cluster: LocalCluster, nodes: Sequence[str], namespace: str, concurrency: int = 64, timeout: float = 300.0
) -> FanoutFloor:
    """``len(nodes)`` Pods running ``true``, one per Node (``nodeName``), created, run, deleted."""
    tag = uuid.uuid4().hex[:8]
    selector = f"bench.projectsignal.dev/floor={tag}"
    path = resource_path("v1", "pods", namespace)
    bodies = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"floor-{tag}-{i}", "labels": {"bench.projectsignal.dev/floor": tag}},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
            },
        }
        for i, node in enumerate(nodes)
    ]
    async with Bare(cluster) as bare:
        deadline = time.monotonic() + timeout
        began = time.perf_counter()
        await _bounded(concurrency, [bare.call("POST", path, b) for b in bodies])
        await _wait_pods(
            bare,
            namespace,
            selector,
            lambda items: (
                len(items) == len(bodies) and all((p.get("status") or {}).get("phase") == "Succeeded" for p in items)
            ),
            deadline,
        )
        succeeded = time.perf_counter() - began
        await _bounded(concurrency, [bare.call("DELETE", f"{path}/{b['metadata']['name']}") for b in bodies])
        await _wait_pods(bare, namespace, selector, lambda items: not items, deadline)
        gone = time.perf_counter() - began
    return FanoutFloor(len(nodes), succeeded, gone)


STEP_SCRIPT = """
import json, os, ssl, sys, time, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(sa + "/token").read()
context = ssl.create_default_context(cafile=sa + "/ca.crt")
base = "https://%s:%s" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
namespace, node, name = sys.argv[1], sys.argv[2], sys.argv[3]
def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", "Bearer " + token)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, context=context) as answer:
        return json.loads(answer.read() or b"{}")
pods = "/api/v1/namespaces/%s/pods" % namespace
call("POST", pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
     "spec": {"nodeName": node, "restartPolicy": "Never", "tolerations": [{"operator": "Exists"}],
              "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}})
while call("GET", pods + "/" + name).get("status", {}).get("phase") not in ("Succeeded", "Failed"):
    time.sleep(0.05)
print("pod", name, call("GET", pods + "/" + name)["status"]["phase"])
"""


async def _step_rbac(cluster: LocalCluster, bare: Bare, namespace: str, account: str) -> None:
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]},
        {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]},
    ]
    rbac = "rbac.authorization.k8s.io/v1"
    role = {"apiVersion": rbac, "kind": "Role", "metadata": {"name": account, "namespace": namespace}, "rules": rules}
    binding = {
        "apiVersion": rbac,
        "kind": "RoleBinding",
        "metadata": {"name": account, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    for path, body in (
        (resource_path("v1", "serviceaccounts", namespace), {"metadata": {"name": account}}),
        (resource_path(rbac, "roles", namespace), role),
        (resource_path(rbac, "rolebindings", namespace), binding),
    ):
        try:
            await bare.call("POST", path, body)
        except RuntimeError as exc:
            if " 409 " not in str(exc):
                raise
    await rbac_in_effect(cluster.admin, [role, binding])


@dataclass(frozen=True)
class StepFloor:
    runs: tuple[float, ...]

    @property
    def best(self) -> float:
        return min(self.runs)

    def describe(self) -> str:
        shown = ", ".join(f"{r:.2f}" for r in self.runs)
        return (
            "step floor (bare Argo Workflow: one step that starts one Pod `true` on a simulated Node "
            f"and waits for it): created -> Succeeded {shown} s (best {self.best:.2f}s)"
        )


async def step_floor(
    cluster: LocalCluster,
    node: str,
    namespace: str,
    repeats: int = 2,
    timeout: float = 180.0,
    labels: dict[str, str] | None = None,
) -> StepFloor:
    """Workflow created -> Succeeded, ``repeats`` times, for a one-step Workflow whose step Pod
    (Argo's executor, the adapter's image and its Python) creates a Pod on ``node`` and waits."""
    if cluster.argo is None:
        raise RuntimeError("the local cluster runs no Argo workflow-controller: the step floor needs one")
    account = "bench-floor-step"
    runs = []
    async with Bare(cluster) as bare:
        await _step_rbac(cluster, bare, namespace, account)
        for _ in range(repeats):
            tag = uuid.uuid4().hex[:8]
            body = {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Workflow",
                "metadata": {"name": f"floor-{tag}", "labels": dict(labels or {})},
                "spec": {
                    "entrypoint": "step",
                    "serviceAccountName": account,
                    "templates": [
                        {
                            "name": "step",
                            "container": {
                                "image": "projectsignal.dev/adapter:0.1.0",
                                "command": ["python3", "-I", "-c", STEP_SCRIPT, namespace, node, f"floor-{tag}-pod"],
                            },
                        }
                    ],
                },
            }
            path = resource_path("argoproj.io/v1alpha1", "workflows", namespace)
            deadline = time.monotonic() + timeout
            began = time.perf_counter()
            await bare.call("POST", path, body)
            while True:
                workflow = await bare.call("GET", f"{path}/floor-{tag}")
                phase = (workflow.get("status") or {}).get("phase")
                if phase == "Succeeded":
                    break
                if phase in ("Failed", "Error") or time.monotonic() > deadline:
                    message = (workflow.get("status") or {}).get("message")
                    raise RuntimeError(f"step floor Workflow floor-{tag} ended {phase or 'nowhere'}: {message}")
                await asyncio.sleep(POLL)
            runs.append(time.perf_counter() - began)
            await bare.call("DELETE", f"{path}/floor-{tag}")
            await bare.call("DELETE", resource_path("v1", "pods", namespace, f"floor-{tag}-pod"))
    return StepFloor(tuple(runs))
