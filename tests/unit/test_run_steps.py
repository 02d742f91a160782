"""Issue 46: the decisions controller/reconcile/runs.py makes once it has read what an action waits for
(controller/rules/nextaction.py): what a cancel does in each state of the Workflow and the backend
workloads, whether the workloads let a Run go on, when a retry is due, and how often a
Workflow that left workloads behind is replaced. Tables; no I/O."""

import pytest

from controller.rules.nextaction import (
    SHUTDOWN,
    CancelStep,
    WorkloadsStep,
    cancel_step,
    resubmit_allowed,
    retry_due,
    stop_needed,
    workloads_step,
)
from controller.rules.runview import RunView, run_view
from tests.unit.test_next_action import Obj, cond, run, workflow

POD = ["Pod/backend-0"]
BOTH = ["Pod/backend-0", "MPIJob/job-0"]

CANCEL_CASES: list[tuple[str, RunView, Obj | None, list[str], CancelStep]] = [
    # workloads remain
    ("workflow deleted, workloads left: submit again", run(), None, POD, CancelStep.RESUBMIT_FOR_CLEANUP),
    ("workflow never recorded, none live: wait", run(workflow_uid=None), None, POD, CancelStep.WAIT_FOR_WORKLOADS),
    ("workflow Succeeded, workloads left: replace", run(), workflow("Succeeded"), POD, CancelStep.RETIRE_WORKFLOW),
    ("workflow Failed, workloads left: replace", run(), workflow("Failed"), BOTH, CancelStep.RETIRE_WORKFLOW),
    ("workflow Error, workloads left: replace", run(), workflow("Error"), POD, CancelStep.RETIRE_WORKFLOW),
    ("workflow Running, workloads left: wait", run(), workflow("Running"), POD, CancelStep.WAIT_FOR_WORKLOADS),
    (
        "workflow stopping, workloads left: wait",
        run(),
        workflow("Running", shutdown=SHUTDOWN),
        BOTH,
        CancelStep.WAIT_FOR_WORKLOADS,
    ),
    ("workflow not started, workloads left: wait", run(), workflow(None), POD, CancelStep.WAIT_FOR_WORKLOADS),
    # none remains
    ("workflow still Running: wait for its adapters", run(), workflow("Running"), [], CancelStep.WAIT_FOR_WORKFLOW),
    ("workflow Pending: wait for it", run(), workflow("Pending"), [], CancelStep.WAIT_FOR_WORKFLOW),
    ("workflow finished: Canceled", run(), workflow("Failed"), [], CancelStep.CANCELED),
    ("workflow Succeeded: Canceled", run(), workflow("Succeeded"), [], CancelStep.CANCELED),
    ("workflow never picked up by Argo: Canceled", run(), workflow(None), [], CancelStep.CANCELED),
    ("workflow gone: Canceled", run(), None, [], CancelStep.CANCELED),
    ("no workflow ever: Canceled", run("Admitted", workflow_uid=None, cancel=True), None, [], CancelStep.CANCELED),
]


@pytest.mark.parametrize(
    ("name", "view", "live", "remaining", "expected"), CANCEL_CASES, ids=[c[0] for c in CANCEL_CASES]
)
def test_cancel_step(name: str, view: RunView, live: Obj | None, remaining: list[str], expected: CancelStep) -> None:
    assert cancel_step(view, live, remaining) is expected


@pytest.mark.parametrize(
    ("live", "expected"),
    [
        (None, False),
        (workflow("Running"), True),
        (workflow("Succeeded"), True),
        (workflow("Running", shutdown=SHUTDOWN), False),
        (workflow("Running", shutdown="Terminate"), True),
    ],
    ids=["gone", "running", "finished (asked anyway: harmless)", "already stopping", "terminate is not stop"],
)
def test_stop_needed(live: Obj | None, expected: bool) -> None:
    assert stop_needed(live) is expected


WORKLOAD_CASES: list[tuple[str, RunView, list[str], WorkloadsStep]] = [
    ("none remain, never waited: go on", run("Failed"), [], WorkloadsStep.GO_ON),
    (
        "none remain, the end of the wait recorded: go on",
        run("Failed", conditions=[cond("WorkloadCleanupComplete")]),
        [],
        WorkloadsStep.GO_ON,
    ),
    (
        "none remain, still recorded waiting: record the end first",
        run("Failed", conditions=[cond("WorkloadCleanupComplete", "False")]),
        [],
        WorkloadsStep.RECORD_END,
    ),
    ("one remains: wait", run("Failed"), POD, WorkloadsStep.WAIT),
    (
        "remain although recorded done: wait",
        run("Failed", conditions=[cond("WorkloadCleanupComplete")]),
        BOTH,
        WorkloadsStep.WAIT,
    ),
    (
        "remain, already waiting: wait",
        run("Running", conditions=[cond("WorkloadCleanupComplete", "False")]),
        POD,
        WorkloadsStep.WAIT,
    ),
]


@pytest.mark.parametrize(("name", "view", "remaining", "expected"), WORKLOAD_CASES, ids=[c[0] for c in WORKLOAD_CASES])
def test_workloads_step(name: str, view: RunView, remaining: list[str], expected: WorkloadsStep) -> None:
    assert workloads_step(view, remaining) is expected


RETRY_CASES: list[tuple[str, RunView, int, bool]] = [
    ("inconclusive, attempts left", run("Inconclusive"), 2, True),
    ("inconclusive, one attempt allowed", run("Inconclusive"), 1, False),
    ("inconclusive, last attempt", run("Inconclusive", attempt=3), 3, False),
    ("inconclusive, release asked", run("Inconclusive", release=True), 3, False),
    ("inconclusive, retry started", run("Inconclusive", conditions=[cond("RetryStarted")]), 3, False),
    ("inconclusive, released", run("Inconclusive", conditions=[cond("Released")]), 3, False),
    ("inconclusive, Released=False", run("Inconclusive", conditions=[cond("Released", "False")]), 3, True),
    ("failed: never retried", run("Failed"), 3, False),
    ("canceled: never retried", run("Canceled"), 3, False),
    ("succeeded: never retried", run("Succeeded"), 3, False),
    ("running: not yet", run("Running"), 3, False),
]


@pytest.mark.parametrize(("name", "view", "most", "expected"), RETRY_CASES, ids=[c[0] for c in RETRY_CASES])
def test_retry_due(name: str, view: RunView, most: int, expected: bool) -> None:
    assert retry_due(view, most) is expected


@pytest.mark.parametrize(("done", "expected"), [(0, True), (2, True), (3, False), (4, False)])
def test_resubmit_allowed(done: int, expected: bool) -> None:
    view = run_view({"metadata": {"name": "r1"}, "spec": {}, "status": {"phase": "Running", "workflowResubmits": done}})
    assert view.problem is None
    assert resubmit_allowed(view, 3) is expected
