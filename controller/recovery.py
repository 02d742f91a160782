"""Orphan recovery, at start-up and on every pass (SPEC §4.6):

* a Node reserved for a Run that does not exist (checked with an uncached GET) is released;
* a ledger group whose Run does not exist is dropped (admission is sequential within the
  fenced leader, so no admission is between its ledger write and its Run create);
* a ledger group whose Run is terminal and released is dropped;
* a Workflow whose Run is missing (or has another uid) is deleted.
Half-admitted Runs are finished or rolled back by ``runs.reconcile_run``."""

from controller.reservations import release_node
from controller.runview import RunView
from controller.state import Context, log
from kubeio.client import resource_path
from kubeio.errors import Conflict, NotFound
from shared import keys


async def _run_uid(ctx: Context, name: str, namespace: str) -> str | None:
    """The uid of Run ``namespace/name``, None if there is none. No name names no Run (a
    Workflow labelled with a Run's uid but not its name): never the Runs' collection."""
    if not name:
        return None
    run = await ctx.kube.get_or_none(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace or ctx.namespace, name))
    return None if run is None else str(run["metadata"]["uid"])


async def recover(ctx: Context) -> int:
    """One recovery pass; returns the number of repairs made."""
    repairs = 0
    live_uids = {r.uid for r in ctx.runs.items.values()}
    for node in list(ctx.nodes.items.values()):
        held = node.reservation
        uid = held.run_uid if held else node.signal_taint_uid
        if uid is None and not node.signal_tainted:
            continue
        if uid in live_uids or (held and held.run_namespace and held.run_namespace != ctx.namespace):
            continue  # live, or held by another installation of Signal (another namespace)
        actual = await _run_uid(ctx, held.run_name, held.run_namespace) if held and held.run_name else None
        if uid is not None and actual == uid:
            continue
        log.warning("releasing orphaned reservation", node=node.name, run_uid=uid)
        await release_node(ctx, node.name, uid or node.signal_taint_uid or "", restore_request=True)
        repairs += 1
    ledger = await ctx.read_ledger()
    runs_by_name = {r.name: r for r in ctx.runs.items.values()}
    for name in sorted(ledger.groups):
        run = runs_by_name.get(name)
        if run is None and await _run_uid(ctx, name, ctx.namespace) is None:
            reason = "its Run does not exist"
        elif run is not None and run.is_true("Released"):
            reason = "its Run was released"
        else:
            continue
        log.warning("dropping ledger group", run=name, reason=reason)
        ledger = await ctx.write_ledger(ledger.without(name))
        repairs += 1
    repairs += await _delete_orphan_workflows(ctx, runs_by_name)
    return repairs


async def _delete_orphan_workflows(ctx: Context, runs_by_name: dict[str, RunView]) -> int:
    """Delete Signal's Workflows whose Run is gone; the cache nominates, an uncached GET confirms."""
    repairs = 0
    path = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, ctx.namespace)
    for workflow in list(ctx.workflows.items.values()):
        meta = workflow["metadata"]
        labels = meta.get("labels") or {}
        run_name, run_uid = labels.get(keys.RUN_NAME_LABEL, ""), labels.get(keys.RUN_UID_LABEL)
        cached = runs_by_name.get(run_name)
        if cached is not None and cached.uid == run_uid:
            continue
        if await _run_uid(ctx, run_name, ctx.namespace) == run_uid:
            continue
        log.warning("deleting orphaned workflow", workflow=meta["name"])
        try:
            await ctx.kube.delete(f"{path}/{meta['name']}", uid=meta["uid"], propagation="Background")
        except (NotFound, Conflict):
            continue
        repairs += 1
    return repairs
