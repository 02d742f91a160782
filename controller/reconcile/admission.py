"""Admission of a group of Nodes for a Ready profile, in a recoverable order:

1. add the group to the admission ledger (compare-and-swap: budgets and Node uniqueness);
2. create the Run (deterministic name);
3. re-read the ledger: our fence and our group must still be there (else roll back); and, at
   the same time, create the Run-owned immutable snapshot ConfigMap with the source's exact
   bytes;
4. reserve every Node, one patch each, conditioned on the resourceVersion it was decided on
   (several at once: controller/reconcile/reservations.py ``each_node``);
5. create the Workflow and mark the Run Running.

A crash between any two writes leaves a state that recovery completes or rolls back. Any
failure part-way rolls back every reservation made (``rollback``)."""

import asyncio
import contextlib

from controller.reconcile import events
from controller.reconcile.busyio import nodes_ready
from controller.reconcile.reservations import AdmissionAborted, reserve_all, rollback
from controller.reconcile.state import Context, log
from controller.rules.ledger import Group, Ledger
from controller.rules.manifests import (
    GROUP_HASH_LABEL,
    controlled_by,
    group_hash,
    new_nonce,
    next_ordinal,
    run_manifest,
    run_name,
    snapshot_manifest,
    workflow_manifest,
)
from controller.rules.runview import RunView, run_view
from controller.rules.selection import Selection
from controller.rules.workqueue import TerminalError
from kubeio.client import Obj, resource_path
from kubeio.errors import AlreadyExists, Conflict, NotFound
from shared import keys, snapshot
from shared.conditions import set_condition
from shared.digests import bundle_digest, template_digest
from shared.profile import CertificationProfile


async def admit(
    ctx: Context, profile: CertificationProfile, ledger: Ledger, selection: Selection, source: Obj, digest: str
) -> Obj:
    """Run all admission writes for ``selection``, chosen against ``ledger`` (read uncached);
    the ledger write is conditioned on that read. Returns the Running Run."""
    attempt = max(
        (n.next_attempt[1] for n in selection.nodes if n.next_attempt and n.next_attempt[0] == profile.metadata.name),
        default=1,
    )
    ghash = group_hash(profile.metadata.uid or "", attempt, selection.nodes)
    group_runs = (r.name for r in ctx.runs.items.values() if r.labels.get(GROUP_HASH_LABEL) == ghash)
    name = run_name(profile.metadata.name, ghash, next_ordinal(profile.metadata.name, ghash, group_runs))
    bound = log.bind(run=name, profile=profile.metadata.name, nodes=len(selection.nodes))
    await ctx.write_ledger(
        ledger.with_group(name, Group(profile.metadata.name, tuple(n.name for n in selection.nodes)))
    )
    body = run_manifest(
        profile=profile,
        nodes=selection.nodes,
        name=name,
        namespace=ctx.namespace,
        ghash=ghash,
        source_digest=digest,
        attempt=attempt,
        snapshot_nonce=new_nonce(),
    )
    try:
        run = await ctx.kube.create(ctx.run_path(), body)
    except AlreadyExists:
        run = await ctx.kube.get(ctx.run_path(name))
        if not _same_admission(run, body):
            # A Run of that name is another admission (e.g. an older, finished Run of the same
            # group that the cache had not shown): never adopt it.
            ledger = await ctx.read_ledger()
            await ctx.write_ledger(ledger.without(name))
            raise AdmissionAborted(f"Run {name} already exists for another admission; will retry") from None
    bound.info("run created", uid=run["metadata"]["uid"])
    try:
        return await complete_admission(ctx, run_view(run), source)
    except TerminalError as exc:
        # The Run's, not the profile's (a Workflow of the Run's name that it does not own): the
        # Run's own key ends it; the profile goes on admitting its other groups.
        raise AdmissionAborted(f"Run {name}: {exc.message}") from None


async def check_template(ctx: Context, run: RunView) -> None:
    """The WorkflowTemplate every step runs must be the installed one (issue 42 H-A): with a
    configured digest, a template that is missing or differs ends the Run (``TerminalError``:
    Inconclusive, ``WorkflowTemplateMismatch``, a condition and an Event), before anything
    of it runs."""
    if not ctx.workflow_template_digest:
        return
    path = resource_path(keys.ARGO_API_VERSION, "workflowtemplates", ctx.namespace, keys.WORKFLOW_TEMPLATE)
    live = await ctx.kube.get_or_none(path)
    found = template_digest(live) if live is not None else "none (the template is missing)"
    if found != ctx.workflow_template_digest:
        raise TerminalError(
            "WorkflowTemplateMismatch",
            f"WorkflowTemplate {ctx.namespace}/{keys.WORKFLOW_TEMPLATE} has digest {found}, not the configured "
            f"{ctx.workflow_template_digest}; no Workflow of Run {run.name} was submitted. Re-apply deploy/ "
            "(only installers may write the template) and request the Nodes again",
        )


def _same_admission(existing: Obj, wanted: Obj) -> bool:
    """An existing Run is this admission only if it is still being admitted, for the same
    profile, group (Node uids) and attempt."""
    phase = (existing.get("status") or {}).get("phase") or "Pending"
    spec, want = existing["spec"], wanted["spec"]
    return (
        phase in {"Pending", "Admitted"}
        and spec["profile"] == want["profile"]
        and spec["attempt"] == want["attempt"]
        and [p["nodeUID"] for p in spec["participants"]] == [p["nodeUID"] for p in want["participants"]]
    )


async def complete_admission(ctx: Context, run: RunView, source: Obj | None) -> Obj:
    """Steps 3-5 for a Run that exists; also how recovery finishes a half-admitted Run.
    ``source`` is the verified source ConfigMap, or None to re-read and re-verify it."""
    name = run.name
    # The ledger's re-read and the snapshot at once (one round trip less before the first Node
    # write): a snapshot is the Run's own object, harmless until a Node is reserved, and goes
    # with the Run if the ledger no longer holds the group. No Node is written before both end.
    reading, snapshot = await asyncio.gather(
        ctx.read_ledger(), _ensure_snapshot(ctx, run, source), return_exceptions=True
    )
    if isinstance(reading, BaseException):
        raise reading
    if name not in reading.groups:
        await rollback(ctx, run, "the admission ledger does not hold this group")
        raise AdmissionAborted(f"Run {name}: group missing from the admission ledger")
    try:
        if isinstance(snapshot, BaseException):
            raise snapshot
        await reserve_all(ctx, run)
    except AdmissionAborted as exc:
        await rollback(ctx, run, str(exc))
        raise
    ready = await nodes_ready(ctx, run)  # busyNodes: drain or wait for free (controller/reconcile/busyio.py)
    if ready is None:
        return run.raw
    return await submit_workflow(ctx, ready)


async def _ensure_snapshot(ctx: Context, run: RunView, source: Obj | None) -> None:
    """The Run's snapshot exists and is the Run's own (``shared.snapshot.problem``: controlled
    by the Run, immutable, its bytes the Run's source digest). One that is not is never
    adopted: the Run's own (a bad copy) is deleted, uid-conditioned, and made again from the
    verified source; anyone else's ends the admission (rolled back; the group's next Run gets a
    fresh snapshot name, ``manifests.snapshot_name``)."""
    collection = resource_path("v1", "configmaps", ctx.namespace)
    if source is not None:
        # Admitting now: the snapshot is new unless this admission was interrupted and resumed,
        # so it is created without a read first; one that exists is checked below.
        with contextlib.suppress(AlreadyExists):
            await ctx.kube.create(collection, snapshot_manifest(run.raw, source))
            return
    existing = await ctx.kube.get_or_none(f"{collection}/{run.snapshot}")
    if existing is not None:
        why = snapshot.problem(existing, run.uid, run.source_digest)
        if why is None:
            return
        if not controlled_by(existing, run.raw):
            raise AdmissionAborted(
                f"snapshot ConfigMap {ctx.namespace}/{run.snapshot} exists but is not Run {run.name}'s ({why}); "
                "it is never adopted: the Run is rolled back and the group's next Run uses a fresh snapshot "
                "name; find who created it"
            )
        log.warning("replacing a bad snapshot of the Run", run=run.name, snapshot=run.snapshot, problem=why)
        with contextlib.suppress(NotFound, Conflict):
            await ctx.kube.delete(f"{collection}/{run.snapshot}", uid=existing["metadata"]["uid"])
    if source is None:
        source = await _reverify_source(ctx, run)
    try:
        await ctx.kube.create(collection, snapshot_manifest(run.raw, source))
    except AlreadyExists:
        again = await ctx.kube.get_or_none(f"{collection}/{run.snapshot}")
        why = "it is gone" if again is None else snapshot.problem(again, run.uid, run.source_digest)
        if why is not None:
            raise AdmissionAborted(
                f"snapshot ConfigMap {ctx.namespace}/{run.snapshot} is not the Run's: {why}"
            ) from None


async def _reverify_source(ctx: Context, run: RunView) -> Obj:
    profile = ctx.profiles.items.get(f"/{run.profile_name}")
    if profile is None or profile["metadata"]["uid"] != run.profile_uid:
        raise AdmissionAborted("the profile of this Run is gone or was replaced")
    ref = profile["spec"]["source"]
    source = await ctx.kube.get_or_none(resource_path("v1", "configmaps", ref["namespace"], ref["name"]))
    if source is None or source.get("immutable") is not True:
        raise AdmissionAborted("the source ConfigMap is gone or mutable")
    if bundle_digest(source.get("data") or {}, source.get("binaryData") or {}) != run.source_digest:
        raise AdmissionAborted("the source ConfigMap no longer matches the Run's digest")
    return source


async def submit_workflow(ctx: Context, run: RunView) -> Obj:
    """Create the Run's Workflow (idempotent) and mark the Run Running; never before the
    signal-adapter WorkflowTemplate has the configured digest (``check_template``)."""
    body = workflow_manifest(run.raw, ctx.workflow_instance_id)
    path = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, ctx.namespace)
    try:
        await check_template(ctx, run)
        workflow = await ctx.kube.create(path, body)
    except AlreadyExists:
        workflow = await ctx.kube.get(f"{path}/{body['metadata']['name']}")
        if not controlled_by(workflow, run.raw):
            # Never adopt what the Run does not own: its steps and reported digests would be
            # someone else's. The Run ends (Inconclusive); the stranger's Workflow is left alone.
            name = workflow["metadata"]["name"]
            raise TerminalError(
                "WorkflowNotOwned",
                f"Workflow {ctx.namespace}/{name} exists but is not owned by Run {run.name}; "
                "Signal never adopts it: find who created it, then delete it and request the Nodes again",
            ) from None
    now, generation = ctx.clock(), run.generation
    conditions = set_condition(
        run.conditions,
        type_="Admitted",
        status=True,
        reason="GroupReserved",
        message=f"{len(run.participants)} Nodes reserved and cordoned",
        generation=generation,
        now=now,
    )
    conditions = set_condition(
        conditions,
        type_="WorkflowSubmitted",
        status=True,
        reason="WorkflowCreated",
        message=f"Workflow {workflow['metadata']['name']} created",
        generation=generation,
        now=now,
    )
    status = {
        "phase": "Running",
        "reason": "WorkflowSubmitted",
        "message": "checks are running",
        "conditions": conditions,
        "workflow": {"name": workflow["metadata"]["name"], "uid": workflow["metadata"]["uid"]},
        "startTime": (run.raw.get("status") or {}).get("startTime") or ctx.timestamp(),
        "observedGeneration": generation,
    }
    log.info("workflow submitted", run=run.name, workflow=workflow["metadata"]["name"])
    updated = await ctx.patch_run_status(run.raw, status)
    nodes = ", ".join(p.node_name for p in run.participants)
    await events.emit(ctx, events.run_ref(run.raw), "RunRunning", f"reserved and cordoned {nodes}; Workflow submitted")
    return updated
