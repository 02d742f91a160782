"""Acceptance of a finished Run (SPEC §4.4-4.5): read every check's evidence with uncached
GETs, decide fail-closed (shared/acceptance.py), persist the Run's evidence document, project
the result onto the Nodes, and end the Run. Safe to repeat and to interrupt, in this order:

1. the Run's evidence ConfigMap ``<run>-evidence`` (immutable, with a controller
   ownerReference to the Run). If it already exists, its recorded decision is the decision (a
   retry never decides twice), but only if it is adopted (controller/rules/evidence_adoption.py): this Run
   owns it as controller, and re-deriving the decision from the check evidence it names (v2:
   the check evidence ConfigMaps, read again and matched to the digests it records; an old v1
   document: the evidence embedded in it) and the digests reported to Argo gives the same
   phase and per-Node verdicts. A document that
   is not adopted ends the Run ``Inconclusive`` (reason ``EvidenceNotAdopted``, naming the
   ConfigMap), with a warning Event ``EvidenceRejected`` and the metric
   ``signal_evidence_rejected_total``; its participants get ``Inconclusive``;
2. the projection on each Node (conditioned on its resourceVersion; monotonic), only ever on
   the Run's participants;
3. the Run's terminal status.
"""

import asyncio
import base64
import contextlib
import functools
import json
from collections.abc import Awaitable, Iterable
from typing import TypeVar

from prometheus_client import Counter

from controller.reconcile import events, metrics
from controller.reconcile.reassert import read_record, record_run
from controller.reconcile.reservations import each_node
from controller.reconcile.state import Context, log
from controller.rules.evidence_adoption import adoption_problem
from controller.rules.manifests import fail_taint_patch, owner_reference
from controller.rules.projection import detail, failed_condition, node_condition, projection_patch, recorded
from controller.rules.runview import ParticipantRef, RunView
from kubeio.client import Obj, resource_path
from kubeio.errors import AlreadyExists, Conflict, NotFound
from shared import certified, keys, quarantine
from shared.acceptance import CheckInput, RunDecision, assess_check, decide, run_document
from shared.conditions import set_condition
from shared.evidence import CHECK_EVIDENCE_SCHEMA, EvidenceError, config_map, decode_document
from shared.run import Phase, Verdict
from shared.runevidence import RUN_EVIDENCE_SCHEMAS

NODE_PATCH_ATTEMPTS = 5
READ_CONCURRENCY = 8
"""Uncached reads of one acceptance in flight at once (the checks' evidence, the participants'
Nodes): one after the other, a 64 x 15 Run's 79 reads were most of its end (issue 47 goal 2)."""
T = TypeVar("T")
NOT_ADOPTED = "EvidenceNotAdopted"
EVIDENCE_REJECTED = Counter(
    "signal_evidence_rejected",
    "Run evidence documents found stored but not adopted (not owned by the Run, or not re-derivable)",
    registry=metrics.REGISTRY,
)


class NotAdopted(Exception):
    """A stored Run evidence document that the controller will not adopt."""

    def __init__(self, config_map: str, why: str) -> None:
        super().__init__(f"ConfigMap {config_map} was not adopted as the Run's evidence: {why}")
        self.config_map = config_map
        self.why = why


evidence_name = keys.run_evidence_name
check_evidence_name = keys.check_evidence_name


def reported_digests(workflow: Obj | None) -> dict[int, str]:
    """Evidence digests the adapter reported to Argo, by check index (from status.nodes)."""
    found: dict[int, str] = {}
    for node in ((workflow or {}).get("status") or {}).get("nodes", {}).values():
        if node.get("templateName") != "check":
            continue
        inputs = {p.get("name"): p.get("value") for p in (node.get("inputs") or {}).get("parameters", [])}
        outputs = {p.get("name"): p.get("value") for p in (node.get("outputs") or {}).get("parameters", [])}
        index, digest = str(inputs.get("index", "")), outputs.get("evidence-digest")
        if index.isascii() and index.isdigit() and digest:
            found[int(index)] = str(digest)
    return found


def _owner(run: Obj) -> Obj:
    """A controller ownerReference: adoption requires it (controller/rules/evidence_adoption.py)."""
    return owner_reference(run)


async def _read_all(reads: Iterable[Awaitable[T]]) -> list[T]:
    """Await ``reads`` (uncached GETs), ``READ_CONCURRENCY`` at a time; their results in order."""
    gate = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(read: Awaitable[T]) -> T:
        async with gate:
            return await read

    return list(await asyncio.gather(*(one(r) for r in reads)))


async def _node_uids(ctx: Context, run: Obj) -> dict[str, str | None]:
    names = [p["nodeName"] for p in run["spec"]["participants"]]
    nodes = await _read_all(ctx.kube.get_or_none(resource_path("v1", "nodes", name=n)) for n in names)
    return {name: node["metadata"]["uid"] if node else None for name, node in zip(names, nodes, strict=True)}


async def _check_config_maps(ctx: Context, run: Obj) -> dict[int, Obj | None]:
    """Every check's evidence ConfigMap under the adapter's name (None: absent), uncached."""
    path = resource_path("v1", "configmaps", ctx.namespace)
    name = run["metadata"]["name"]
    indices = range(len(run["spec"]["checks"]))
    found = await _read_all(ctx.kube.get_or_none(f"{path}/{check_evidence_name(name, i)}") for i in indices)
    return dict(zip(indices, found, strict=True))


def _check_digests(run: Obj, workflow: Obj | None, stored: dict[int, Obj | None]) -> dict[int, str]:
    """Per check, the digest the adapter reported to Argo; once the Workflow no longer says,
    the digest of the stored check evidence ConfigMap (Run-owned; admission-protected)."""
    found = reported_digests(workflow)
    for index, cm in stored.items():
        if index in found:
            continue
        owners = {r.get("uid") for r in ((cm or {}).get("metadata") or {}).get("ownerReferences") or []}
        if cm is None or run["metadata"]["uid"] not in owners:
            continue
        with contextlib.suppress(EvidenceError):
            found[index] = decode_document(cm, CHECK_EVIDENCE_SCHEMA)[1]
    return found


async def _adopt(ctx: Context, run: Obj, workflow: Obj | None, existing: Obj) -> tuple[Obj, str, int]:
    """The stored Run evidence document, if it may be adopted; raise NotAdopted otherwise."""
    meta = run["metadata"]
    name = f"{ctx.namespace}/{evidence_name(meta['name'])}"
    try:
        document, digest = decode_document(existing, RUN_EVIDENCE_SCHEMAS)
    except EvidenceError as exc:
        raise NotAdopted(name, f"it is unreadable: {exc}") from exc
    phase = (
        (workflow or {}).get("status", {}).get("phase") if workflow else (document.get("workflow") or {}).get("phase")
    )
    stored = await _check_config_maps(ctx, run)
    problem = adoption_problem(
        run,
        existing,
        document,
        reported=_check_digests(run, workflow, stored),
        node_uids=await _node_uids(ctx, run),
        workflow_phase=phase,
        check_config_maps=stored,
    )
    if problem is not None:
        raise NotAdopted(name, problem)
    size = len(base64.b64decode(existing.get("binaryData", {}).get("evidence.json.gz", "")))
    return document, digest, size


async def _decide(ctx: Context, run: Obj, workflow: Obj | None, deadline_passed: bool) -> tuple[Obj, str, int]:
    """Decide and persist; returns (the Run's evidence document, its digest, stored bytes)."""
    meta = run["metadata"]
    path = resource_path("v1", "configmaps", ctx.namespace)
    name = evidence_name(meta["name"])
    existing = await ctx.kube.get_or_none(f"{path}/{name}")
    if existing is None:
        reported = reported_digests(workflow)
        stored = await _check_config_maps(ctx, run)
        outcomes = [
            assess_check(run, CheckInput(index, check_evidence_name(meta["name"], index), cm, reported.get(index)))
            for index, cm in stored.items()
        ]
        uids = await _node_uids(ctx, run)
        phase = (workflow or {}).get("status", {}).get("phase")
        decision = decide(run, outcomes, node_uids=uids, workflow_phase=phase, deadline_passed=deadline_passed)
        metrics.EVIDENCE_FAILURES.inc(sum(1 for c in outcomes if c.problem))
        metrics.observe_checks(
            run["spec"]["profile"]["name"], ((c.name, c.verdict.value, c.document) for c in decision.checks)
        )
        document = run_document(run, decision, workflow=workflow, decided_at=ctx.timestamp())
        labels = {keys.RUN_NAME_LABEL: meta["name"], keys.RUN_UID_LABEL: meta["uid"], keys.COMPONENT_LABEL: "evidence"}
        try:
            body, digest, size = config_map(
                name=name, namespace=ctx.namespace, owner=_owner(run), labels=labels, document=document
            )
        except EvidenceError as exc:
            # Not expected: a v2 document is bounded by the checks and participants a Run may
            # have (docs/reference.md, "Evidence sizes"); kept so that it still ends, fail closed.
            stripped = _too_large(run, decision, str(exc))
            document = run_document(run, stripped, workflow=workflow, decided_at=ctx.timestamp())
            body, digest, size = config_map(
                name=name, namespace=ctx.namespace, owner=_owner(run), labels=labels, document=document
            )
        try:
            await ctx.kube.create(path, body)
            return document, digest, size
        except AlreadyExists:
            existing = await ctx.kube.get(f"{path}/{name}")
    return await _adopt(ctx, run, workflow, existing)


def _too_large(run: Obj, decision: RunDecision, why: str) -> RunDecision:
    nodes = {
        n: (Verdict.FAIL if v == Verdict.FAIL else Verdict.INCONCLUSIVE) for n, v in decision.node_verdicts.items()
    }
    phase = Phase.FAILED if decision.phase == Phase.FAILED else Phase.INCONCLUSIVE
    return RunDecision(
        phase, "EvidenceTooLarge", why[:1000], decision.checks, nodes, decision.replaced_nodes, decision.deadline_passed
    )


async def _project(
    ctx: Context,
    run: Obj,
    profile: str,
    participant: ParticipantRef,
    new: dict[str, str],
    record: dict[str, certified.Entry] | None,
) -> bool:
    """Project one participant; False when the profile's record holds another, newer Run's
    result for it (the record is monotonic; the Node's own annotation, which its kubelet can
    write, does not decide while there is a record; with none, the profile being gone, it is
    all there is to order by, and controller/reconcile/expiry.py marks such results Stale), or when the
    Node of its name is no longer the participant (replaced since the decision: a new Node
    never carries the old one's result, not even until the next re-assertion). The label
    PATCH is conditioned on the resourceVersion of the Node read, the condition's on its uid."""
    node_name = participant.node_name
    path = resource_path("v1", "nodes", name=node_name)
    for _ in range(NODE_PATCH_ATTEMPTS):
        node = await ctx.kube.get_or_none(path)
        if node is None or node["metadata"].get("uid") != participant.node_uid:
            return False
        on_record = recorded(node, profile) if record is None else record.get(node_name)
        patch = projection_patch(node, profile, new, on_record=on_record)
        if patch is None:
            newer = on_record is not None and on_record.get("runUID") != new["runUID"]
            mine = (recorded(node, profile) or {}).get("runUID") == new["runUID"]
            if newer or not mine:
                return False
        else:
            try:
                await ctx.kube.merge_patch(path, patch)
            except Conflict:
                continue
        condition = {
            "metadata": {"uid": participant.node_uid},
            "status": {"conditions": [node_condition(profile, new), failed_condition(profile, new)]},
        }
        await ctx.kube.strategic_patch(f"{path}/status", condition)
        taint = quarantine.fail_taint(run["spec"]) if new["verdict"] == "Fail" else None
        if taint is not None:
            await _add_fail_taint(ctx, path, participant, taint)
        return True
    raise Conflict(409, "Conflict", f"Node {node_name} kept changing while projecting Run {run['metadata']['name']}")


async def _add_fail_taint(ctx: Context, path: str, participant: ParticipantRef, taint: quarantine.Taint) -> None:
    """Add the Run's ``onFail`` taint to a Node that failed (issue 43, item 3); conditioned on
    the resourceVersion of the Node read, retried on a Conflict, nothing when it is there."""
    for _ in range(NODE_PATCH_ATTEMPTS):
        node = await ctx.kube.get_or_none(path)
        if node is None or node["metadata"].get("uid") != participant.node_uid:
            return
        patch = fail_taint_patch(node, taint)
        if patch is None:
            return
        try:
            await ctx.kube.merge_patch(path, patch)
            log.info("fail taint added", node=participant.node_name, taint=f"{taint[0]}:{taint[2]}")
            return
        except Conflict:
            continue
    raise Conflict(409, "Conflict", f"Node {participant.node_name} kept changing while adding the Fail taint")


async def accept(ctx: Context, view: RunView, workflow: Obj | None, *, deadline_passed: bool) -> None:
    """Decide the Run from its evidence (or adopt the stored decision), record and project it,
    and end the Run. The evidence and projection documents are built from the object itself
    (``view.raw``)."""
    run = view.raw
    try:
        document, digest, size = await _decide(ctx, run, workflow, deadline_passed)
    except NotAdopted as rejection:
        await _not_adopted(ctx, view, rejection)
        return
    phase = Phase(document["phase"])
    completed = view.completion_time or document["decidedAt"]
    profile = view.profile_name
    participants = {p.node_name: p for p in view.participants}
    record = await record_run(ctx, run, document["nodes"], digest, completed)  # the authoritative record first
    projected: list[str] = []

    async def project(node_name: str, verdict: str) -> None:
        new = detail(run, verdict, digest, completed)
        if await _project(ctx, run, profile, participants[node_name], new, record):
            projected.append(node_name)
            await events.emit(
                ctx,
                events.node_ref(node_name),
                f"Certification{verdict}",
                f"{profile}: {verdict} (Run {view.name}, evidence {digest})",
                warning=verdict != "Pass",
            )

    # Each participant's projection is its own (conditioned writes on its own Node): several at
    # once, as a release is, every one tried; the first failure is raised and the Run's end
    # retried (issue 47 goal 2: one after the other they were most of a 64-Node Run's end).
    wanted = [(n, v) for n, v in sorted(document["nodes"].items()) if n in participants]  # never another Node
    await each_node([functools.partial(project, n, v) for n, v in wanted], stop_at_first_error=False)
    now, generation = ctx.clock(), view.generation
    conditions = set_condition(
        view.conditions,
        type_="EvidencePersisted",
        status=True,
        reason="EvidenceVerified",
        message=f"ConfigMap {evidence_name(view.name)} ({digest})",
        generation=generation,
        now=now,
    )
    conditions = set_condition(
        conditions,
        type_="Projected",
        status=bool(projected),
        reason="NodesLabelled" if projected else "NothingProjected",
        message=f"result projected on {len(projected)} of {len(view.participants)} Node(s)",
        generation=generation,
        now=now,
    )
    verdicts = [{"name": c["name"], "verdict": c["verdict"]} for c in document["checks"]]
    with contextlib.suppress(NotFound):
        await ctx.patch_run_status(
            run,
            {
                "phase": phase.value,
                "reason": document["reason"],
                "message": document["message"],
                "conditions": conditions,
                "checkVerdicts": verdicts,
                "evidence": {"configMap": evidence_name(view.name), "digest": digest, "bytes": size},
                "completionTime": completed,
            },
        )
    metrics.observe_terminal(run, phase)
    await events.emit(
        ctx,
        events.run_ref(run),
        f"Run{phase.value}",
        f"{document['reason']}: {document['message']}",
        warning=phase != Phase.SUCCEEDED,
    )
    log.info(
        "run finished",
        run=view.name,
        phase=phase.value,
        reason=document["reason"],
        evidence=digest,
        checks=json.dumps(verdicts),
    )


async def _not_adopted(ctx: Context, view: RunView, rejection: NotAdopted) -> None:
    """End the Run Inconclusive over a stored evidence document it will not adopt: its
    participants get Inconclusive (never Pass), the Run an Event, the metric a count."""
    run = view.raw
    EVIDENCE_REJECTED.inc()
    log.warning("run evidence not adopted", run=view.name, config_map=rejection.config_map, why=rejection.why)
    completed = view.completion_time or ctx.timestamp()
    record = await read_record(ctx, view.profile_name)
    for participant in view.participants:
        new = detail(run, "Inconclusive", "", completed)
        await _project(ctx, run, view.profile_name, participant, new, record)
    message = (
        f"{rejection}. Nothing was certified; inspect that ConfigMap (this Run's acceptance did not write it "
        "as it is), delete it, and release the Run (spec.release: true)"
    )[:1000]
    conditions = set_condition(
        view.conditions,
        type_="EvidencePersisted",
        status=False,
        reason=NOT_ADOPTED,
        message=message,
        generation=view.generation,
        now=ctx.clock(),
    )
    with contextlib.suppress(NotFound):
        await ctx.patch_run_status(
            run,
            {
                "phase": Phase.INCONCLUSIVE.value,
                "reason": NOT_ADOPTED,
                "message": message,
                "conditions": conditions,
                "completionTime": completed,
            },
        )
    metrics.observe_terminal(run, Phase.INCONCLUSIVE)
    await events.emit(ctx, events.run_ref(run), "EvidenceRejected", message, warning=True)
