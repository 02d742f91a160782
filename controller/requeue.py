"""When a Run's key is looked at again without any change (its suite deadline, a cancel
waiting for workloads to go), and whether the cached Run is older than this controller's own
last write to it. Pure: takes ``now``; used by the loop (controller/loop.py)."""

from datetime import datetime, timedelta
from typing import Any

from controller.workqueue import Done, RequeueAfter, Result
from shared.run import TERMINAL_PHASES, Phase

Obj = dict[str, Any]
STALE_RECHECK = 0.1
"""A Run cached from before this controller's own last write is looked at again after this."""
STALE_LIMIT = 10.0
CANCEL_POLL = 2.0
"""A canceled Run waits for its workloads to go (they are not watched): look again after this."""


def _deadline(run: Obj) -> datetime | None:
    started = (run.get("status") or {}).get("startTime")
    seconds = (run.get("spec") or {}).get("suiteDeadlineSeconds")
    if not started or not isinstance(seconds, int):
        return None
    try:
        began = datetime.fromisoformat(str(started).replace("Z", "+00:00"))
    except ValueError:
        return None
    return began + timedelta(seconds=seconds)


def run_requeue(run: Obj, now: datetime) -> Result:
    """Pure: when a Run needs looking at again without any change (its suite deadline, or a
    cancel waiting for workloads to go)."""
    status = run.get("status") or {}
    phase = status.get("phase") or Phase.PENDING
    if phase in TERMINAL_PHASES:
        return Done()
    if (run.get("spec") or {}).get("cancel"):
        return RequeueAfter(CANCEL_POLL)
    deadline = _deadline(run) if phase == Phase.RUNNING else None
    if deadline is not None:
        return RequeueAfter(max(0.5, (deadline - now).total_seconds() + 0.5))
    return Done()


def stale_after_own_write(run: Obj, written: tuple[str, float] | None, now: float) -> bool:
    """Pure: whether the cached ``run`` predates this controller's last status write to it
    (``written``: resourceVersion, monotonic time), so acting on it would repeat a step (an
    acceptance, a release, their Events). resourceVersions are compared as etcd revisions
    when both are numbers, else only for equality; a write not seen within STALE_LIMIT
    seconds is no longer waited for (the cache may be broken: it reports that itself)."""
    if written is None or now - written[1] > STALE_LIMIT:
        return False
    cached, mine = str((run.get("metadata") or {}).get("resourceVersion") or ""), written[0]
    if cached.isdigit() and mine.isdigit():
        return int(cached) < int(mine)
    return cached != mine
