"""``signal-controller``: connect, prove its admission policies are in force (controller/process/policy.py;
exit 4 when one is not), elect a leader, fence the ledger, reconcile until told to stop."""

import argparse
import asyncio
import contextlib
import os
import signal
import socket

from controller.process.leader import LeaderElector, LeaseLost
from controller.process.loop import run_loop
from controller.process.policy import require_policies
from controller.process.probes import Probes
from controller.reconcile import metrics
from controller.reconcile.state import Context, NotLeader, log
from controller.rules.sources import DEFAULT_SOURCE_NAMESPACES, parse_source_namespaces
from kubeio.admission import PolicyNotInForce
from kubeio.client import Kube
from kubeio.logs import add_log_level_flag, configure_logging
from shared.policies import EXIT_POLICY_NOT_IN_FORCE


async def serve(args: argparse.Namespace) -> int:
    kube = await Kube.connect(kubeconfig=args.kubeconfig, field_manager="signal-controller")
    try:
        await require_policies(kube, args.namespace, wait_seconds=args.policy_wait_seconds)
    except PolicyNotInForce as exc:
        log.error("refusing to run: an admission policy is not in force", reason=str(exc))
        await kube.close()
        return EXIT_POLICY_NOT_IN_FORCE
    # The Lease has a connection of its own: renewals never queue behind reconcile traffic.
    lease_kube = await Kube.connect(kubeconfig=args.kubeconfig, field_manager="signal-controller", timeout=5.0)
    lease_kube.crash_points = False
    ctx = Context(
        kube,
        args.namespace,
        args.identity,
        profile_selector=args.profile_selector,
        workflow_instance_id=args.workflow_instance_id,
        source_namespaces=parse_source_namespaces(args.source_namespaces),
        workflow_template_digest=args.workflow_template_digest,
    )
    if not args.workflow_template_digest:
        log.warning(
            "no --workflow-template-digest: the signal-adapter WorkflowTemplate is not checked before each "
            "Workflow (docs/operator-guide.md says how to set it)"
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    elector = LeaderElector(lease_kube, args.namespace, args.identity)
    kube.write_guard = elector.guard
    kube.observe = lease_kube.observe = metrics.observe_request
    probes = Probes()
    probes.leading = lambda: elector.leadership.may_write(elector.clock())
    await probes.start(args.metrics_port)
    try:
        code = await lead(ctx, elector, probes, stop, resync=args.resync)
        if stop.is_set():
            await elector.release()
        return code
    except LeaseLost as exc:  # pragma: no cover - lead() handles it; kept fail-closed
        log.error("stopping: leadership lost", error=str(exc))
        return 1
    except NotLeader as exc:
        log.error("stopping: fenced out by another controller", error=str(exc))
        return 1
    finally:
        await probes.stop()
        await ctx.stop_caches()
        await kube.close()
        await lease_kube.close()


async def lead(ctx: Context, elector: LeaderElector, probes: Probes, stop: asyncio.Event, *, resync: float) -> int:
    """Lead, term after term, until told to stop. A term whose Lease lapsed (the API server
    could not be reached) or was taken ends without ending the process: writes stop at once
    (the guard refuses them), the reconcile stops, and the replica stands by to lead again.
    A renewal task that dies (a bug) ends the process, as does fencing (an unparsable ledger
    stops admission only)."""
    started = False
    while not stop.is_set():
        if elector.leadership.lost.is_set():
            elector.new_term()
        acquiring = asyncio.create_task(elector.acquire())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not acquiring.done():
            acquiring.cancel()
            return 0
        if not started:
            ctx.start_caches()
            probes.informers = {
                "nodes": ctx.nodes,
                "profiles": ctx.profiles,
                "runs": ctx.runs,
                "workflows": ctx.workflows,
            }
            started = True
        outcome = await term(ctx, elector, stop, resync=resync)
        if outcome is not None:
            return outcome
    return 0


async def term(ctx: Context, elector: LeaderElector, stop: asyncio.Event, *, resync: float) -> int | None:
    """One term of leadership: reconcile while the Lease is renewed. Returns an exit code to
    end the process with, or None to stand by and lead again."""
    keeper = asyncio.create_task(elector.keep(), name="lease renewal")
    work = asyncio.create_task(_reconcile(ctx, stop, resync), name="reconcile")
    try:
        await asyncio.wait({work, keeper}, return_when=asyncio.FIRST_COMPLETED)
        if work.done() and not work.cancelled():
            failure = work.exception()
            if failure is None:
                return 0
            if not isinstance(failure, LeaseLost):
                raise failure
        if keeper.done() and not keeper.cancelled() and keeper.exception() is not None:
            log.error("stopping: the lease renewal task died", error=str(keeper.exception()))
            return 1
        log.warning("leadership lost; standing by to lead again", reason=elector.leadership.reason)
        return None
    finally:
        for task in (work, keeper):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


async def _reconcile(ctx: Context, stop: asyncio.Event, resync: float) -> None:
    # Caches that never sync (a CRD not installed, a list refused) must not outlast a stop.
    synced, stopping = asyncio.create_task(ctx.wait_synced()), asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({synced, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (synced, stopping):
            task.cancel()
    if not synced.done():
        return
    synced.result()
    log.info("caches synced", nodes=len(ctx.nodes.items), runs=len(ctx.runs.items))
    await run_loop(ctx, stop, resync=resync)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="signal-controller", description="Project Signal controller")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    parser.add_argument("--namespace", default=os.environ.get("SIGNAL_NAMESPACE", "signal-system"))
    parser.add_argument("--identity", default=os.environ.get("POD_NAME", socket.gethostname()))
    parser.add_argument("--profile-selector", default="", help="serve only profiles matching this label selector")
    parser.add_argument("--resync", type=float, default=30.0, help="seconds between full passes and recovery")
    parser.add_argument("--log-format", choices=["json", "console"], default="json")
    add_log_level_flag(parser)
    parser.add_argument(
        "--workflow-instance-id", default="", help="Argo instanceID to label Workflows with (when Argo uses one)"
    )
    parser.add_argument(
        "--source-namespaces",
        default=os.environ.get("SIGNAL_SOURCE_NAMESPACES", ",".join(DEFAULT_SOURCE_NAMESPACES)),
        help="comma-separated namespaces (besides its own) that profile sources may come from; '*': any",
    )
    parser.add_argument(
        "--workflow-template-digest",
        default=os.environ.get("SIGNAL_WORKFLOW_TEMPLATE_DIGEST", ""),
        help="sha256:... the signal-adapter WorkflowTemplate must have before a Run's Workflow is submitted "
        "(python -m adapter.workflow_template --digest prints it); empty: not checked",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=8080, help="serve /metrics, /healthz and /readyz here (0: off)"
    )
    parser.add_argument(
        "--policy-wait-seconds",
        type=float,
        default=float(os.environ.get("SIGNAL_POLICY_WAIT_SECONDS", "30")),
        help="how long to wait for the admission policies to be in force before refusing to run",
    )
    args = parser.parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    return asyncio.run(serve(args))


if __name__ == "__main__":
    raise SystemExit(main())
