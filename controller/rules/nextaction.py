"""What a Run needs next: one pure decision over the Run as cached, its Workflow as cached
(only if it is the Run's own: same uid), the time, and the retries its profile allows. The
reconciler (controller/reconcile/runs.py) applies the action; everything it then waits for (backend
workloads to go, a Workflow confirmed gone with an uncached read) is its I/O.

The rules, in order:

* a terminal Run: ``RETRY`` (Inconclusive, no release asked, no retry yet, attempts left),
  else ``RELEASE`` (Succeeded, or ``spec.release``, and not yet Released; the cleanup follows
  in the same pass), else ``CLEAN_UP`` (its Workflow and snapshot, once), else ``NOTHING``;
* ``spec.cancel`` on a live Run: ``CANCEL``;
* Pending or Admitted: ``COMPLETE_ADMISSION``;
* Running without a Workflow recorded: ``SUBMIT_WORKFLOW``;
* Running: ``ACCEPT`` once its Workflow has finished; ``CONFIRM_WORKFLOW_GONE`` when the cache
  does not have it; after the suite deadline ``STOP_WORKFLOW`` (then accept), or
  ``ACCEPT_AFTER_DEADLINE`` once it was stopped; otherwise ``WAIT``.

And the decisions the reconciler makes once it has read what an action waits for:
``cancel_step`` (what a cancel does in each state of the Workflow and the workloads),
``workloads_step`` (whether no backend workload remains, and whether that is recorded yet),
``retry_due`` (when an Inconclusive Run is retried) and ``resubmit_allowed``."""

from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from controller.rules.runview import RunView
from shared.run import TERMINAL_PHASES, Phase

Obj = dict[str, Any]
FINISHED_WORKFLOW_PHASES = frozenset({"Succeeded", "Failed", "Error"})
SHUTDOWN = "Stop"
"""How the controller stops a Workflow (cancel, suite deadline): Argo's ``Stop`` stops the
running step and then runs the exit handler, whose adapter removes the interrupted check's
workloads, evidence first. (``Terminate`` skips exit handlers, and Argo v4's executor kills
the step's adapter with SIGKILL right after SIGTERM, so the adapter cannot clean up itself.)"""


class Action(StrEnum):
    NOTHING = "Nothing"
    RETRY = "Retry"
    RELEASE = "Release"
    CLEAN_UP = "CleanUp"
    CANCEL = "Cancel"
    COMPLETE_ADMISSION = "CompleteAdmission"
    SUBMIT_WORKFLOW = "SubmitWorkflow"
    ACCEPT = "Accept"
    CONFIRM_WORKFLOW_GONE = "ConfirmWorkflowGone"
    STOP_WORKFLOW = "StopWorkflow"
    ACCEPT_AFTER_DEADLINE = "AcceptAfterDeadline"
    WAIT = "Wait"


def deadline(run: RunView) -> datetime | None:
    """When the Run's suite deadline passes (None: not started)."""
    if run.start_time is None or run.suite_deadline_seconds is None:
        return None
    return run.start_time + timedelta(seconds=run.suite_deadline_seconds)


def deadline_passed(run: RunView, now: datetime) -> bool:
    passes = deadline(run)
    return passes is not None and now >= passes


def own_workflow(run: RunView, workflow: Obj | None) -> Obj | None:
    """``workflow`` if it is the one the Run recorded (same uid), else None."""
    if workflow is None or run.workflow is None or (workflow.get("metadata") or {}).get("uid") != run.workflow.uid:
        return None
    return workflow


def retry_due(run: RunView, max_attempts: int) -> bool:
    if run.phase != Phase.INCONCLUSIVE or run.release:
        return False
    if run.is_true("Released") or run.is_true("RetryStarted"):
        return False
    return run.attempt < max_attempts


def next_action(run: RunView, workflow: Obj | None, now: datetime, *, max_attempts: int = 1) -> Action:
    """The Run's next step. ``workflow``: the cached Workflow of the Run's name (checked here
    against the uid the Run recorded); ``max_attempts``: the profile's ``retries.maxAttempts``
    (1 when the profile is gone or is not the Run's)."""
    phase = run.phase
    if phase in TERMINAL_PHASES:
        if retry_due(run, max_attempts):
            return Action.RETRY
        if (run.release or phase == Phase.SUCCEEDED) and not run.is_true("Released"):
            return Action.RELEASE
        return Action.NOTHING if run.is_true("ResourcesCleaned") else Action.CLEAN_UP
    if run.cancel:
        return Action.CANCEL
    if phase in {Phase.PENDING, Phase.ADMITTED}:
        return Action.COMPLETE_ADMISSION
    if phase != Phase.RUNNING:
        return Action.WAIT
    if run.workflow is None:
        return Action.SUBMIT_WORKFLOW
    mine = own_workflow(run, workflow)
    if mine is None:
        return Action.CONFIRM_WORKFLOW_GONE
    if (mine.get("status") or {}).get("phase") in FINISHED_WORKFLOW_PHASES:
        return Action.ACCEPT
    if deadline_passed(run, now):
        stopped = (mine.get("spec") or {}).get("shutdown") == SHUTDOWN
        return Action.ACCEPT_AFTER_DEADLINE if stopped else Action.STOP_WORKFLOW
    return Action.WAIT


class CancelStep(StrEnum):
    """What a pass over a cancelled live Run does after asking Argo to stop its Workflow
    (``cancel_step``)."""

    RESUBMIT_FOR_CLEANUP = "ResubmitForCleanup"
    """Workloads remain and the Workflow was deleted: submit it again, so that its adapter
    (stopped at once, the Run being cancelled) removes them."""
    RETIRE_WORKFLOW = "RetireWorkflow"
    """Workloads remain and the Workflow has finished: nothing of it will remove them; replace it."""
    WAIT_FOR_WORKLOADS = "WaitForWorkloads"
    """Workloads remain (``WorkloadCleanupComplete=False``, ``WorkloadsRemain``)."""
    WAIT_FOR_WORKFLOW = "WaitForWorkflow"
    """None remains, but Argo is still stopping the Workflow: its adapters write the interrupted
    check's evidence (``WorkflowStopping``)."""
    CANCELED = "Canceled"
    """None remains and the Workflow has finished, or Argo never started it: end Canceled."""


def stop_needed(workflow: Obj | None) -> bool:
    """Whether a cancelled Run's Workflow (live, uncached; None: gone) still has to be asked to stop."""
    return workflow is not None and (workflow.get("spec") or {}).get("shutdown") != SHUTDOWN


def cancel_step(run: RunView, workflow: Obj | None, remaining: Sequence[str]) -> CancelStep:
    """The step of a cancelled live Run, from its Workflow as read now (None: gone) and the
    backend workloads of the Run that remain (``Kind/name``)."""
    phase = ((workflow or {}).get("status") or {}).get("phase")
    if remaining:
        if workflow is None and run.workflow is not None:
            return CancelStep.RESUBMIT_FOR_CLEANUP
        if workflow is not None and phase in FINISHED_WORKFLOW_PHASES:
            return CancelStep.RETIRE_WORKFLOW
        return CancelStep.WAIT_FOR_WORKLOADS
    if phase and phase not in FINISHED_WORKFLOW_PHASES:
        return CancelStep.WAIT_FOR_WORKFLOW
    return CancelStep.CANCELED


class WorkloadsStep(StrEnum):
    """Whether a Run may go on to its end, its release or its retry, given the backend
    workloads that remain (``workloads_step``)."""

    GO_ON = "GoOn"
    """None remains, and no wait for them is recorded as still going on."""
    RECORD_END = "RecordEnd"
    """None remains; the wait recorded (``WorkloadCleanupComplete=False``) is ended first
    (``True``, ``NoWorkloads``); the next pass, with that status, goes on."""
    WAIT = "Wait"
    """Some remain: ``WorkloadCleanupComplete=False``, ``WorkloadsRemain``; nothing else is done."""


def workloads_step(run: RunView, remaining: Sequence[str]) -> WorkloadsStep:
    if remaining:
        return WorkloadsStep.WAIT
    waited = run.condition("WorkloadCleanupComplete")
    if waited is None or waited.get("status") == "True":
        return WorkloadsStep.GO_ON
    return WorkloadsStep.RECORD_END


def resubmit_allowed(run: RunView, most: int) -> bool:
    """Whether a finished Workflow that left workloads behind may be replaced once more
    (``status.workflowResubmits`` below ``most``); after that they are the operator's."""
    return run.workflow_resubmits < most
