"""When a Run's key is looked at again without any change (its suite deadline, a cancel
waiting for workloads to go), and whether the cached Run is older than this controller's own
last write to it. Pure: takes ``now``; used by the loop (controller/process/loop.py)."""

from datetime import datetime

from controller.rules.busy import POLL_SECONDS as BUSY_POLL
from controller.rules.busy import waiting as busy_waiting
from controller.rules.nextaction import deadline
from controller.rules.runview import RunView
from controller.rules.workqueue import Done, RequeueAfter, Result
from shared.run import Phase

STALE_RECHECK = 0.1
"""A Run cached from before this controller's own last write is looked at again after this."""
STALE_LIMIT = 10.0
CANCEL_POLL = 2.0
"""A canceled Run waits for its workloads to go (they are not watched): look again after this."""


def run_requeue(run: RunView, now: datetime) -> Result:
    """Pure: when a Run needs looking at again without any change (its suite deadline, or a
    cancel waiting for workloads to go)."""
    if run.terminal:
        return Done()
    if run.cancel:
        return RequeueAfter(CANCEL_POLL)
    if busy_waiting(run):  # drain or wait for free: Pods are not watched (controller/reconcile/busyio.py)
        return RequeueAfter(BUSY_POLL)
    passes = deadline(run) if run.phase == Phase.RUNNING else None
    if passes is not None:
        return RequeueAfter(max(0.5, (passes - now).total_seconds() + 0.5))
    return Done()


def stale_after_own_write(run: RunView, written: tuple[str, float] | None, now: float) -> bool:
    """Pure: whether the cached ``run`` predates this controller's last status write to it
    (``written``: resourceVersion, monotonic time), so acting on it would repeat a step (an
    acceptance, a release, their Events). resourceVersions are compared as etcd revisions
    when both are numbers, else only for equality; a write not seen within STALE_LIMIT
    seconds is no longer waited for (the cache may be broken: it reports that itself)."""
    if written is None or now - written[1] > STALE_LIMIT:
        return False
    cached, mine = run.resource_version, written[0]
    if cached.isdigit() and mine.isdigit():
        return int(cached) < int(mine)
    return cached != mine
