"""Acceptance of a finished Run (SPEC §4.4-4.5): read every check's evidence with uncached
GETs, decide fail-closed (shared/acceptance.py), persist the Run's evidence document, project
the result onto the Nodes, and end the Run. Safe to repeat and to interrupt, in this order:

1. the Run's evidence ConfigMap ``<run>-evidence`` (immutable; if it already exists, its
   recorded decision is the decision: a retry never decides twice);
2. the projection on each Node (conditioned on its resourceVersion; monotonic);
3. the Run's terminal status.
"""

import base64
import contextlib
import json
from typing import Any

from controller import events, metrics
from controller.projection import detail, node_condition, projection_patch, recorded
from controller.state import Context, log
from kubeio.client import Obj, resource_path
from kubeio.errors import AlreadyExists, Conflict, NotFound
from shared import keys
from shared.acceptance import RUN_EVIDENCE_SCHEMA, CheckInput, RunDecision, assess_check, decide, run_document
from shared.conditions import set_condition
from shared.evidence import EvidenceError, config_map, decode_document
from shared.run import Phase, Verdict

NODE_PATCH_ATTEMPTS = 5
WORKFLOWS = "argoproj.io/v1alpha1"


def evidence_name(run_name: str) -> str:
    return f"{run_name}-evidence"


def check_evidence_name(run_name: str, index: int) -> str:
    return f"{run_name}-c{index}-evidence"


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
    meta = run["metadata"]
    return {"apiVersion": keys.API_VERSION, "kind": keys.RUN_KIND, "name": meta["name"], "uid": meta["uid"]}


async def _decide(ctx: Context, run: Obj, workflow: Obj | None, deadline_passed: bool) -> tuple[Obj, str, int]:
    """Decide and persist; returns (the Run's evidence document, its digest, stored bytes)."""
    meta = run["metadata"]
    path = resource_path("v1", "configmaps", ctx.namespace)
    name = evidence_name(meta["name"])
    existing = await ctx.kube.get_or_none(f"{path}/{name}")
    if existing is None:
        reported = reported_digests(workflow)
        outcomes = []
        for index in range(len(run["spec"]["checks"])):
            cm_name = check_evidence_name(meta["name"], index)
            cm = await ctx.kube.get_or_none(f"{path}/{cm_name}")
            outcomes.append(assess_check(run, CheckInput(index, cm_name, cm, reported.get(index))))
        uids: dict[str, str | None] = {}
        for participant in run["spec"]["participants"]:
            node = await ctx.kube.get_or_none(resource_path("v1", "nodes", name=participant["nodeName"]))
            uids[participant["nodeName"]] = node["metadata"]["uid"] if node else None
        phase = (workflow or {}).get("status", {}).get("phase")
        decision = decide(run, outcomes, node_uids=uids, workflow_phase=phase, deadline_passed=deadline_passed)
        metrics.EVIDENCE_FAILURES.inc(sum(1 for c in outcomes if c.problem))
        document = run_document(run, decision, workflow=workflow, decided_at=ctx.timestamp())
        labels = {keys.RUN_NAME_LABEL: meta["name"], keys.RUN_UID_LABEL: meta["uid"], keys.COMPONENT_LABEL: "evidence"}
        try:
            body, digest, size = config_map(
                name=name, namespace=ctx.namespace, owner=_owner(run), labels=labels, document=document
            )
        except EvidenceError as exc:
            stripped = _too_large(run, decision, str(exc))
            document = run_document(run, stripped, workflow=workflow, decided_at=ctx.timestamp())
            for check in document["checks"]:
                check["evidence"] = None
            body, digest, size = config_map(
                name=name, namespace=ctx.namespace, owner=_owner(run), labels=labels, document=document
            )
        try:
            await ctx.kube.create(path, body)
            return document, digest, size
        except AlreadyExists:
            existing = await ctx.kube.get(f"{path}/{name}")
    try:
        document, digest = decode_document(existing, RUN_EVIDENCE_SCHEMA)
    except EvidenceError as exc:
        raise RuntimeError(f"Run {meta['name']}: its own evidence ConfigMap {name} is unreadable: {exc}") from exc
    if document.get("run", {}).get("uid") != meta["uid"]:
        raise RuntimeError(f"Run {meta['name']}: evidence ConfigMap {name} belongs to another Run; delete it")
    size = len(base64.b64decode(existing.get("binaryData", {}).get("evidence.json.gz", "")))
    return document, digest, size


def _too_large(run: Obj, decision: RunDecision, why: str) -> RunDecision:
    nodes = {
        n: (Verdict.FAIL if v == Verdict.FAIL else Verdict.INCONCLUSIVE) for n, v in decision.node_verdicts.items()
    }
    phase = Phase.FAILED if decision.phase == Phase.FAILED else Phase.INCONCLUSIVE
    return RunDecision(
        phase, "EvidenceTooLarge", why[:1000], decision.checks, nodes, decision.replaced_nodes, decision.deadline_passed
    )


async def _project(ctx: Context, run: Obj, profile: str, node_name: str, new: dict[str, str]) -> bool:
    """Project one Node; False when a newer result is there (monotonic)."""
    path = resource_path("v1", "nodes", name=node_name)
    for _ in range(NODE_PATCH_ATTEMPTS):
        node = await ctx.kube.get_or_none(path)
        if node is None:
            return False
        patch = projection_patch(node, profile, new)
        if patch is None:
            mine = (recorded(node, profile) or {}).get("runUID") == new["runUID"]
            if not mine:
                return False
        else:
            try:
                await ctx.kube.merge_patch(path, patch)
            except Conflict:
                continue
        await ctx.kube.strategic_patch(f"{path}/status", {"status": {"conditions": [node_condition(profile, new)]}})
        return True
    raise Conflict(409, "Conflict", f"Node {node_name} kept changing while projecting Run {run['metadata']['name']}")


async def accept(ctx: Context, run: Obj, workflow: Obj | None, *, deadline_passed: bool) -> None:
    meta, status = run["metadata"], run.get("status") or {}
    document, digest, size = await _decide(ctx, run, workflow, deadline_passed)
    phase = Phase(document["phase"])
    completed = status.get("completionTime") or document["decidedAt"]
    profile = run["spec"]["profile"]["name"]
    projected = []
    for node_name, verdict in sorted(document["nodes"].items()):
        if await _project(ctx, run, profile, node_name, detail(run, verdict, digest, completed)):
            projected.append(node_name)
            await events.emit(
                ctx,
                events.node_ref(node_name),
                f"Certification{verdict}",
                f"{profile}: {verdict} (Run {meta['name']}, evidence {digest})",
                warning=verdict != "Pass",
            )
    now, generation = ctx.clock(), meta.get("generation")
    conditions = status.get("conditions") or []
    conditions = set_condition(
        conditions,
        type_="EvidencePersisted",
        status=True,
        reason="EvidenceVerified",
        message=f"ConfigMap {evidence_name(meta['name'])} ({digest})",
        generation=generation,
        now=now,
    )
    conditions = set_condition(
        conditions,
        type_="Projected",
        status=bool(projected),
        reason="NodesLabelled" if projected else "NothingProjected",
        message=f"result projected on {len(projected)} of {len(run['spec']['participants'])} Node(s)",
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
                "evidence": {"configMap": evidence_name(meta["name"]), "digest": digest, "bytes": size},
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
        run=meta["name"],
        phase=phase.value,
        reason=document["reason"],
        evidence=digest,
        checks=json.dumps(verdicts),
    )


def run_started(run: Obj) -> str | None:
    value: Any = (run.get("status") or {}).get("startTime")
    return str(value) if value else None
