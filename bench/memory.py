"""Benchmark (issue 47, goal 1): where the controller's memory goes, per cached Node and per
live Run. Prints figures; asserts nothing.

One local cluster of ``--nodes`` simulated Nodes; ``--runs`` groups of ``--group`` requested at
once (before their profile exists, then the profile created, as bench/admission.py's backlog),
admitted by a controller whose Workflows no Argo serves (the Runs stay Running). Then:

* RSS of that controller synced (no Runs) and once every Run is Running;
* ``--history`` finished Runs added (bench/history.py: each with its evidence ConfigMap);
* a fresh controller over them all: RSS synced (what goal 1 states);
* a fresh controller with ``tracemalloc`` (localcluster/memprofile.py): the live Python memory
  by allocating line, and every cache's deep size and bytes per object;
* the stored size of each kind of object (a Node, a Run, its Workflow), as JSON, and how much of
  it is ``managedFields``.

    .venv/bin/python bench/memory.py [--nodes 2000] [--group 64] [--runs 20] [--history 0]
"""

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.admission import NewRuns, request_all, spread
from bench.floors import Bare, rss_mib
from bench.history import add_history
from bench.polling import wait_for
from bench.requestlog import RequestLog
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.hooked import MEMORY_PROFILE_ENV
from localcluster.kube import Obj, resource_path
from shared import keys
from tests.controller_support import ControllerProcess, World, profile_body


def stored_sizes(obj: Obj) -> tuple[int, int]:
    """(bytes as JSON, bytes of its managedFields)."""
    whole = len(json.dumps(obj, separators=(",", ":")))
    managed = len(json.dumps((obj.get("metadata") or {}).get("managedFields") or [], separators=(",", ":")))
    return whole, managed


async def controller(
    cluster: LocalCluster, world: World, workdir: Path, tag: str, *, profile: Path | None = None, first: bool = False
) -> tuple[ControllerProcess, RequestLog, float]:
    """A controller started over what is there; (it, its request log, seconds to synced)."""
    where = workdir / tag
    where.mkdir()
    process = ControllerProcess(
        cluster, world.namespace, where, resync=300, policies=first, workflow_instance_id="bench-held"
    )
    log = RequestLog(where / "requests.tsv")
    env = {"SIGNAL_REQUEST_LOG": str(log.path)}
    if profile is not None:
        env[MEMORY_PROFILE_ENV] = str(profile)
    began = time.time()
    await process.start(**env)

    async def synced() -> bool:
        return "caches synced" in process.logs()

    return process, log, await wait_for("the controller's caches", synced, timeout=600.0) - began


async def settle(pid: int, seconds: float = 3.0) -> float:
    """RSS once it stops growing (the caches' first events handled): its value after ``seconds``
    without a change of more than 1 MiB."""
    last, still = rss_mib(pid), 0.0
    while still < seconds:
        await asyncio.sleep(0.5)
        now = rss_mib(pid)
        still = still + 0.5 if abs(now - last) < 1.0 else 0.0
        last = now
    return last


async def profile_of(process: ControllerProcess, path: Path) -> dict[str, Any]:
    assert process.process is not None
    before = path.read_text().count("\n") if path.exists() else 0
    os.kill(process.process.pid, signal.SIGUSR2)

    async def written() -> bool:
        return path.exists() and path.read_text().count("\n") > before

    await wait_for("the memory profile", written, timeout=300.0)
    snapshot: dict[str, Any] = json.loads(path.read_text().splitlines()[-1])
    return snapshot


def print_profile(snapshot: dict[str, Any], top: int = 20) -> None:
    print(
        f"  traced Python memory {snapshot['traced'] / 2**20:.1f} MiB (RSS under tracemalloc "
        f"{snapshot['rss_kib'] / 1024:.1f} MiB, not the figure stated)"
    )
    for path, cache in snapshot["caches"].items():
        print(
            f"  cache {path:<60} {cache['objects']:7d} objects {cache['bytes'] / 2**20:8.2f} MiB "
            f"({cache['per_object']} B each)"
        )
    print(f"  top {top} allocating lines:")
    for line in snapshot["top"][:top]:
        print(f"    {line['bytes'] / 2**20:8.2f} MiB {line['count']:8d} blocks  {line['where']}")


async def main(nodes: int, group: int, runs: int, history: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="signal-bench-memory-"))
    async with LocalCluster(heartbeat_seconds=24 * 3600) as cluster:
        namespace = "bench"
        await cluster.create_namespace(namespace)
        world = World(cluster, cluster.admin, namespace)
        await world.setup()
        began = time.monotonic()
        fleet = [SimNode(f"gpu-{i:06d}", zone=f"zone-{i % 4}", labels={"pool": "gpu"}) for i in range(nodes)]
        await cluster.add_nodes(fleet, concurrency=64)
        print(f"fleet: {nodes} Nodes created in {time.monotonic() - began:.1f}s")
        for name, pid in cluster.plane.pids().items():
            print(f"  RSS {name:<24} {rss_mib(pid):8.1f} MiB")

        first, log, synced = await controller(cluster, world, workdir, "admitting", first=True)
        assert first.process is not None
        rss_empty = await settle(first.process.pid)
        print(f"controller: synced {synced:.2f}s over {nodes} Nodes, no Runs: RSS {rss_empty:.1f} MiB")
        profile = "bench-memory"
        wanted = spread([n.name for n in fleet], group * runs)
        async with Bare(cluster) as requester:
            await request_all(requester, profile, wanted)
        live = await NewRuns.start(world, log)
        t = time.time()
        await world.add_profile(profile_body(profile, namespace, group))
        await live.running(t, runs, f"{runs} Runs Running")
        rss_live = await settle(first.process.pid)
        print(
            f"  {runs} Runs of {group} admitted in {time.time() - t:.1f}s: RSS {rss_live:.1f} MiB "
            f"({(rss_live - rss_empty) / runs * 1024:.0f} KiB per admitted Run in the admitting process)"
        )
        first.stop()
        if history:
            every = (await cluster.admin.get(resource_path("v1", "nodes")))["items"]
            await add_history(cluster, world, every, history, group)

        cold, _, synced = await controller(cluster, world, workdir, "cold")
        assert cold.process is not None
        rss_cold = await settle(cold.process.pid)
        print(
            f"fresh controller over {nodes} Nodes, {runs} live Runs and {history} finished ones (each with its "
            f"evidence): synced {synced:.2f}s, RSS {rss_cold:.1f} MiB "
            f"({(rss_cold - rss_empty) / (runs + history) * 1024:.0f} KiB per Run over the empty controller)"
        )
        cold.stop()

        traced_path = workdir / "memory.jsonl"
        traced, _, _ = await controller(cluster, world, workdir, "traced", profile=traced_path)
        assert traced.process is not None
        await settle(traced.process.pid)
        print(f"fresh controller with tracemalloc over {nodes} Nodes, {runs} live Runs and {history} finished:")
        print_profile(await profile_of(traced, traced_path))
        traced.stop()

        admin = cluster.admin
        node = await admin.get(resource_path("v1", "nodes", name=fleet[0].name))
        run = (await admin.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace)))["items"][0]
        workflow_path = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, namespace)
        workflows = (await admin.get(workflow_path))["items"]
        print("stored sizes (JSON bytes, of which managedFields):")
        for what, obj in (("Node (simulated)", node), (f"Run ({group} Nodes)", run), ("its Workflow", workflows[0])):
            whole, managed = stored_sizes(obj)
            print(f"  {what:<24} {whole:8d} B  managedFields {managed:7d} B")
    print(f"(work files in {workdir})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--group", type=int, default=64)
    parser.add_argument("--runs", type=int, default=20, help="groups admitted (live Runs)")
    parser.add_argument("--history", type=int, default=0, help="finished Runs (with evidence) added after them")
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.group, args.runs, args.history))
