"""The reconcile loop: caches in, one level-based pass over Runs and profiles, repeated on
every change and at least every ``resync`` seconds; recovery at start and on every resync."""

import asyncio
import contextlib
import time

from controller import metrics
from controller.ledger import LedgerError
from controller.lifecycle import enforce_retention, recur
from controller.profiles import reconcile_profile
from controller.recovery import recover
from controller.runs import reconcile_run
from controller.state import Context, NotLeader, log
from kubeio.errors import ApiError, Conflict

BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)


async def one_pass(ctx: Context, *, resync: bool) -> None:
    for run in sorted(ctx.runs.items.values(), key=lambda r: r["metadata"]["name"]):
        await reconcile_run(ctx, run)
    for profile in sorted(ctx.profiles.items.values(), key=lambda p: p["metadata"]["name"]):
        await reconcile_profile(ctx, profile, resync=resync)
        if resync:
            await recur(ctx, profile)
    await enforce_retention(ctx)
    uids = {r["metadata"]["uid"] for r in ctx.runs.items.values()}
    reserved = sum(1 for n in ctx.nodes.items.values() if n.reservation and n.reservation.run_uid in uids)
    metrics.refresh(list(ctx.runs.items.values()), reserved)


async def _wait_for_change(ctx: Context, timeout: float) -> None:
    informers = (ctx.nodes, ctx.profiles, ctx.runs, ctx.workflows)
    waiters = [asyncio.create_task(i.changed.wait()) for i in informers]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter


async def run_loop(ctx: Context, stop: asyncio.Event, *, resync: float = 30.0, settle: float = 0.25) -> None:
    """Reconcile until ``stop`` is set. Raises NotLeader when fenced out, LedgerError on a
    malformed ledger (fail closed: the process exits and says why)."""
    await ctx.take_fence()
    await recover(ctx)
    last_resync = time.monotonic()
    failures = 0
    while not stop.is_set():
        for informer in (ctx.nodes, ctx.profiles, ctx.runs, ctx.workflows):
            informer.changed.clear()
        due = time.monotonic() - last_resync >= resync
        try:
            await one_pass(ctx, resync=due)
            if due:
                await recover(ctx)
                last_resync = time.monotonic()
            failures = 0
        except (NotLeader, LedgerError):
            raise
        except Conflict as exc:
            log.info("conflict; retrying", error=str(exc)[:300])
            continue
        except ApiError as exc:
            delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
            failures += 1
            log.warning("reconcile pass failed", error=str(exc)[:500], retry_in=delay)
            await asyncio.sleep(delay)
            continue
        if stop.is_set():
            break
        await _wait_for_change(ctx, max(0.0, resync - (time.monotonic() - last_resync)))
        await asyncio.sleep(settle)
