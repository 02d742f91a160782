"""Benchmark: warm start of the local control plane, creation of a simulated fleet, and
the resident memory of every component. Prints figures; asserts nothing.

    .venv/bin/python bench/localcluster_start.py [--nodes 10000]
"""

import argparse
import asyncio
import os
import time
from pathlib import Path

from localcluster.cluster import LocalCluster
from localcluster.fleet import standard_fleet


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main(nodes: int) -> None:
    began = time.monotonic()
    async with LocalCluster(heartbeat_seconds=300) as cluster:
        print(f"warm start (api, crds, controllers, GC canary): {time.monotonic() - began:.1f}s")
        print("  phases:", {k: round(v, 2) for k, v in cluster.timings.items()})
        t = time.monotonic()
        await cluster.add_nodes(standard_fleet(nodes), concurrency=64)
        elapsed = time.monotonic() - t
        print(f"created {nodes} simulated Nodes in {elapsed:.1f}s ({nodes / elapsed:.0f}/s)")
        for name, pid in cluster.plane.pids().items():
            print(f"  RSS {name:<24} {rss_mib(pid):7.1f} MiB")
        print(f"  RSS {'python (test process)':<24} {rss_mib(os.getpid()):7.1f} MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10000)
    asyncio.run(main(parser.parse_args().nodes))
