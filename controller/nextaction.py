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

from shared.conditions import is_true
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


def deadline_passed(run: Obj, now: datetime) -> bool:
    started = (run.get("status") or {}).get("startTime")
    if not started:
        return False
    began = datetime.fromisoformat(str(started).replace("Z", "+00:00"))
    return now >= began + timedelta(seconds=int(run["spec"]["suiteDeadlineSeconds"]))


def own_workflow(run: Obj, workflow: Obj | None) -> Obj | None:
    """``workflow`` if it is the one the Run recorded (same uid), else None."""
    ref = (run.get("status") or {}).get("workflow") or {}
    if workflow is None or not ref.get("uid") or (workflow.get("metadata") or {}).get("uid") != ref["uid"]:
        return None
    return workflow


def retry_due(run: Obj, max_attempts: int) -> bool:
    status = run.get("status") or {}
    if status.get("phase") != Phase.INCONCLUSIVE or run["spec"].get("release"):
        return False
    conditions = status.get("conditions") or []
    if is_true(conditions, "Released") or is_true(conditions, "RetryStarted"):
        return False
    return int(run["spec"].get("attempt", 1)) < max_attempts


def next_action(run: Obj, workflow: Obj | None, now: datetime, *, max_attempts: int = 1) -> Action:
    """The Run's next step. ``workflow``: the cached Workflow of the Run's name (checked here
    against the uid the Run recorded); ``max_attempts``: the profile's ``retries.maxAttempts``
    (1 when the profile is gone or is not the Run's)."""
    status = run.get("status") or {}
    phase = status.get("phase") or Phase.PENDING
    conditions = status.get("conditions") or []
    if phase in TERMINAL_PHASES:
        if retry_due(run, max_attempts):
            return Action.RETRY
        if (run["spec"].get("release") or phase == Phase.SUCCEEDED) and not is_true(conditions, "Released"):
            return Action.RELEASE
        return Action.NOTHING if is_true(conditions, "ResourcesCleaned") else Action.CLEAN_UP
    if run["spec"].get("cancel"):
        return Action.CANCEL
    if phase in {Phase.PENDING, Phase.ADMITTED}:
        return Action.COMPLETE_ADMISSION
    if phase != Phase.RUNNING:
        return Action.WAIT
    if not (status.get("workflow") or {}).get("uid"):
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
