"""Reservation writes on Nodes: reserve one Node for a Run (conditioned on its
resourceVersion), release a Run's Nodes (only what Signal set: an operator's cordon stays),
and roll back an admission. Each write is safe to repeat and to interrupt: it reads the Node,
decides the patch (controller/rules/manifests.py: ``reservation_patch``, ``release_patch``) and
retries on a Conflict with a fresh read.

A reservation's first try is decided on the informer's view of the Node when that view says
the Node can be reserved (the read the selection already made); the patch carries the view's
resourceVersion, so a stale view costs one Conflict, then an uncached read decides. Every
other outcome (reserved, cordoned, gone) is only ever concluded from an uncached read.

A group's Nodes are written ``NODE_WRITE_CONCURRENCY`` at a time (``each_node``): each write is
independent of the others (its own Node, its own resourceVersion), so their order is free, and
every write started has ended before the caller goes on (a rollback never races a reservation
still in flight)."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from controller.reconcile.state import Context, NotLeader, log
from controller.rules.manifests import release_patch, reservation_patch
from controller.rules.nodes import NodeView, node_view, patch_basis
from controller.rules.runview import ParticipantRef, RunView
from kubeio.client import resource_path
from kubeio.errors import Conflict, NotFound
from shared import quarantine

NODE_PATCH_ATTEMPTS = 5
NODE_WRITE_CONCURRENCY = 32
"""Node writes of one group in flight at once (reservation, release). 8 until 2026-12-06: at 32
a group of 64's Node PATCHes took 45-68 ms against 87-124 ms at 8 (bench/admission.py, 2,000
Nodes, the same machine and hour); the API server, not the controller, sets the pace."""


class AdmissionAborted(RuntimeError):
    """The admission could not complete; everything it did was rolled back."""


def _node_path(name: str) -> str:
    return resource_path("v1", "nodes", name=name)


async def each_node(calls: Sequence[Callable[[], Awaitable[None]]], *, stop_at_first_error: bool) -> None:
    """Await ``calls``, ``NODE_WRITE_CONCURRENCY`` at a time, all started ones to their end.
    With ``stop_at_first_error`` those not started yet are skipped once one has failed. Raises
    the first NotLeader (this replica may no longer write), else the first AdmissionAborted, else
    the first other error."""
    gate = asyncio.Semaphore(NODE_WRITE_CONCURRENCY)
    failed = False

    async def one(call: Callable[[], Awaitable[None]]) -> None:
        nonlocal failed
        async with gate:
            if failed and stop_at_first_error:
                return
            try:
                await call()
            except Exception:
                failed = True
                raise

    outcomes = await asyncio.gather(*(one(call) for call in calls), return_exceptions=True)
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    fenced = [e for e in errors if isinstance(e, NotLeader)]  # the loop stops on it; hide it never
    aborted = [e for e in errors if isinstance(e, AdmissionAborted)]
    if errors:
        raise (fenced or aborted or errors)[0]


async def reserve_all(ctx: Context, run: RunView) -> None:
    """Reserve every participant of ``run`` (idempotent), or raise AdmissionAborted once the
    reservations in flight have ended (none is started after the first refusal)."""
    await each_node([_reserve_call(ctx, run, p) for p in run.participants], stop_at_first_error=True)


def _reserve_call(ctx: Context, run: RunView, participant: ParticipantRef) -> Callable[[], Awaitable[None]]:
    return lambda: reserve(ctx, run, participant)


async def reserve(ctx: Context, run: RunView, participant: ParticipantRef) -> None:
    """Reserve one Node for ``run`` (idempotent), or raise AdmissionAborted."""
    uid = run.uid
    cached = ctx.nodes.items.get(f"/{participant.node_name}")
    cordon_adopted = quarantine.adopts_cordon(run.raw.get("spec") or {})
    for _ in range(NODE_PATCH_ATTEMPTS):
        if cached is not None and reservable(cached, participant, cordon_adopted=cordon_adopted):
            view, node = cached, patch_basis(cached)
        else:
            read = await ctx.kube.get_or_none(_node_path(participant.node_name))
            if read is None or read["metadata"]["uid"] != participant.node_uid:
                raise AdmissionAborted(f"Node {participant.node_name} is gone or was replaced")
            view, node = node_view(read), read
        cached = None  # a Conflict means the view was stale: read afresh
        if view.reservation is not None:
            if view.reservation.run_uid == uid:
                return
            raise AdmissionAborted(f"Node {view.name} is reserved by Run {view.reservation.run_name}")
        if (view.unschedulable and not cordon_adopted) or not view.ready:
            raise AdmissionAborted(f"Node {view.name} is cordoned by someone else or not Ready")
        try:
            await ctx.kube.merge_patch(_node_path(view.name), reservation_patch(node, run.raw, participant.index))
            return
        except Conflict:
            continue
    raise AdmissionAborted(f"Node {participant.node_name} kept changing; could not reserve it")


def reservable(view: NodeView, participant: ParticipantRef, *, cordon_adopted: bool = False) -> bool:
    """Whether ``view`` shows ``participant``'s Node (same uid) free to reserve: Ready, not
    cordoned by anyone (unless the Run adopts the cordon: shared/quarantine.py), not reserved."""
    cordoned = view.unschedulable and not cordon_adopted
    return view.uid == participant.node_uid and view.reservation is None and view.ready and not cordoned


async def release_nodes(
    ctx: Context,
    run: RunView,
    *,
    restore_request: bool = False,
    next_attempt: int | None = None,
    lift_quarantine: bool = False,
) -> None:
    """Remove ``run``'s reservation from every participant that still carries it (each one is
    tried even when another fails; then the first failure is raised). ``lift_quarantine`` (a
    release after a Pass): also lift what the Run adopted on each Node (shared/quarantine.py)."""
    entries = {p.get("nodeName"): p for p in (run.raw.get("spec") or {}).get("participants") or []}

    def call(name: str) -> Callable[[], Awaitable[None]]:
        request = run.profile_name if restore_request else None
        lift = entries.get(name) if lift_quarantine else None
        return lambda: release_node(ctx, name, run.uid, restore_request=request, next_attempt=next_attempt, lift=lift)

    await each_node([call(p.node_name) for p in run.participants], stop_at_first_error=False)


async def release_node(
    ctx: Context,
    name: str,
    run_uid: str,
    *,
    restore_request: str | None = None,
    next_attempt: int | None = None,
    lift: Mapping[str, Any] | None = None,
) -> None:
    """Remove Run ``run_uid``'s reservation from Node ``name``; ``restore_request``: the profile
    whose request the Node gets back, ``lift``: the Run's participant entry whose adopted
    quarantine goes with it (manifests.release_patch)."""
    for _ in range(NODE_PATCH_ATTEMPTS):
        node = await ctx.kube.get_or_none(_node_path(name))
        if node is None:
            return
        if lift is not None and node["metadata"].get("uid") != lift.get("nodeUID"):
            lift = None  # a replaced Node: what the Run adopted was on another
        patch = release_patch(node, run_uid, restore_request=restore_request, next_attempt=next_attempt, lift=lift)
        if patch is None:
            return
        try:
            await ctx.kube.merge_patch(_node_path(name), patch)
            lifted = quarantine.recorded(lift) if lift is not None else (False, [])
            log.info("node released", node=name, run_uid=run_uid, quarantine_lifted=bool(lifted[0] or lifted[1]))
            return
        except Conflict:
            continue
    raise Conflict(409, "Conflict", f"Node {name} kept changing while releasing Run {run_uid}")


async def rollback(ctx: Context, run: RunView, why: str) -> None:
    """Undo an admission: release reservations, delete the Run, drop its ledger group."""
    name = run.name
    log.warning("rolling back admission", run=name, reason=why)
    await release_nodes(ctx, run, restore_request=True)
    with contextlib.suppress(NotFound, Conflict):
        await ctx.kube.delete(ctx.run_path(name), uid=run.uid, propagation="Background")
    await ctx.drop_group(name)
