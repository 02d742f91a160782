"""Busy Nodes, the I/O (issue 43, item 2; decisions in controller/rules/busy.py): between the
reservation (the Nodes are cordoned) and the Workflow's submission, a Run whose
``spec.busyNodes.policy`` is ``drain`` or ``waitForIdle`` waits, phase ``Admitted``, condition
``NodesIdle=False``, until its Nodes are ready for the checks; the loop looks again every
``controller.rules.busy.POLL_SECONDS`` (controller/rules/requeue.py). Once they are,
``NodesIdle=True`` is recorded and the Workflow is submitted; after ``timeoutSeconds`` the Run
ends Inconclusive (``DrainTimedOut`` or ``NodesNotIdle``) naming the Pods, and its Nodes stay
reserved as for every Inconclusive Run.

Every write is safe to repeat and to interrupt: an eviction of a Pod already being deleted is
never sent (``drain_plan``), an eviction is conditioned on the Pod's uid, and the status is
written only when what it says changes. The wait's start is the condition's
lastTransitionTime, so a restarted controller keeps the same deadline."""

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from controller.reconcile import events
from controller.reconcile.state import Context, log
from controller.rules.busy import (
    CONDITION,
    BusyPolicy,
    busy_policy,
    drain_plan,
    idle_shortfall,
    named,
    pod_name,
    requested_resources,
    timed_out,
    wait_started,
    waiting,
)
from controller.rules.runview import ParticipantRef, RunView, run_view
from kubeio.client import Obj, resource_path
from kubeio.errors import ApiError, Conflict, NotFound, TooManyRequests
from shared.conditions import set_condition
from shared.run import Phase

WAITING = {"drain": "Draining", "waitForIdle": "WaitingForIdle"}
TIMED_OUT = {"drain": "DrainTimedOut", "waitForIdle": "NodesNotIdle"}


async def _pods_on(ctx: Context, node: str) -> list[Obj]:
    listed = await ctx.kube.get(resource_path("v1", "pods"), fieldSelector=f"spec.nodeName={node}")
    return list(listed.get("items") or [])


async def _evict(ctx: Context, pod: Mapping[str, Any]) -> str | None:
    """Ask the Eviction API to evict ``pod`` (its PodDisruptionBudgets decide); returns why it
    was refused (None: accepted, or the Pod is already gone)."""
    meta = pod["metadata"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "deleteOptions": {"preconditions": {"uid": meta["uid"]}},
    }
    try:
        await ctx.kube.create(resource_path("v1", "pods", meta["namespace"], meta["name"], "eviction"), body)
    except (NotFound, Conflict):
        return None  # gone, or replaced by another Pod of that name (the next list shows it)
    except TooManyRequests as exc:
        return f"eviction refused: {exc.message}"[:300]
    except ApiError as exc:
        return f"eviction failed: {exc}"[:300]
    log.info("pod evicted", pod=pod_name(pod), node=(pod.get("spec") or {}).get("nodeName"))
    return None


async def _drain(ctx: Context, participants: Sequence[ParticipantRef], listed: Sequence[list[Obj]]) -> list[str]:
    problems = []
    for participant, pods in zip(participants, listed, strict=True):
        plan = drain_plan(pods, ctx.namespace)
        refusals = await asyncio.gather(*(_evict(ctx, pod) for pod in plan.evict))
        why = {pod_name(p): r for p, r in zip(plan.evict, refusals, strict=True) if r}
        if plan.remaining:
            each = [f"{name} ({why.get(name, 'leaving')})" for name in plan.remaining]
            problems.append(f"Node {participant.node_name}: {named(each)}")
    return problems


def _idle(ctx: Context, run: RunView, listed: Sequence[list[Obj]]) -> list[str]:
    requested = requested_resources((run.raw.get("spec") or {}).get("checks") or [])
    problems = []
    for participant, pods in zip(run.participants, listed, strict=True):
        cached = ctx.nodes.items.get(f"/{participant.node_name}")
        allocatable = cached.allocatable_raw if cached is not None else {}
        problems += [f"Node {participant.node_name}: {p}" for p in idle_shortfall(requested, allocatable, pods)]
    return problems


async def nodes_ready(ctx: Context, run: RunView) -> RunView | None:
    """The Run (as written, when this pass recorded ``NodesIdle=True``) once its checks may
    start; None while it waits (status written) or when it has just ended."""
    if not waiting(run):
        return run
    policy = busy_policy(run.raw.get("spec") or {})
    listed = await asyncio.gather(*(_pods_on(ctx, p.node_name) for p in run.participants))
    if policy.policy == "drain":
        problems = await _drain(ctx, run.participants, listed)
    else:
        problems = _idle(ctx, run, listed)
    now = ctx.clock()
    if not problems:
        conditions = set_condition(
            run.conditions,
            type_=CONDITION,
            status=True,
            reason="NodesIdle",
            message="drained: no Pod left to evict" if policy.policy == "drain" else "the checks' resources are free",
            generation=run.generation,
            now=now,
        )
        written = await ctx.patch_run_status(run.raw, {"conditions": conditions})
        log.info("busy nodes ready", run=run.name, policy=policy.policy)
        # Go on from the Run as written: the submission rewrites status.conditions, which from
        # the view read before would drop NodesIdle=True again.
        return run_view(written)
    if timed_out(wait_started(run.conditions), now, policy.timeout_seconds):
        await _end(ctx, run, policy, problems)
        return None
    message = _waiting_message(policy, problems)
    conditions = set_condition(
        run.conditions,
        type_=CONDITION,
        status=False,
        reason=WAITING[policy.policy],
        message=message,
        generation=run.generation,
        now=now,
    )
    if conditions != list(run.conditions) or run.phase != Phase.ADMITTED:
        status = {"phase": Phase.ADMITTED.value, "reason": WAITING[policy.policy], "message": message[:4000]}
        await ctx.patch_run_status(run.raw, status | {"conditions": conditions})
        log.info("run waits for busy nodes", run=run.name, policy=policy.policy, problems=problems[:5])
    return None


def _waiting_message(policy: BusyPolicy, problems: list[str]) -> str:
    what = "waiting for Pods to leave" if policy.policy == "drain" else "waiting for the checks' resources"
    return f"{what} (at most {policy.timeout_seconds}s): " + "; ".join(problems)


async def _end(ctx: Context, run: RunView, policy: BusyPolicy, problems: list[str]) -> None:
    reason = TIMED_OUT[policy.policy]
    if policy.policy == "drain":
        what = f"the Nodes were not drained within {policy.timeout_seconds}s; Pods that would not leave: "
    else:
        what = f"the checks' resources were not free within {policy.timeout_seconds}s: "
    message = (
        what + "; ".join(problems) + ". No check ran; the Nodes stay reserved and cordoned until spec.release "
        "(or the retry policy's next attempt): resolve what holds them, then release or request them again"
    )
    conditions = set_condition(
        run.conditions,
        type_=CONDITION,
        status=False,
        reason=reason,
        message=message,
        generation=run.generation,
        now=ctx.clock(),
    )
    status = {
        "phase": Phase.INCONCLUSIVE.value,
        "reason": reason,
        "message": message[:4000],
        "conditions": conditions,
        "completionTime": ctx.timestamp(),
    }
    await ctx.patch_run_status(run.raw, status)
    log.warning("busy nodes: wait timed out", run=run.name, reason=reason, problems=problems[:5])
    await events.emit(ctx, events.run_ref(run.raw), reason, message[:1000], warning=True)
