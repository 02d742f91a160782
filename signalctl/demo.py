"""``signalctl demo``: the local demo. Starts the local control plane, installs the CRDs,
creates a simulated GPU fleet, prints it, and keeps running until Ctrl-C.

Later issues grow this into a full certification end to end."""

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from pathlib import Path

from localcluster.binaries import kplane_binary
from localcluster.cluster import LocalCluster
from localcluster.controlplane import ControlPlane
from localcluster.fleet import standard_fleet
from localcluster.kube import resource_path
from signalctl.tables import NODE_HEADERS, node_rows, render


def _say(message: str) -> None:
    print(f"==> {message}", flush=True)


async def run_demo(nodes: int, workdir: Path | None, exit_after: float | None) -> int:
    began = time.monotonic()
    _say("locating the local control plane binary (built once, then cached)")
    binary = kplane_binary(show_progress=True)
    plane = ControlPlane(workdir=workdir, keep_workdir=True, binary=binary) if workdir else ControlPlane(binary=binary)
    cluster = LocalCluster(plane=plane)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await cluster.start(progress=_say)
        _say(f"creating {nodes} simulated GPU Nodes")
        last = [0.0]

        def progress(done: int) -> None:
            if done == nodes or time.monotonic() - last[0] > 1:
                last[0] = time.monotonic()
                print(f"    {done}/{nodes} Nodes", flush=True)

        await cluster.add_nodes(standard_fleet(nodes), progress=progress)
        listing = await cluster.admin.get(resource_path("v1", "nodes"))
        print()
        print(render(NODE_HEADERS, node_rows(listing["items"])))
        print()
        kubeconfig = plane.admin_kubeconfig
        _say(f"local cluster ready in {time.monotonic() - began:.1f}s")
        print(f"    kubeconfig: {kubeconfig}")
        print(f"    try:        {binary} kubectl --kubeconfig {kubeconfig} get nodes")
        print("    press Ctrl-C to stop and clean up", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=exit_after)
        _say("stopping")
    finally:
        await cluster.stop()
    _say("stopped cleanly")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="signalctl demo", description=__doc__)
    parser.add_argument("--nodes", type=int, default=8, help="simulated GPU Nodes to create (default 8)")
    parser.add_argument("--workdir", type=Path, help="keep the control plane's files here")
    parser.add_argument("--exit-after", type=float, help="stop after this many seconds instead of waiting for Ctrl-C")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(run_demo(args.nodes, args.workdir, args.exit_after))
    except Exception as exc:
        print(f"signalctl demo failed: {exc}", file=sys.stderr)
        return 1
