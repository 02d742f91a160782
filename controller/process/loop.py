"""The reconcile loop: one work queue of object keys (a Run, a profile, the Node groups),
fed by the caches' events with only the keys they affect and by a periodic resync with all
of them; each key reconciled on its own, so one bad object or one dropped connection cannot
stop the work for the others.

Isolation, per key:

* a Conflict requeues promptly after a short, growing delay (never a hot loop);
* any other error is logged once per streak (object and reason), counted in
  ``signal_reconcile_errors_total`` and retried with per-key exponential backoff and jitter,
  honouring the server's Retry-After; a Run's streak is also reported on the Run
  (``ReconcileFailing``) and in Warning Events at its 1st, 2nd, 4th... failure
  (controller/reconcile/failing.py);
* a structurally bad object (``TerminalError``, or an error that is not the API's that keeps
  recurring) is ended with a condition and an Event: a Run ``Inconclusive``, a profile
  ``Ready=False``; it is not retried until it changes;
* a CancelledError from inside one reconcile (not the loop's own cancellation) is a failure
  of that object like any other;
* only fencing (``NotLeader``) stops the process (fail closed); an unparsable admission
  ledger (``LedgerError``) stops admission only: a key that needs the ledger is retried with
  backoff, never ended for it, and every other key goes on (issue 42 M-B).

Keys are processed one at a time: admission relies on it (recovery may drop a ledger group
whose Run does not exist yet only because no admission is between those two writes)."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from time import monotonic
from typing import Any

from controller.reconcile import metrics
from controller.reconcile.ending import end_profile, end_run
from controller.reconcile.expiry import expire_orphaned
from controller.reconcile.failing import CONDITION as FAILING
from controller.reconcile.failing import announce, recovered_conditions, report_failure
from controller.reconcile.lifecycle import enforce_retention, recur, warn_legacy_requests
from controller.reconcile.profiles import reconcile_profile
from controller.reconcile.reassert import reassert_projections
from controller.reconcile.recovery import collect_segments, each_pass, recover
from controller.reconcile.runs import reconcile_run
from controller.reconcile.state import Context, NotLeader, log
from controller.rules import affected
from controller.rules.ledger import LedgerError
from controller.rules.nodes import NodeView
from controller.rules.queuekeys import GROUPS, Key, Kind
from controller.rules.requeue import STALE_RECHECK, run_requeue, stale_after_own_write
from controller.rules.runview import RunView, run_view
from controller.rules.workqueue import (
    Backoff,
    Done,
    RequeueAfter,
    Result,
    Terminal,
    TerminalError,
    WorkQueue,
)
from kubeio.client import Obj
from kubeio.errors import ApiError, Conflict, NotFound

FATAL = (NotLeader,)
MAX_FAILURES = 5
"""Consecutive failures (other than the API's) after which an object is ended."""
CONFLICT_BACKOFF = Backoff(base=0.1, cap=5.0, jitter=0.5)


def _version(obj: Any) -> str:
    if isinstance(obj, NodeView | RunView):
        return obj.resource_version
    if isinstance(obj, dict):
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return ""


GROUPS_COALESCE_SECONDS = 1.0
"""How long a change waits for the fleet-wide passes (orphan recovery, retention: the GROUPS
key), which scan every cached Node and Run: each admission reserves a group of Nodes and each
reservation asks for a pass (at 30,000 Nodes and 300 groups requested at once, a pass per
change took a sixth of the controller's time, growing with the fleet). Start and resync still
queue it at once."""


class Controller:
    """The queue, the handlers that feed it, and the per-key reconcile with its isolation."""

    def __init__(self, ctx: Context, *, resync: float = 30.0, queue: WorkQueue[Key] | None = None) -> None:
        self.ctx = ctx
        self.resync = resync
        self.queue: WorkQueue[Key] = WorkQueue() if queue is None else queue
        self.ended: dict[Key, str] = {}
        """Objects ended as structurally bad, with the resourceVersion they were left at."""
        self._resync_due: set[Key] = set()
        self._last_error: dict[Key, str] = {}
        self._conflicts: dict[Key, int] = {}
        ctx.runs.handlers.append(self._on_run)
        ctx.profiles.handlers.append(self._on_profile)
        ctx.nodes.handlers.append(self._on_node)
        ctx.workflows.handlers.append(self._on_workflow)
        self.queue.on_wait = lambda key, waited: metrics.QUEUE_SECONDS.labels(key.kind.value).observe(waited)
        self.queue.on_retry = lambda key: metrics.QUEUE_RETRIES.labels(key.kind.value).inc()

    # -- what a change affects (controller/rules/affected.py) -----------------------------

    def _on_run(self, key: str, old: RunView | None, new: RunView | None) -> None:
        self._add(affected.by_run(key, old, new))

    def _on_profile(self, key: str, old: Obj | None, new: Obj | None) -> None:
        self._add(affected.by_profile(key, old, new, self.ctx.runs.items.values()))

    def _on_node(self, key: str, old: NodeView | None, new: NodeView | None) -> None:
        self._add(affected.by_node(old, new, namespace=self.ctx.namespace, profiles=self.ctx.profiles.items))

    def _on_workflow(self, key: str, old: Obj | None, new: Obj | None) -> None:
        self._add(affected.by_workflow(old, new))

    def _add(self, keys: Iterable[Key]) -> None:
        for key in keys:
            if key == GROUPS:  # a burst of changes asks for one fleet-wide pass, not one each
                self.queue.add_after(GROUPS, GROUPS_COALESCE_SECONDS)
            else:
                self.queue.add(key)

    def close(self) -> None:
        """Stop listening to the caches (the caches outlive a term of leadership)."""
        self.queue.shutdown()
        for informer, handler in (
            (self.ctx.runs, self._on_run),
            (self.ctx.profiles, self._on_profile),
            (self.ctx.nodes, self._on_node),
            (self.ctx.workflows, self._on_workflow),
        ):
            with contextlib.suppress(ValueError):
                informer.handlers.remove(handler)  # type: ignore[arg-type]

    def enqueue_all(self, *, resync: bool) -> None:
        every = [GROUPS]
        every += [Key(Kind.RUN, name) for name in sorted(r.name for r in self.ctx.runs.items.values())]
        every += [Key(Kind.PROFILE, p["metadata"]["name"]) for p in sorted_objects(self.ctx.profiles.items.values())]
        for key in every:
            if resync:
                self._resync_due.add(key)
            self.queue.add(key)

    # -- reconciling one key -------------------------------------------------------------

    def _current(self, key: Key) -> RunView | Obj | None:
        if key.kind is Kind.RUN:
            return self.ctx.runs.items.get(f"{self.ctx.namespace}/{key.name}")
        if key.kind is Kind.PROFILE:
            return self.ctx.profiles.items.get(f"/{key.name}")
        return None

    async def reconcile(self, key: Key, *, resync: bool) -> Result:
        if key.kind is Kind.GROUPS:
            passes: list[Callable[[Context], Awaitable[object]]] = [recover, enforce_retention]
            if resync:  # Node projections from the profiles' records (issue 12; controller/reconcile/reassert.py)
                passes += [reassert_projections, expire_orphaned, warn_legacy_requests, collect_segments]
            await each_pass(self.ctx, passes)
            return Done()
        obj = self._current(key)
        if obj is None:
            return Done()
        ended = self.ended.get(key)
        if ended is not None:
            if ended == _version(obj):
                return Done()
            del self.ended[key]
        if isinstance(obj, RunView):
            if obj.problem is not None:
                raise TerminalError("MalformedRun", f"Run {obj.namespace}/{obj.name} cannot be read: {obj.problem}")
            if stale_after_own_write(obj, self.ctx.written.get(key.name), monotonic()):
                return RequeueAfter(STALE_RECHECK, progress=False)
            self.ctx.written.pop(key.name, None)
            # One status write per pass: ReconcileFailing=False rides on the pass's own write
            # (from this view's conditions); written alone only when the pass wrote nothing.
            cleared = recovered_conditions(obj.conditions, obj.generation, self.ctx.clock())
            if cleared is not None and not self.queue.failures(key):
                obj = run_view({**obj.raw, "status": {**(obj.raw.get("status") or {}), "conditions": cleared}})
            before = self.ctx.written.get(key.name)
            await reconcile_run(self.ctx, obj)
            if cleared is not None and self.ctx.written.get(key.name) is before:
                with contextlib.suppress(NotFound):
                    await self.ctx.patch_run_status(obj.raw, {"conditions": cleared})
            return run_requeue(obj, self.ctx.clock())
        held = await reconcile_profile(self.ctx, obj, resync=resync)
        if resync:
            await recur(self.ctx, obj)
        return Done() if held is None else RequeueAfter(held)

    async def process(self, key: Key) -> None:
        """Reconcile one key and decide when it is looked at again. Raises only FATAL."""
        resync = key in self._resync_due
        self._resync_due.discard(key)
        bound = log.bind(object=str(key), namespace=self.ctx.namespace)
        result: Result | None
        try:
            result = await self.reconcile(key, resync=resync)
        except FATAL:
            raise
        except TerminalError as exc:
            result = await self.end(key, exc.reason, exc.message)
        except LedgerError:
            # Admission only (ctx.ledger_problem, the metric and the profile's condition say
            # why): retried with backoff until the ledger is repaired, never ended for it.
            metrics.RECONCILE_ERRORS.labels(key.kind.value, "LedgerError").inc()
            self.queue.add_rate_limited(key)
            return
        except Conflict as exc:
            count = self._conflicts.get(key, 0) + 1
            self._conflicts[key] = count
            delay = CONFLICT_BACKOFF.delay(count, self.queue.rand())
            metrics.RECONCILE_ERRORS.labels(key.kind.value, "Conflict").inc()
            metrics.QUEUE_RETRIES.labels(key.kind.value).inc()
            bound.info("conflict; requeued", error=str(exc)[:300], retry_in=round(delay, 3))
            self.queue.add_after(key, delay)
            return
        except (Exception, asyncio.CancelledError) as exc:  # isolation: this object's failure only
            _reraise_own_cancellation(exc)
            result = await self._failed(key, exc, bound)
            if result is None:
                return
        finally:
            self.queue.done(key)
        self._conflicts.pop(key, None)
        if result is None:
            return
        if not isinstance(result, Terminal) and not (isinstance(result, RequeueAfter) and not result.progress):
            self.queue.forget(key)
            if key in self._last_error:
                bound.info("reconciled again after failures")
                del self._last_error[key]
                current = self._current(key)
                if isinstance(current, RunView) and current.is_true(FAILING):
                    self.queue.add(key)  # its next pass turns ReconcileFailing False
        match result:
            case Done():
                metrics.RECONCILES.labels(key.kind.value, "done").inc()
            case RequeueAfter(seconds=seconds):
                metrics.RECONCILES.labels(key.kind.value, "requeue").inc()
                self.queue.add_after(key, seconds)
            case Terminal():
                metrics.RECONCILES.labels(key.kind.value, "terminal").inc()

    async def _failed(self, key: Key, exc: BaseException, bound: Any) -> Result | None:
        """Count and log a failure; back off, or end the object when it keeps failing in a
        way the API server is not the cause of. None: requeued with backoff."""
        error = type(exc).__name__
        reason = f"{error}: {exc}"[:500]
        metrics.RECONCILE_ERRORS.labels(key.kind.value, error).inc()
        metrics.RECONCILES.labels(key.kind.value, "error").inc()
        failures = self.queue.failures(key) + 1
        if self._last_error.get(key) != reason:
            self._last_error[key] = reason
            if isinstance(exc, ApiError):
                bound.warning("reconcile failed; retrying with backoff", error=reason, failures=failures)
            else:
                bound.warning("reconcile failed", error=reason, failures=failures, exc_info=exc)
        if key.kind is Kind.RUN and announce(failures):
            await self.report(key, failures, exc)
        if not isinstance(exc, ApiError) and key.kind is not Kind.GROUPS and failures >= MAX_FAILURES:
            return await self.end(key, "ReconcileFailed", f"failed {failures} times: {reason}")
        at_least = exc.retry_after if isinstance(exc, ApiError) and exc.retry_after else 0.0
        delay = self.queue.add_rate_limited(key, at_least=at_least)
        bound.debug("requeued", retry_in=round(delay, 3), failures=failures)
        return None

    async def report(self, key: Key, failures: int, exc: BaseException) -> None:
        """A Run's failure streak, on the Run and in an Event (controller/reconcile/failing.py)."""
        await report_failure(self.ctx, key.name, failures, exc)

    # -- ending a structurally bad object ------------------------------------------------

    async def end(self, key: Key, reason: str, message: str) -> Result:
        """End ``key``'s object with a condition and an Event instead of retrying it forever.
        If even that fails, it is retried with backoff like any failure."""
        obj = self._current(key)
        bound = log.bind(object=str(key), namespace=self.ctx.namespace)
        if obj is None:
            return Done()
        bound.error("object cannot be reconciled; ending it", reason=reason, message=message[:500])
        metrics.ENDED.labels(key.kind.value).inc()
        try:
            if isinstance(obj, RunView):
                written = await end_run(self.ctx, obj.raw, reason, message)
            else:
                written = await end_profile(self.ctx, obj, reason, message)
        except FATAL:
            raise
        except NotFound:
            return Done()
        except (Exception, asyncio.CancelledError) as exc:
            _reraise_own_cancellation(exc)
            bound.warning("could not end the object; retrying", error=f"{type(exc).__name__}: {exc}"[:300])
            self.queue.add_rate_limited(key)
            return Terminal(reason, message)
        self.ended[key] = _version(written) or _version(obj)
        return Terminal(reason, message)

    # -- the loop ------------------------------------------------------------------------

    async def start(self, stop: asyncio.Event) -> None:
        """Take the fence (retrying while the API server cannot be reached), then recover once.
        What recovery could not repair (a Node whose release the API server refuses) holds no
        one up: the fleet pass (the GROUPS key, with its backoff) tries it again, while every
        other object is reconciled; an orphan only keeps Nodes or budget out of use meanwhile."""
        failures = 0
        while not stop.is_set():
            try:
                await self.ctx.take_fence()
                break
            except FATAL:
                raise
            except Exception as exc:
                failures += 1
                delay = self.queue.backoff.delay(failures, self.queue.rand())
                log.warning(
                    "taking the fence failed; retrying", error=f"{type(exc).__name__}: {exc}"[:300], retry_in=delay
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            return
        try:
            await recover(self.ctx)
        except FATAL:
            raise
        except Exception as exc:
            log.warning(
                "start-up recovery incomplete; the fleet pass tries again",
                error=f"{type(exc).__name__}: {exc}"[:300],
            )

    async def _resync_timer(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.resync)
            if not stop.is_set():
                self.enqueue_all(resync=True)

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile until ``stop`` is set. Raises NotLeader when fenced out (fail closed: the
        process exits and says why)."""
        await self.start(stop)
        self.enqueue_all(resync=True)
        timer = asyncio.create_task(self._resync_timer(stop), name="resync")
        stopper = asyncio.create_task(self._shutdown_on(stop), name="stop")
        try:
            while not stop.is_set():
                key = await self.queue.get()
                if key is None:
                    break
                metrics.observe_queue_depth(Kind, (k.kind for k in self.queue.queued()))
                with metrics.RECONCILE_SECONDS.labels(key.kind.value).time():
                    await self.process(key)
        finally:
            for task in (timer, stopper):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _shutdown_on(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.queue.shutdown()


def _reraise_own_cancellation(exc: BaseException) -> None:
    """Re-raise ``exc`` when it is the running task's own cancellation (``Task.cancel``: the
    loop is stopping), never when it is a CancelledError from something it awaited (a future
    cancelled by someone else), which is one object's failure."""
    task = asyncio.current_task()
    if isinstance(exc, asyncio.CancelledError) and (task is None or task.cancelling() > 0):
        raise exc


def sorted_objects(objects: Iterable[Obj]) -> list[Obj]:
    return sorted(objects, key=lambda o: o["metadata"]["name"])


async def run_loop(ctx: Context, stop: asyncio.Event, *, resync: float = 30.0) -> None:
    """Build the controller over ``ctx``'s caches and reconcile until ``stop`` is set (or a
    fatal error: NotLeader, including a lapsed Lease)."""
    controller = Controller(ctx, resync=resync)
    try:
        await controller.run(stop)
    finally:
        controller.close()
