"""What a Run needs next: one pure decision over the Run as cached, its Workflow as cached
(only if it is the Run's own: same uid), the time, and the retries its profile allows. The
reconciler (controller/runs.py) applies the action; everything it then waits for (backend
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
  ``ACCEPT_AFTER_DEADLINE`` once it was stopped; otherwise ``WAIT``."""

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from controller.runview import RunView
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
