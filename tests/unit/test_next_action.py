"""Issue 13, acceptance 4: the table of a Run's next action (controller/rules/nextaction.py)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.rules.nextaction import SHUTDOWN, Action, next_action, own_workflow, retry_due
from controller.rules.runview import RunView, run_view

Obj = dict[str, Any]
STARTED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DEADLINE = 600
BEFORE = STARTED + timedelta(seconds=DEADLINE - 1)
AFTER = STARTED + timedelta(seconds=DEADLINE)


def cond(type_: str, status: str = "True") -> Obj:
    return {"type": type_, "status": status}


def run(
    phase: str | None = "Running",
    *,
    workflow_uid: str | None = "wf-1",
    conditions: list[Obj] | None = None,
    **spec: Any,
) -> RunView:
    status: Obj = {"startTime": STARTED.strftime("%Y-%m-%dT%H:%M:%SZ"), "conditions": conditions or []}
    if phase is not None:
        status["phase"] = phase
    if workflow_uid:
        status["workflow"] = {"name": "r1", "uid": workflow_uid}
    view = run_view({"metadata": {"name": "r1"}, "spec": {"suiteDeadlineSeconds": DEADLINE, **spec}, "status": status})
    assert view.problem is None
    return view


def workflow(phase: str | None = "Running", uid: str = "wf-1", shutdown: str | None = None) -> Obj:
    return {
        "metadata": {"name": "r1", "uid": uid},
        "spec": {"shutdown": shutdown} if shutdown else {},
        "status": {"phase": phase} if phase else {},
    }


CASES: list[tuple[str, RunView, Obj | None, datetime, int, Action]] = [
    # terminal Runs
    ("succeeded: released automatically", run("Succeeded"), None, BEFORE, 1, Action.RELEASE),
    ("failed, no release asked: clean up only", run("Failed"), None, BEFORE, 1, Action.CLEAN_UP),
    ("failed, release asked", run("Failed", release=True), None, BEFORE, 1, Action.RELEASE),
    (
        "released, cleaned: nothing",
        run("Succeeded", conditions=[cond("Released"), cond("ResourcesCleaned")]),
        None,
        BEFORE,
        1,
        Action.NOTHING,
    ),
    (
        "released, not cleaned",
        run("Succeeded", conditions=[cond("Released")]),
        None,
        BEFORE,
        1,
        Action.CLEAN_UP,
    ),
    (
        "Released=False is not released",
        run("Canceled", release=True, conditions=[cond("Released", "False")]),
        None,
        BEFORE,
        1,
        Action.RELEASE,
    ),
    ("inconclusive with attempts left: retry", run("Inconclusive"), None, BEFORE, 2, Action.RETRY),
    ("inconclusive, last attempt", run("Inconclusive", attempt=2), None, BEFORE, 2, Action.CLEAN_UP),
    ("inconclusive, release asked: no retry", run("Inconclusive", release=True), None, BEFORE, 3, Action.RELEASE),
    (
        "inconclusive, retry already started",
        run("Inconclusive", conditions=[cond("RetryStarted"), cond("Released")]),
        None,
        BEFORE,
        3,
        Action.CLEAN_UP,
    ),
    ("a terminal Run ignores cancel", run("Failed", cancel=True), None, BEFORE, 1, Action.CLEAN_UP),
    # live Runs
    ("cancel wins over everything live", run("Running", cancel=True), workflow(), AFTER, 1, Action.CANCEL),
    ("cancel while pending", run("Pending", cancel=True), None, BEFORE, 1, Action.CANCEL),
    ("no phase yet: admission", run(None, workflow_uid=None), None, BEFORE, 1, Action.COMPLETE_ADMISSION),
    ("admitted: admission completes", run("Admitted", workflow_uid=None), None, BEFORE, 1, Action.COMPLETE_ADMISSION),
    ("running, no workflow yet", run("Running", workflow_uid=None), None, BEFORE, 1, Action.SUBMIT_WORKFLOW),
    ("running, workflow running", run(), workflow(), BEFORE, 1, Action.WAIT),
    ("running, workflow pending (no phase)", run(), workflow(None), BEFORE, 1, Action.WAIT),
    ("workflow succeeded", run(), workflow("Succeeded"), BEFORE, 1, Action.ACCEPT),
    ("workflow failed", run(), workflow("Failed"), BEFORE, 1, Action.ACCEPT),
    ("workflow error", run(), workflow("Error"), AFTER, 1, Action.ACCEPT),
    ("workflow not cached", run(), None, BEFORE, 1, Action.CONFIRM_WORKFLOW_GONE),
    ("another Workflow of that name", run(), workflow("Succeeded", uid="x"), BEFORE, 1, Action.CONFIRM_WORKFLOW_GONE),
    ("deadline passed: stop", run(), workflow(), AFTER, 1, Action.STOP_WORKFLOW),
    ("deadline passed, stopped", run(), workflow(shutdown=SHUTDOWN), AFTER, 1, Action.ACCEPT_AFTER_DEADLINE),
    ("terminated by someone else: still Stop", run(), workflow(shutdown="Terminate"), AFTER, 1, Action.STOP_WORKFLOW),
    ("an unknown phase waits", run("Paused"), workflow(), AFTER, 1, Action.WAIT),
]


@pytest.mark.parametrize(
    ("run_", "workflow_", "now", "attempts", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_next_action(run_: RunView, workflow_: Obj | None, now: datetime, attempts: int, expected: Action) -> None:
    assert next_action(run_, workflow_, now, max_attempts=attempts) is expected


def test_own_workflow_needs_the_recorded_uid() -> None:
    assert own_workflow(run(), workflow()) is not None
    assert own_workflow(run(), workflow(uid="other")) is None
    assert own_workflow(run(workflow_uid=None), workflow()) is None
    assert own_workflow(run(), None) is None


def test_retry_counts_attempts() -> None:
    assert [retry_due(run("Inconclusive", attempt=a), 3) for a in (1, 2, 3, 4)] == [True, True, False, False]
    assert not retry_due(run("Failed"), 3)
