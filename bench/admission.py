"""Benchmark (issue 3): admission of 64 out of 10,000 simulated Nodes on the local control
plane, by the real controller process running as its ServiceAccount.

Prints: wall time from the request (labelling the 64 Nodes) to all 64 reserved; the
controller's API requests by verb after its initial sync; the pure selection time; the
controller's resident memory with every Node watched. Asserts nothing.

    .venv/bin/python bench/admission.py [--nodes 10000] [--group 64]
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.nodes import node_view
from controller.selection import select_participants
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import resource_path
from shared import keys
from shared.profile import CertificationProfile
from tests.controller_support import ControllerProcess, World, profile_body


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main(total: int, group: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="signal-bench-"))
    async with LocalCluster(heartbeat_seconds=300) as cluster:
        admin = cluster.admin
        namespace = "bench"
        await cluster.create_namespace(namespace)
        world = World(cluster, admin, namespace)
        await world.setup()
        began = time.monotonic()
        nodes = [SimNode(f"gpu-{i:05d}", zone=f"zone-{i % 4}", labels={"pool": "gpu"}) for i in range(total)]
        await cluster.add_nodes(nodes, concurrency=64)
        print(f"fleet: {total} Nodes created in {time.monotonic() - began:.1f}s")
        profile = "bench"
        await world.add_profile(profile_body(profile, namespace, group))
        log = workdir / "requests.tsv"
        controller = ControllerProcess(cluster, namespace, workdir, resync=300)
        await controller.start(SIGNAL_REQUEST_LOG=str(log))
        while not log.exists() or "caches synced" not in controller.logs():
            await asyncio.sleep(0.2)
        await asyncio.sleep(3)
        assert controller.process is not None
        rss_idle = rss_mib(controller.process.pid)
        offset = len(log.read_text().splitlines())
        chosen = [n.name for n in nodes[:: total // group][:group]]
        t0 = time.monotonic()
        await asyncio.gather(*(world.request(profile, [name]) for name in chosen))
        labelled = time.monotonic() - t0
        runs_path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace)
        while True:
            runs = (await admin.get(runs_path))["items"]
            if runs and runs[0].get("status", {}).get("phase") == "Running":
                break
            await asyncio.sleep(0.05)
        reserved = time.monotonic() - t0
        await asyncio.sleep(2)
        lines = [line.split("\t") for line in log.read_text().splitlines()[offset:]]
        verbs = Counter(verb for _, verb, _ in lines)
        writes = sum(verbs[v] for v in ("POST", "PUT", "PATCH", "DELETE"))
        print(
            f"admission of {group} of {total}: labelling took {labelled:.2f}s; request -> all {group} reserved "
            f"and Workflow submitted: {reserved:.2f}s"
        )
        print(
            f"controller API requests after initial sync: {dict(sorted(verbs.items()))}; writes: {writes} "
            f"(goal <= {group + 6}); LIST: {verbs['LIST']}"
        )
        print(
            f"controller RSS with {total} Nodes watched: idle {rss_idle:.1f} MiB, "
            f"after admission {rss_mib(controller.process.pid):.1f} MiB"
        )
        controller.stop()
        listing = await admin.get(resource_path("v1", "nodes"))
        views = [node_view(n) for n in listing["items"]]
        body = profile_body("bench2", namespace, group)
        body["metadata"]["uid"] = "x"
        model = CertificationProfile.model_validate(body)
        relabelled = [
            node_view(
                {
                    **n,
                    "metadata": {
                        **n["metadata"],
                        "labels": {**n["metadata"].get("labels", {}), keys.CERTIFY_LABEL: "bench2"},
                    },
                }
            )
            for n in listing["items"]
        ]
        timings = []
        for _ in range(5):
            t = time.perf_counter()
            select_participants(relabelled, model, set(), [])
            timings.append(time.perf_counter() - t)
        print(
            f"pure selection over {len(views)} Nodes (all requested): median {statistics.median(timings) * 1000:.1f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--group", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.group))
