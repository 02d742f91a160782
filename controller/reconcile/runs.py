"""Per-Run reconciliation: finish half-admitted Runs, submit Workflows, accept finished
Runs from their evidence, cancel, release, and clean up.

Level-based: each call looks at the Run as it is now and moves it one step closer to where
it should be. A Running Run is accepted (controller/reconcile/accept.py) once its Workflow has ended,
disappeared, or outlived the suite deadline (then it is stopped first). ``Succeeded``
releases its group automatically; every other terminal phase waits for
``spec.release: true``.

No leaked workloads: the terminal status (accepted or Canceled) and the release both wait
until no Pod or MPIJob labelled with the Run's uid remains (condition
``WorkloadCleanupComplete=False``, reason ``WorkloadsRemain``). The controller cannot delete
them (it may not touch Pods or MPIJobs); the adapter removes them, evidence first, when it is
stopped (SIGTERM) or when a step finds the Run cancelled or ended."""

import contextlib

from controller.reconcile import events
from controller.reconcile.accept import accept
from controller.reconcile.admission import complete_admission, submit_workflow
from controller.reconcile.lifecycle import clean_children
from controller.reconcile.reservations import AdmissionAborted, release_nodes
from controller.reconcile.state import Context, log
from controller.rules.nextaction import (
    SHUTDOWN,
    Action,
    CancelStep,
    WorkloadsStep,
    cancel_step,
    deadline_passed,
    next_action,
    resubmit_allowed,
    stop_needed,
    workloads_step,
)
from controller.rules.runview import RunView, run_view
from kubeio.client import Obj, resource_path
from kubeio.discovery import list_if_served
from kubeio.errors import Conflict, NotFound
from shared import keys
from shared.conditions import set_condition
from shared.ownership import is_mirror
from shared.run import Phase


async def reconcile_run(ctx: Context, run: RunView) -> None:
    """Apply the Run's next action (controller/rules/nextaction.py) and what it waits for. Decisions
    read the typed view; writes and the modules that build manifests take ``run.raw``."""
    cached = ctx.workflows.items.get(f"{ctx.namespace}/{run.workflow.name if run.workflow else run.name}")
    action = next_action(run, cached, ctx.clock(), max_attempts=_max_attempts(ctx, run))
    if action is Action.RETRY:
        await retry(ctx, run)
    elif action is Action.RELEASE:
        released = await release(ctx, run)
        if released is not None:
            # Go on from the Run as written: clean_children rewrites status.conditions, which
            # from the object read before the release would drop Released again.
            await clean_children(ctx, run_view(released))
    elif action is Action.CLEAN_UP:
        await clean_children(ctx, run)
    elif action is Action.CANCEL:
        await cancel(ctx, run)
    elif action is Action.COMPLETE_ADMISSION:
        try:
            await complete_admission(ctx, run, None)
        except AdmissionAborted as exc:
            log.warning("half-admitted run rolled back", run=run.name, reason=str(exc))
    elif action is Action.SUBMIT_WORKFLOW:
        await submit_workflow(ctx, run)
    elif action is Action.ACCEPT:
        remaining = await _backend_workloads(ctx, run)  # listed once, for both questions
        if not await wait_for_workloads(ctx, run, remaining):
            await accept(ctx, run, cached, deadline_passed=False)
        elif remaining and cached is not None:
            await _retire_stranding_workflow(ctx, run, cached)
    elif action is Action.CONFIRM_WORKFLOW_GONE:
        await _workflow_gone(ctx, run)
    elif action in (Action.STOP_WORKFLOW, Action.ACCEPT_AFTER_DEADLINE):
        if action is Action.STOP_WORKFLOW and run.workflow is not None:
            await ctx.kube.merge_patch(
                resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, ctx.namespace, run.workflow.name),
                {"metadata": {"uid": run.workflow.uid}, "spec": {"shutdown": SHUTDOWN}},
            )
        log.warning("suite deadline passed; stopping the workflow", run=run.name)
        if not await workloads_remain(ctx, run):
            await accept(ctx, run, cached, deadline_passed=True)


def _max_attempts(ctx: Context, run: RunView) -> int:
    """The profile's retries.maxAttempts; 1 when the profile is gone or is not the Run's."""
    profile = ctx.profiles.items.get(f"/{run.profile_name}")
    if profile is None or profile["metadata"].get("uid") != run.profile_uid:
        return 1
    return int(((profile.get("spec") or {}).get("retries") or {}).get("maxAttempts", 1))


async def _workflow_gone(ctx: Context, run: RunView) -> None:
    """The cache has no Workflow of the Run's: confirm with an uncached read before concluding
    it is gone, then accept what evidence exists (once no backend workload remains)."""
    assert run.workflow is not None  # next_action: CONFIRM_WORKFLOW_GONE only with one recorded
    path = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, ctx.namespace, run.workflow.name)
    live = await ctx.kube.get_or_none(path)
    if live is not None and live["metadata"]["uid"] == run.workflow.uid:
        return  # the cache is behind; its event brings the Run back
    if await workloads_remain(ctx, run):
        if live is None:
            await _resubmit_for_cleanup(ctx, run)
        return
    log.warning("workflow of a running run is gone; accepting what evidence exists", run=run.name)
    await accept(ctx, run, None, deadline_passed=deadline_passed(run, ctx.clock()))


async def _backend_workloads(ctx: Context, run: RunView) -> list[str]:
    """Every Pod and MPIJob labelled with the Run's uid, as ``Kind/name`` (uncached reads).
    MPIJobs are listed only for a Run with a check that is not a Pod check, and a cluster
    that does not serve MPIJobs at all (no MPI operator: discovery confirms the list's 404,
    kubeio/discovery.py) has none; any other failure is raised (never read as "none left")."""
    selector = f"{keys.RUN_UID_LABEL}={run.uid}"
    found = []
    pods = await ctx.kube.get(resource_path("v1", "pods", ctx.namespace), labelSelector=selector)
    # A kubelet's mirror Pod with the Run's labels (shared/ownership.py) would otherwise hold the
    # Run's end back for ever; it runs nothing of Signal's.
    found += [f"Pod/{p['metadata']['name']}" for p in pods.get("items", []) if not is_mirror(p)]
    if run.may_have_mpijobs:
        jobs = await list_if_served(
            ctx.kube, keys.MPIJOB_API_VERSION, keys.MPIJOB_PLURAL, ctx.namespace, labelSelector=selector
        )
        found += [f"MPIJob/{j['metadata']['name']}" for j in jobs]
    return found


async def workloads_remain(ctx: Context, run: RunView, *, before: str = "the Run ends") -> bool:
    """True (and ``WorkloadCleanupComplete=False``, ``WorkloadsRemain``) while any backend
    workload of the Run exists; False when none does."""
    return await wait_for_workloads(ctx, run, await _backend_workloads(ctx, run), before=before)


async def wait_for_workloads(ctx: Context, run: RunView, remaining: list[str], *, before: str = "the Run ends") -> bool:
    """``workloads_remain`` for workloads already listed (``remaining``). Also True in the pass
    that records the end of a wait: the next pass, with that status, goes on."""
    current = list(run.conditions)
    step = workloads_step(run, remaining)
    if step is WorkloadsStep.GO_ON:
        return False
    if step is WorkloadsStep.RECORD_END:
        # Record the end of the wait first; the next pass (with this status) goes on.
        conditions = set_condition(
            current,
            type_="WorkloadCleanupComplete",
            status=True,
            reason="NoWorkloads",
            message="no backend workload remains",
            generation=run.generation,
            now=ctx.clock(),
        )
        with contextlib.suppress(NotFound):
            await ctx.patch_run_status(run.raw, {"conditions": conditions})
        return True
    conditions = set_condition(
        current,
        type_="WorkloadCleanupComplete",
        status=False,
        reason="WorkloadsRemain",
        message=f"{before} only once no backend workload remains; waiting for "
        + ", ".join(remaining[:5])
        + " (the adapter removes them; if no adapter step runs any more, delete them after taking what evidence "
        "you need)",
        generation=run.generation,
        now=ctx.clock(),
    )
    if conditions != current:
        try:
            await ctx.patch_run_status(run.raw, {"conditions": conditions})
        except NotFound:
            return True
    log.info("backend workloads remain", run=run.name, remaining=remaining[:5])
    return True


async def _resubmit_for_cleanup(ctx: Context, run: RunView) -> None:
    """The Run's Workflow is gone (deleted) while backend workloads of the Run remain: nobody is
    left to remove them (the controller may not, and the Workflow's adapter step and exit handler
    went with it), so the Run would wait for ever. Submit the Workflow again (same name, same
    parameters): its adapter adopts what a check left (persisted results and evidence are reused,
    never run twice) or, for a cancelled or late Run, is stopped and its exit handler removes the
    workloads, evidence first. Found by the fault campaign (issue 14: delete-workflow mid-check)."""
    log.warning(
        "workflow gone while backend workloads remain; submitting it again so that its adapter removes them",
        run=run.name,
    )
    await submit_workflow(ctx, run)


MAX_CLEANUP_RESUBMITS = 3
"""How many times a finished Workflow that left workloads behind is replaced (then the Run's
WorkloadsRemain condition leaves them to the operator)."""


async def _retire_stranding_workflow(ctx: Context, run: RunView, workflow: Obj) -> None:
    """The Run's Workflow has finished while backend workloads of the Run remain: its exit
    handler's sweep did not remove them (it failed during an outage, its adapter was killed, or
    the Workflow was terminated, which skips exit handlers) and nothing else will. Delete that
    Workflow; the next pass finds it gone and submits it again (``_resubmit_for_cleanup``),
    whose adapter removes them. At most MAX_CLEANUP_RESUBMITS times per Run, counted in
    ``status.workflowResubmits``. Found by the fault campaign (issue 14, seed 4: kill-adapter
    mid-check, then the sweep failed in an API outage; two Runs waited in WorkloadsRemain for
    ever)."""
    count = run.workflow_resubmits
    if not resubmit_allowed(run, MAX_CLEANUP_RESUBMITS):
        log.warning("workloads remain after every resubmitted workflow; leaving them to the operator", run=run.name)
        return
    updated = set_condition(
        run.conditions,
        type_="WorkflowResubmitted",
        status=True,
        reason="StrandedWorkloads",
        message=f"the finished Workflow left backend workloads; it was replaced to remove them ({count + 1} of at "
        f"most {MAX_CLEANUP_RESUBMITS} times)",
        generation=run.generation,
        now=ctx.clock(),
    )
    await ctx.patch_run_status(run.raw, {"conditions": updated, "workflowResubmits": count + 1})
    log.warning("workflow finished but left backend workloads; deleting it to submit it again", run=run.name)
    path = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, ctx.namespace, workflow["metadata"]["name"])
    with contextlib.suppress(NotFound, Conflict):
        await ctx.kube.delete(path, uid=workflow["metadata"]["uid"], propagation="Background")


async def cancel(ctx: Context, run: RunView) -> None:
    """Ask Argo to stop the Workflow (``Stop``: its exit handler removes the interrupted
    check's workloads); end Canceled once no backend workload remains and the Workflow, if
    Argo has started it, has finished. The adapter writes a check's evidence (with the outcome
    of its cleanup) only after it has proven the workloads gone, so "no workload remains" alone
    could end the Run a moment before the interrupted check's evidence exists (CI saw it:
    ``test_cancel_mid_check[MPIJob]`` found the Run Canceled and no evidence ConfigMap). A
    Workflow Argo never picked up (no phase) has no adapter to wait for."""
    name = run.name
    path = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, ctx.namespace, name)
    workflow = await ctx.kube.get_or_none(path)
    if workflow is not None and stop_needed(workflow):
        await ctx.kube.merge_patch(
            path, {"metadata": {"uid": workflow["metadata"]["uid"]}, "spec": {"shutdown": SHUTDOWN}}
        )
    remaining = await _backend_workloads(ctx, run)
    step = cancel_step(run, workflow, remaining)
    if step is CancelStep.RESUBMIT_FOR_CLEANUP:
        await _resubmit_for_cleanup(ctx, run)
        return
    if step is CancelStep.RETIRE_WORKFLOW:
        assert workflow is not None  # cancel_step: a finished Workflow
        await _retire_stranding_workflow(ctx, run, workflow)
        return
    now, generation = ctx.clock(), run.generation
    if step is CancelStep.WAIT_FOR_WORKLOADS:
        conditions = set_condition(
            run.conditions,
            type_="WorkloadCleanupComplete",
            status=False,
            reason="WorkloadsRemain",
            message="waiting for " + ", ".join(remaining[:5]),
            generation=generation,
            now=now,
        )
        await ctx.patch_run_status(run.raw, {"conditions": conditions})
        return
    if step is CancelStep.WAIT_FOR_WORKFLOW:
        workflow_phase = ((workflow or {}).get("status") or {}).get("phase")
        conditions = set_condition(
            run.conditions,
            type_="WorkloadCleanupComplete",
            status=False,
            reason="WorkflowStopping",
            message=f"Workflow {name} is {workflow_phase}: its adapters are still stopping (they write the "
            "interrupted check's evidence); Canceled once it has finished",
            generation=generation,
            now=now,
        )
        if conditions != list(run.conditions):
            await ctx.patch_run_status(run.raw, {"conditions": conditions})
        log.info("canceled run waits for its workflow's adapters to finish", run=name, workflow_phase=workflow_phase)
        return
    conditions = set_condition(
        run.conditions,
        type_="WorkloadCleanupComplete",
        status=True,
        reason="NoWorkloads",
        message="no backend workload remains",
        generation=generation,
        now=now,
    )
    await ctx.patch_run_status(
        run.raw,
        {
            "phase": Phase.CANCELED,
            "reason": "Canceled",
            "message": "canceled by spec.cancel; the group stays reserved until spec.release",
            "conditions": conditions,
            "completionTime": ctx.timestamp(),
        },
    )
    log.info("run canceled", run=name)
    await events.emit(ctx, events.run_ref(run.raw), "RunCanceled", "canceled by spec.cancel", warning=True)


async def retry(ctx: Context, run: RunView) -> None:
    """Start the next attempt of an Inconclusive Run: give its Nodes back with their
    request restored and the next attempt number, so admission takes them again if they
    are still eligible. The Run (and its evidence) stays for review."""
    name, attempt = run.name, run.attempt
    if await workloads_remain(ctx, run, before="a retry releases the group"):
        return
    await release_nodes(ctx, run, restore_request=True, next_attempt=attempt + 1)
    await ctx.drop_group(name)
    now, generation = ctx.clock(), run.generation
    conditions = list(run.conditions)
    for type_, reason, message in (
        ("RetryStarted", "RetryPolicy", f"attempt {attempt + 1} requested for the same Nodes"),
        ("Released", "ReleasedForRetry", "reservations removed so that the next attempt can admit the Nodes"),
    ):
        conditions = set_condition(
            conditions, type_=type_, status=True, reason=reason, message=message, generation=generation, now=now
        )
    await ctx.patch_run_status(run.raw, {"conditions": conditions})
    log.info("retry started", run=name, next_attempt=attempt + 1)
    await events.emit(ctx, events.run_ref(run.raw), "RetryStarted", f"attempt {attempt + 1} requested", warning=True)


async def release(ctx: Context, run: RunView) -> Obj | None:
    """Give the group back: release every Node, drop the ledger group, mark Released; never
    while a backend workload of the Run still exists. Returns the Run as written with
    Released, or None when it was not released in this pass (or is gone)."""
    name = run.name
    if await workloads_remain(ctx, run, before="the group is released"):
        return None
    # Only a Pass lifts the quarantine the Run adopted (issue 43, item 1); a Fail, an
    # Inconclusive or a Canceled Run leaves it where it was.
    await release_nodes(ctx, run, lift_quarantine=run.phase == Phase.SUCCEEDED)
    await ctx.drop_group(name)
    conditions = set_condition(
        run.conditions,
        type_="Released",
        status=True,
        reason="Released",
        message="reservations removed; Signal's cordon lifted (an operator's cordon stays)",
        generation=run.generation,
        now=ctx.clock(),
    )
    try:
        written = await ctx.patch_run_status(run.raw, {"conditions": conditions})
    except NotFound:
        return None
    log.info("run released", run=name)
    await events.emit(ctx, events.run_ref(run.raw), "RunReleased", "the group was released")
    return written
