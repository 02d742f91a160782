"""A Run whose reconcile keeps failing says so on the Run and in Events, not only in a log.

While a Run's passes fail (an API error retried with backoff for ever, or another error until
the loop ends the Run), the controller reports the streak at its 1st, 2nd, 4th, 8th...
consecutive failure (``announce``): the condition ``ReconcileFailing=True`` (reason: the
error's class, e.g. ``Forbidden``; message: the failure count and the error) and a Warning
Event ``ReconcileFailing`` with the same text, and a warning in the log. Between those counts
nothing is written (each write would also bring the Run back to the queue before its backoff
ends), so an hour of failures one minute apart costs about seven writes and seven Events. The
first pass that succeeds afterwards turns the condition ``False`` (reason ``Reconciled``)
before it acts.

The pure part (``announce``, ``failing_conditions``, ``recovered_conditions``) is table-tested;
``report_failure`` is the thin I/O, best effort: it reads the Run afresh and writes under its
resourceVersion, so it never drops a condition the failed pass wrote, and a failure to report
is logged, never raised."""

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from controller.reconcile import events
from controller.reconcile.state import Context, log
from kubeio.errors import ApiError
from shared.conditions import condition, set_condition

CONDITION = "ReconcileFailing"
EVENT_REASON = "ReconcileFailing"
RECOVERED_REASON = "Reconciled"


def announce(failures: int) -> bool:
    """Whether the ``failures``-th consecutive failure is reported: 1, 2, 4, 8, 16..."""
    return failures > 0 and failures & (failures - 1) == 0


def failure_message(failures: int, error: str) -> str:
    times = "once" if failures == 1 else f"{failures} times in a row"
    return (
        f"the controller's reconcile of this Run failed {times} (reported at 1, 2, 4, 8... failures; retried with "
        f"backoff up to a minute apart): {error}. Until it succeeds the Run does not advance (no release, no "
        "acceptance); see the controller's log for the object and fix the cause (often RBAC or a missing API)"
    )


def failing_conditions(
    conditions: Sequence[Mapping[str, Any]],
    failures: int,
    error_class: str,
    error: str,
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """``conditions`` with ``ReconcileFailing=True`` for the ``failures``-th failure."""
    return set_condition(
        conditions,
        type_=CONDITION,
        status=True,
        reason=error_class,
        message=failure_message(failures, error),
        generation=generation,
        now=now,
    )


def recovered_conditions(
    conditions: Sequence[Mapping[str, Any]], generation: int | None, now: datetime
) -> list[dict[str, Any]] | None:
    """``conditions`` with ``ReconcileFailing=False``, or None when it is not True (nothing to write)."""
    found = condition(conditions, CONDITION)
    if found is None or found.get("status") != "True":
        return None
    return set_condition(
        conditions,
        type_=CONDITION,
        status=False,
        reason=RECOVERED_REASON,
        message=f"reconciled again after the failures reported before ({found.get('reason')})",
        generation=generation,
        now=now,
    )


async def report_failure(ctx: Context, name: str, failures: int, exc: BaseException) -> None:
    """Write ``ReconcileFailing`` on Run ``name`` and emit its Warning Event (best effort)."""
    error = f"{type(exc).__name__}: {exc}"[:600]
    message = failure_message(failures, error)
    if failures > 1:  # the first is logged by the loop, with its traceback where there is one
        log.warning("reconcile keeps failing", run=name, failures=failures, error=error)
    path = ctx.run_path(name)
    try:
        current = await ctx.kube.get(path)
        meta = current["metadata"]
        conditions = failing_conditions(
            (current.get("status") or {}).get("conditions") or [],
            failures,
            type(exc).__name__,
            error,
            meta.get("generation"),
            ctx.clock(),
        )
        patch = {
            "metadata": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
            "status": {"conditions": conditions},
        }
        written = await ctx.kube.merge_patch(ctx.run_path(name, "status"), patch)
        ctx.written[name] = (str(written["metadata"]["resourceVersion"]), time.monotonic())
    except (ApiError, KeyError, TypeError) as report_error:
        log.warning("could not report the failures on the run", run=name, error=str(report_error)[:300])
        return
    await events.emit(ctx, events.run_ref(written), EVENT_REASON, message, warning=True)
