"""Per-Run reconciliation: finish half-admitted Runs, cancel, and release.

Level-based: each call looks at the Run as it is now and moves it one step closer to where
it should be. Terminal verdicts come from evidence (issue 5); here a Run reaches Canceled,
and a terminal Run with ``spec.release: true`` gives its Nodes back."""

from controller.admission import AdmissionAborted, complete_admission, release_nodes, submit_workflow
from controller.state import Context, log
from kubeio.client import Obj, resource_path
from kubeio.errors import NotFound
from shared import keys
from shared.conditions import is_true, set_condition
from shared.run import TERMINAL_PHASES, Phase

WORKFLOWS = "argoproj.io/v1alpha1"


async def reconcile_run(ctx: Context, run: Obj) -> None:
    status = run.get("status") or {}
    phase = status.get("phase") or Phase.PENDING
    spec = run["spec"]
    if phase in TERMINAL_PHASES:
        if spec.get("release") and not is_true(status.get("conditions") or [], "Released"):
            await release(ctx, run)
        return
    if spec.get("cancel"):
        await cancel(ctx, run)
        return
    if phase in {Phase.PENDING, Phase.ADMITTED}:
        try:
            await complete_admission(ctx, run, None)
        except AdmissionAborted as exc:
            log.warning("half-admitted run rolled back", run=run["metadata"]["name"], reason=str(exc))
    elif phase == Phase.RUNNING and not (status.get("workflow") or {}).get("uid"):
        await submit_workflow(ctx, run)


async def _backend_workloads(ctx: Context, run: Obj) -> list[str]:
    selector = f"{keys.RUN_UID_LABEL}={run['metadata']['uid']}"
    found = []
    pods = await ctx.kube.get(resource_path("v1", "pods", ctx.namespace), labelSelector=selector)
    found += [f"Pod/{p['metadata']['name']}" for p in pods.get("items", [])]
    jobs = await ctx.kube.get(resource_path("kubeflow.org/v2beta1", "mpijobs", ctx.namespace), labelSelector=selector)
    found += [f"MPIJob/{j['metadata']['name']}" for j in jobs.get("items", [])]
    return found


async def cancel(ctx: Context, run: Obj) -> None:
    """Ask Argo to stop the Workflow; end Canceled once no backend workload remains."""
    name = run["metadata"]["name"]
    workflow = await ctx.kube.get_or_none(resource_path(WORKFLOWS, "workflows", ctx.namespace, name))
    if workflow is not None and workflow.get("spec", {}).get("shutdown") != "Terminate":
        await ctx.kube.merge_patch(
            resource_path(WORKFLOWS, "workflows", ctx.namespace, name),
            {"metadata": {"uid": workflow["metadata"]["uid"]}, "spec": {"shutdown": "Terminate"}},
        )
    remaining = await _backend_workloads(ctx, run)
    now = ctx.clock()
    conditions = run.get("status", {}).get("conditions") or []
    generation = run["metadata"].get("generation")
    if remaining:
        conditions = set_condition(
            conditions,
            type_="WorkloadCleanupComplete",
            status=False,
            reason="WorkloadsRemain",
            message="waiting for " + ", ".join(remaining[:5]),
            generation=generation,
            now=now,
        )
        await ctx.patch_run_status(run, {"conditions": conditions})
        return
    conditions = set_condition(
        conditions,
        type_="WorkloadCleanupComplete",
        status=True,
        reason="NoWorkloads",
        message="no backend workload remains",
        generation=generation,
        now=now,
    )
    await ctx.patch_run_status(
        run,
        {
            "phase": Phase.CANCELED,
            "reason": "Canceled",
            "message": "canceled by spec.cancel; the group stays reserved until spec.release",
            "conditions": conditions,
            "completionTime": ctx.timestamp(),
        },
    )
    log.info("run canceled", run=name)


async def release(ctx: Context, run: Obj) -> None:
    """Give the group back: release every Node, drop the ledger group, mark Released."""
    name = run["metadata"]["name"]
    await release_nodes(ctx, run)
    ledger = await ctx.read_ledger()
    if name in ledger.groups:
        await ctx.write_ledger(ledger.without(name))
    conditions = set_condition(
        run.get("status", {}).get("conditions") or [],
        type_="Released",
        status=True,
        reason="Released",
        message="reservations removed; Signal's cordon lifted (an operator's cordon stays)",
        generation=run["metadata"].get("generation"),
        now=ctx.clock(),
    )
    try:
        await ctx.patch_run_status(run, {"conditions": conditions})
    except NotFound:
        return
    log.info("run released", run=name)
