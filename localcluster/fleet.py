"""Simulated GPU Nodes: ordinary Node objects with GPU and RDMA capacity, zone and rack
labels, and a Ready condition kept fresh by a heartbeat. Created concurrently so that
fleets of 10,000 take seconds, not minutes."""

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import structlog

from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys

log = structlog.get_logger("localcluster.fleet")

SIMULATED_LABEL = "projectsignal.dev/simulated"
RDMA_RESOURCE = "rdma/ib"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class SimNode:
    """The shape of one simulated GPU Node."""

    name: str
    zone: str = "zone-a"
    rack: str = "rack-1"
    gpus: int = 8
    rdma: int = 8
    cpu: str = "96"
    memory: str = "1Ti"
    ready: bool = True
    labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False

    def manifest(self) -> Obj:
        resources = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": "110",
            "ephemeral-storage": "1Ti",
            keys.GPU_RESOURCE: str(self.gpus),
            RDMA_RESOURCE: str(self.rdma),
        }
        now = _now()
        spec: dict[str, Any] = {"unschedulable": True} if self.unschedulable else {}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    keys.ZONE_LABEL: self.zone,
                    keys.RACK_LABEL: self.rack,
                    "nvidia.com/gpu.product": "SIM-GPU-80GB",
                    SIMULATED_LABEL: "true",
                    **self.labels,
                },
            },
            "spec": spec,
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [ready_condition(self.ready, now)],
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": self.name},
                ],
                "nodeInfo": {
                    "kubeletVersion": "v1.36.3-signal-process-kubelet",
                    "containerRuntimeVersion": "process://local",
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "osImage": "simulated",
                    "kernelVersion": "",
                    "kubeProxyVersion": "",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
            },
        }


def ready_condition(ready: bool, now: str) -> Obj:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "simulated process kubelet is posting ready status" if ready else "simulated: not ready",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def standard_fleet(count: int, prefix: str = "gpu", zones: int = 3, racks_per_zone: int = 4) -> list[SimNode]:
    """``count`` Nodes spread round-robin over zones and racks, named ``<prefix>-00001``..."""
    width = max(3, len(str(count)))
    nodes = []
    for i in range(count):
        zone = i % zones
        rack = (i // zones) % racks_per_zone
        nodes.append(
            SimNode(
                f"{prefix}-{i + 1:0{width}d}",
                zone=f"zone-{chr(97 + zone)}",
                rack=f"rack-{zone}{rack}",
            )
        )
    return nodes


async def create_nodes(
    kube: KubeClient,
    nodes: Iterable[SimNode],
    *,
    concurrency: int = 32,
    progress: Callable[[int], None] | None = None,
) -> list[Obj]:
    """Create every Node (with its status) concurrently; returns the created objects in the
    order of ``nodes`` (not in the order the creations finished: callers index them)."""
    semaphore = asyncio.Semaphore(concurrency)
    done = 0
    path = resource_path("v1", "nodes")

    async def one(node: SimNode) -> Obj:
        nonlocal done
        async with semaphore:
            manifest = node.manifest()
            obj = await kube.create(path, manifest)
            if not obj.get("status", {}).get("allocatable"):
                obj = await kube.merge_patch(f"{path}/{node.name}/status", {"status": manifest["status"]})
            done += 1
            if progress:
                progress(done)
            return obj

    return list(await asyncio.gather(*(one(n) for n in nodes)))


async def set_ready(kube: KubeClient, name: str, ready: bool) -> Obj:
    patch = {"status": {"conditions": [ready_condition(ready, _now())]}}
    return await kube.request(
        "PATCH",
        resource_path("v1", "nodes", name=name, subresource="status"),
        body=patch,
        content_type="application/strategic-merge-patch+json",
    )


async def heartbeat(
    kube: KubeClient, names: Callable[[], Iterable[str]], interval: float = 10.0, concurrency: int = 16
) -> None:
    """Keep the Ready condition of every Node in ``names()`` fresh until cancelled: one LIST
    per cycle, then a status patch per Node. Only the heartbeat time changes; a Node a test
    marked not Ready stays not Ready. Real kubelets report status every few minutes, so large
    fleets should use a long interval."""
    semaphore = asyncio.Semaphore(concurrency)

    async def beat(node: Obj) -> None:
        conditions = node.get("status", {}).get("conditions", [])
        ready = next((c for c in conditions if c.get("type") == "Ready"), None)
        if ready is None:
            return
        path = resource_path("v1", "nodes", name=node["metadata"]["name"], subresource="status")
        # The time alone (a strategic merge by condition type keeps the rest as stored): the
        # status read by this cycle's listing could be older than a test's set_ready.
        patch = {"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": _now()}]}}
        async with semaphore:
            try:
                await kube.request("PATCH", path, body=patch, content_type="application/strategic-merge-patch+json")
            except ApiError as exc:
                if exc.status != 404:
                    raise

    while True:
        await asyncio.sleep(interval)
        wanted = set(names())
        if not wanted:
            continue
        try:
            listing = await kube.get(resource_path("v1", "nodes"), labelSelector=f"{SIMULATED_LABEL}=true")
            await asyncio.gather(*(beat(n) for n in listing["items"] if n["metadata"]["name"] in wanted))
        except (ApiError, httpx.TransportError) as exc:
            # A dropped keep-alive connection or a busy API server costs one beat, not the
            # heartbeat: a dead heartbeat would let every simulated Node go stale.
            log.warning("node heartbeat failed; retrying next interval", error=repr(exc), interval_s=interval)
