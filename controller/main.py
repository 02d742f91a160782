"""``signal-controller``: connect, elect a leader, fence the ledger, reconcile until told to stop."""

import argparse
import asyncio
import contextlib
import os
import signal
import socket

from controller import metrics
from controller.leader import LeaderElector
from controller.ledger import LedgerError
from controller.loop import run_loop
from controller.state import Context, NotLeader, log
from kubeio.client import Kube
from kubeio.logs import configure_logging


async def serve(args: argparse.Namespace) -> int:
    kube = await Kube.connect(kubeconfig=args.kubeconfig, field_manager="signal-controller")
    ctx = Context(
        kube,
        args.namespace,
        args.identity,
        profile_selector=args.profile_selector,
        workflow_instance_id=args.workflow_instance_id,
    )
    stop, lost = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    elector = LeaderElector(kube, args.namespace, args.identity)
    metrics.serve(args.metrics_port)
    try:
        await elector.acquire()
        keeper = asyncio.create_task(elector.keep(lost))
        ctx.start_caches()
        await ctx.wait_synced()
        log.info("caches synced", nodes=len(ctx.nodes.items), runs=len(ctx.runs.items))
        work = asyncio.create_task(run_loop(ctx, stop, resync=args.resync))
        done, _ = await asyncio.wait({work, asyncio.create_task(lost.wait())}, return_when=asyncio.FIRST_COMPLETED)
        if work not in done:
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            log.error("stopping: leadership lost")
            return 1
        await work
        keeper.cancel()
        return 0
    except NotLeader as exc:
        log.error("stopping: fenced out by another controller", error=str(exc))
        return 1
    except LedgerError as exc:
        log.error("stopping: the admission ledger is malformed; inspect it before restarting", error=str(exc))
        return 2
    finally:
        await ctx.stop_caches()
        await kube.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="signal-controller", description="Project Signal controller")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    parser.add_argument("--namespace", default=os.environ.get("SIGNAL_NAMESPACE", "signal-system"))
    parser.add_argument("--identity", default=os.environ.get("POD_NAME", socket.gethostname()))
    parser.add_argument("--profile-selector", default="", help="serve only profiles matching this label selector")
    parser.add_argument("--resync", type=float, default=30.0, help="seconds between full passes and recovery")
    parser.add_argument("--log-format", choices=["json", "console"], default="json")
    parser.add_argument(
        "--workflow-instance-id", default="", help="Argo instanceID to label Workflows with (when Argo uses one)"
    )
    parser.add_argument("--metrics-port", type=int, default=8080, help="serve Prometheus /metrics here (0: off)")
    args = parser.parse_args(argv)
    configure_logging(args.log_format)
    return asyncio.run(serve(args))


if __name__ == "__main__":
    raise SystemExit(main())
