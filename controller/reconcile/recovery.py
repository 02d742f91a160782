"""Orphan recovery, at start-up and on every pass (SPEC §4.6):

* a Node reserved for a Run that does not exist (checked with an uncached GET) is released;
* a ledger group whose Run does not exist is dropped (admission is sequential within the
  fenced leader, so no admission is between its ledger write and its Run create);
* a ledger group whose Run is terminal and released is dropped;
* a Workflow whose Run is missing (or has another uid) is deleted;
* at a resync, a ledger segment no head names (one written before a compare-and-swap that
  lost, or left by a crash) is deleted once it is older than ``SEGMENT_GRACE``: looked for
  only when one may have been left, so that a resync lists nothing otherwise.
Half-admitted Runs are finished or rolled back by ``runs.reconcile_run``.

Each object is repaired apart from the others, and ``each_pass`` runs the fleet-wide passes
(recovery, retention, re-assertion) apart from each other: one object the API server refuses
to change holds back nothing else; the first failure is raised afterwards, for the backoff."""

from collections.abc import Awaitable, Callable, Sequence
from time import monotonic

from controller.reconcile.ledgerstore import delete_unnamed
from controller.reconcile.reservations import release_node
from controller.reconcile.state import Context, NotLeader, log
from controller.rules.ledger import LedgerError
from controller.rules.runview import RunView
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
    """One recovery pass; returns the number of repairs made. Each Node, ledger group and
    Workflow is repaired apart: one the API server refuses (a webhook, a policy) is logged and
    the others are still repaired; then the first failure is raised, for the pass's backoff."""
    failures: list[Exception] = []
    repairs = await _release_orphaned_nodes(ctx, failures)
    repairs += await _drop_orphaned_groups(ctx, failures)
    runs_by_name = {r.name: r for r in ctx.runs.items.values()}
    repairs += await _delete_orphan_workflows(ctx, runs_by_name, failures)
    if failures:
        raise failures[0]
    return repairs


def _failed(failures: list[Exception], exc: Exception, what: str) -> None:
    if isinstance(exc, NotLeader):
        raise exc
    log.warning("recovery could not repair; the others go on", what=what, error=f"{type(exc).__name__}: {exc}"[:300])
    failures.append(exc)


async def _release_orphaned_nodes(ctx: Context, failures: list[Exception]) -> int:
    """Release each Node held by Signal's taint for a Run of this installation that does not
    exist, and remove each reservation label that Signal's taint does not back (its kubelet's
    or anyone's: it reserves nothing, and must not keep the Node from recurrence or requests).
    A Node whose request is given back gets the profile of its Run's ledger group, never the one
    its reservation annotation names (the kubelet's to write)."""
    repairs = 0
    live_uids = {r.uid for r in ctx.runs.items.values()}
    ledger = None
    for node in list(ctx.nodes.items.values()):
        stray = node.stray_reservation
        held = node.reservation
        uid = held.run_uid if held else node.signal_taint_uid
        if uid is None and stray is None:
            continue
        try:
            if uid is None and stray is not None:
                log.warning("removing a reservation label without Signal's taint", node=node.name, label_uid=stray)
                await release_node(ctx, node.name, stray)
                repairs += 1
                continue
            if uid in live_uids or (held and held.run_namespace and held.run_namespace != ctx.namespace):
                continue  # live, or held (by the taint) by another installation of Signal
            actual = await _run_uid(ctx, held.run_name, held.run_namespace) if held and held.run_name else None
            if uid is not None and actual == uid:
                continue
            ledger = ledger or await ctx.read_ledger()
            group = ledger.groups.get(held.run_name) if held else None
            request = group.profile if group is not None and node.name in group.nodes else None
            log.warning("releasing orphaned reservation", node=node.name, run_uid=uid, restored_request=request)
            await release_node(ctx, node.name, uid or "", restore_request=request)
            repairs += 1
        except Exception as exc:
            _failed(failures, exc, f"the orphaned reservation of Node {node.name}")
    return repairs


async def _drop_orphaned_groups(ctx: Context, failures: list[Exception]) -> int:
    repairs = 0
    try:
        ledger = await ctx.read_ledger()
    except LedgerError:
        return 0  # nothing to drop from (ctx.ledger_problem says why); once repaired, the next pass
    runs_by_name = {r.name: r for r in ctx.runs.items.values()}
    for name in sorted(ledger.groups):
        run = runs_by_name.get(name)
        try:
            if run is None and await _run_uid(ctx, name, ctx.namespace) is None:
                reason = "its Run does not exist"
            elif run is not None and run.is_true("Released"):
                reason = "its Run was released"
            else:
                continue
            log.warning("dropping ledger group", run=name, reason=reason)
            ledger = await ctx.write_ledger(ledger.without(name))
            repairs += 1
        except Exception as exc:
            _failed(failures, exc, f"the ledger group of Run {name}")
            break  # the ledger may have changed: the next pass reads it again
    return repairs


SEGMENT_SWEEP_SECONDS = 3600.0
"""How long a resync may go without looking for segments no head names, with none known."""


async def collect_segments(ctx: Context) -> int:
    """Delete the ledger segments that the head does not name, when some may have been left
    (``ctx.segments_litter``) or an hour after the last look (a deposed leader's, written after
    this term's first look): otherwise no LIST. None while the ledger cannot be read (what it
    names is then not known)."""
    if not ctx.segments_litter and monotonic() - ctx.segments_swept < SEGMENT_SWEEP_SECONDS:
        return 0
    try:
        ledger = await ctx.read_ledger()
    except LedgerError:
        return 0
    deleted, kept = await delete_unnamed(ctx.kube, ctx.namespace, ledger.digests, ledger.fence, ctx.clock())
    ctx.segments_litter, ctx.segments_swept = kept > 0, monotonic()
    return deleted


async def _delete_orphan_workflows(ctx: Context, runs_by_name: dict[str, RunView], failures: list[Exception]) -> int:
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
        try:
            if await _run_uid(ctx, run_name, ctx.namespace) == run_uid:
                continue
            log.warning("deleting orphaned workflow", workflow=meta["name"])
            await ctx.kube.delete(f"{path}/{meta['name']}", uid=meta["uid"], propagation="Background")
        except (NotFound, Conflict):
            continue
        except Exception as exc:
            _failed(failures, exc, f"the orphaned Workflow {meta['name']}")
            continue
        repairs += 1
    return repairs


async def each_pass(ctx: Context, passes: Sequence[Callable[[Context], Awaitable[object]]]) -> None:
    """Run every one of the fleet-wide passes, each whatever the ones before it raised, then
    raise the first failure (for the key's backoff): a pass stopped by one object (a Node the
    API refuses to release) must not hold back the others (retention, the re-assertion of Node
    projections). NotLeader stops at once; an unparsable ledger stops only what needs it."""
    failure: Exception | None = None
    for one in passes:
        try:
            await one(ctx)
        except NotLeader:
            raise
        except Exception as exc:
            if failure is not None:
                log.warning("fleet pass failed", fleet_pass=one.__name__, error=f"{type(exc).__name__}: {exc}"[:300])
            failure = failure or exc
    if failure is not None:
        raise failure
