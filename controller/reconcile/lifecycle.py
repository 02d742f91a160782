"""What happens around finished Runs: cleanup of their Workflows and snapshots, retention of
a bounded number of terminal Runs per profile (never one the record cites), and recurrence
(re-requesting Nodes whose last result from a profile, in the profile's record, is older than
its interval; a recorded Pass its Run's evidence does not prove is due at once:
controller/reconcile/recordproof.py). I/O over the caches; the rules are
the pure functions ``due_for_recertification`` and ``expired_runs``."""

import contextlib
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from controller.reconcile.events import emit, node_ref
from controller.reconcile.reassert import record_of
from controller.reconcile.recordproof import proven
from controller.reconcile.state import Context, log
from controller.rules.nodes import NodeView
from controller.rules.runview import RunView
from kubeio.client import Obj, resource_path
from kubeio.errors import Conflict, NotFound
from shared import certified, keys
from shared.conditions import condition, set_condition
from shared.durations import DurationError, parse_duration

DEFAULT_KEEP = 10
UNPROVEN_COMPLETION = "1970-01-01T00:00:00Z"
"""The completion time recurrence gives a recorded Pass that its Run's evidence does not prove."""


def _parse_time(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def due_for_recertification(
    nodes: Iterable[NodeView], completed: Mapping[str, str], interval: timedelta, now: datetime
) -> list[str]:
    """Nodes last certified by the profile more than ``interval`` ago that are not reserved and
    not already requested. ``completed``: Node name -> completion time of its result in the
    profile's record (shared/certified.py), never what a Node's own annotation claims.

    Only what a Node's kubelet cannot write keeps a Node from being re-requested: Signal's taint
    (a reservation; NodeRestriction refuses a kubelet any change of its taints) and a request
    label (``keys.CERTIFY_LABEL``, under the prefix NodeRestriction keeps from kubelets: an
    operator's request stands). A reservation label without the taint, the old request label
    and a cordon (``spec.unschedulable``, which the Node's kubelet can set) do not: a Node must
    not be able to opt out of its own re-certification. The admission ledger's groups are
    excluded by the caller (``recur``)."""
    due = []
    for node in nodes:
        when = completed.get(node.name)
        finished = _parse_time(when) if when else None
        if finished is None or now - finished < interval:
            continue
        if node.signal_tainted or keys.CERTIFY_LABEL in node.labels:
            continue
        due.append(node.name)
    return sorted(due)


def legacy_requests(nodes: Iterable[NodeView], warned: Mapping[str, str]) -> list[NodeView]:
    """Nodes carrying the old, kubelet-writable request label (``keys.LEGACY_CERTIFY_LABEL``)
    that have not been warned of it for that value yet (``warned``: Node uid -> value)."""
    found = []
    for node in nodes:
        value = node.labels.get(keys.LEGACY_CERTIFY_LABEL)
        if value is not None and warned.get(node.uid) != value:
            found.append(node)
    return sorted(found, key=lambda n: n.name)


def expired_runs(runs: Iterable[RunView], keep: dict[str, int], cited: frozenset[str] = frozenset()) -> list[RunView]:
    """Terminal, released Runs beyond each profile's retention (newest kept). Runs still
    holding their group are never expired: deleting them would release the Nodes. Nor are the
    Runs ``cited`` (by uid) by a profile's certified-nodes record: their evidence is what proves
    a recorded Pass (controller/reconcile/recordproof.py); deleting it would take the Pass away."""
    by_profile: dict[str, list[RunView]] = {}
    for run in runs:
        if run.terminal and run.is_true("Released"):
            by_profile.setdefault(run.profile_name, []).append(run)
    expired = []
    for profile, finished in by_profile.items():
        finished.sort(key=lambda r: (r.completion_time, r.name), reverse=True)
        expired += [r for r in finished[keep.get(profile, DEFAULT_KEEP) :] if r.uid not in cited]
    return expired


def recurrence_interval(profile: Obj) -> timedelta | None:
    """Pure: the recurrence interval of a profile that reports itself Ready for its current
    generation; None when it has no (readable, positive) interval or is not Ready. A profile that
    is not Ready (an invalid spec, a source that no longer matches its digest) is never acted on:
    recurrence would request Nodes (label them) for a suite that cannot run."""
    spec, status = profile.get("spec") or {}, profile.get("status") or {}
    ready = condition(status.get("conditions") or [], "Ready")
    generation = (profile.get("metadata") or {}).get("generation")
    if ready is None or ready.get("status") != "True" or status.get("observedGeneration") != generation:
        return None
    text = (spec.get("recurrence") or {}).get("interval")
    if not isinstance(text, str):
        return None
    try:
        interval = parse_duration(text)
    except (DurationError, OverflowError):  # more days than a timedelta holds
        return None
    return interval if interval > timedelta() else None


async def recur(ctx: Context, profile: Obj) -> None:
    interval = recurrence_interval(profile)
    if interval is None:
        return
    name = profile["metadata"]["name"]
    record = record_of(profile)
    nodes = list(ctx.nodes.items.values())
    completed = {}
    for n in nodes:
        entry = certified.current(record, n.name, n.uid)
        if entry is not None:
            # A recorded Pass its Run's evidence does not prove is due now (issue 42).
            checked = await proven(ctx, name, n.name, entry)
            completed[n.name] = entry["completionTime"] if checked is entry else UNPROVEN_COMPLETION
    due = due_for_recertification(nodes, completed, interval, ctx.clock())
    held = (await ctx.read_ledger()).held_nodes() if due else set()
    for node_name in due:
        if node_name in held:
            continue  # a group being admitted or certified (the ledger is the controller's own)
        view = ctx.node_map()[node_name]
        patch = {"metadata": {"resourceVersion": view.resource_version, "labels": {keys.CERTIFY_LABEL: name}}}
        with contextlib.suppress(Conflict, NotFound):
            await ctx.kube.merge_patch(resource_path("v1", "nodes", name=node_name), patch)
            log.info("node re-requested for recurring certification", node=node_name, profile=name)


async def warn_legacy_requests(ctx: Context) -> None:
    """A Warning Event on each Node that carries the old request label, once per value in this
    process: it requests nothing (its own kubelet can write it), and the operator should know."""
    for node in legacy_requests(ctx.nodes.items.values(), ctx.legacy_warned):
        value = node.labels.get(keys.LEGACY_CERTIFY_LABEL, "")
        await emit(
            ctx,
            node_ref(node.name),
            "LegacyRequestIgnored",
            f"Node {node.name} carries {keys.LEGACY_CERTIFY_LABEL}={value}, which requests nothing: the Node's "
            f"own kubelet can write that label. To request certification, label it {keys.CERTIFY_LABEL}={value} "
            f"(signalctl request {value} {node.name}) and remove the old label.",
            warning=True,
        )
        ctx.legacy_warned[node.uid] = value
        log.warning("ignored the old request label", node=node.name, profile=value)


async def enforce_retention(ctx: Context) -> None:
    keep = {
        p["metadata"]["name"]: int(((p.get("spec") or {}).get("retention") or {}).get("keepTerminalRuns", DEFAULT_KEEP))
        for p in ctx.profiles.items.values()
    }
    cited = frozenset(e["runUID"] for p in ctx.profiles.items.values() for e in record_of(p).values())
    for run in expired_runs(ctx.runs.items.values(), keep, cited):
        with contextlib.suppress(NotFound, Conflict):
            await ctx.kube.delete(ctx.run_path(run.name), uid=run.uid, propagation="Background")
            log.info("terminal run deleted by retention", run=run.name)


async def clean_children(ctx: Context, run: RunView) -> None:
    """Delete a terminal Run's Workflow and snapshot ConfigMap (its evidence stays)."""
    if run.is_true("ResourcesCleaned"):
        return
    if run.workflow is not None:
        with contextlib.suppress(NotFound, Conflict):
            path = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, ctx.namespace, run.workflow.name)
            await ctx.kube.delete(path, uid=run.workflow.uid, propagation="Background")
    with contextlib.suppress(NotFound):
        await ctx.kube.delete(resource_path("v1", "configmaps", ctx.namespace, run.snapshot))
    conditions = set_condition(
        run.conditions,
        type_="ResourcesCleaned",
        status=True,
        reason="WorkflowAndSnapshotDeleted",
        message="the Workflow and the script snapshot were deleted; the evidence stays",
        generation=run.generation,
        now=ctx.clock(),
    )
    with contextlib.suppress(NotFound):
        await ctx.patch_run_status(run.raw, {"conditions": conditions})
