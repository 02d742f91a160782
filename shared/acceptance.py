"""Acceptance: from the check evidence a Run left behind to the Run's verdict, fail closed.
Pure; no I/O. Used by the controller (to decide) and by ``signalctl evidence verify`` (to
re-derive the same decision independently from the stored documents).

Per check, the evidence counts only if it decodes to a canonical ``check-evidence/v1``
document whose recomputed digest matches what the adapter reported (when known); whose
results document matches its own recorded digest; that names this Run, this check (index,
name, backend, script key) and this source digest; whose participants are exactly the
Run's participants (index, Node name and uid, each once); whose backend workloads cover
every participant exactly once on its own Node (and, for a ``perNode`` MPI check, whose
proven verdicts each come from exactly one launcher of that participant, on its own Node; a
crossNode check's from exactly one launcher on a Node that is none of the participants');
whose proven verdicts' workloads have recorded owner chains leading to this Run
(``shared.ownership.chain_problem``: evidence without them proves nothing); that record the
Run's snapshot (every key's sha256, recomputing to the source digest) and whose proven
verdicts each come from a runner that reported executing the check's script
(``shared.snapshot.script_problem``);
whose verdicts are the ones the rules give; and whose cleanup completed. Anything else makes that check Inconclusive.

The Run is ``Failed`` if any check with valid evidence proves a failure; ``Succeeded``
only if every check has valid Pass evidence, the Workflow succeeded, no Node was replaced
and the suite deadline did not end it; otherwise ``Inconclusive``. Each Node's own result
(what is projected) is ``Fail`` where valid evidence proves it failed, ``Pass`` only where
every check's evidence is valid and says it passed and the Run ended Succeeded or Failed
(another Node's failure), and ``Inconclusive`` otherwise.
"""

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from shared import ownership, snapshot
from shared.digests import canonical_json, sha256_digest
from shared.evidence import (
    CHECK_EVIDENCE_SCHEMA,
    CheckEvidence,
    EvidenceError,
    check_verdict,
    decode_document,
)
from shared.run import Phase, Verdict
from shared.runevidence import RUN_EVIDENCE_SCHEMA, check_entry

Obj = dict[str, Any]


@dataclass(frozen=True)
class CheckInput:
    """What the controller found for one check of the Run."""

    index: int
    config_map_name: str
    config_map: Obj | None
    reported_digest: str | None = None
    """The digest the adapter reported to Argo for this check, when the Workflow says."""


@dataclass(frozen=True)
class CheckOutcome:
    index: int
    name: str
    verdict: Verdict
    problem: str | None
    digest: str | None
    document: Obj | None
    participant_verdicts: dict[int, Verdict]
    reported_digest: str | None = None


def _participants(run: Obj) -> list[Obj]:
    return sorted(run["spec"]["participants"], key=lambda p: p["index"])


def validate_check(run: Obj, check_index: int, document: Obj) -> tuple[Verdict, str | None, dict[int, Verdict]]:
    """The verdict one check's evidence document supports (problem is None when valid)."""
    try:
        evidence = CheckEvidence.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        return Verdict.INCONCLUSIVE, f"MalformedEvidence: {'.'.join(map(str, first['loc']))}: {first['msg']}", {}
    results = evidence.results
    meta, spec = run["metadata"], run["spec"]
    check = spec["checks"][check_index]
    if sha256_digest(canonical_json(document["results"])) != evidence.results_digest:
        return Verdict.INCONCLUSIVE, "DigestMismatch: the results do not match their recorded digest", {}
    identity = (results.run.namespace, results.run.name, results.run.uid)
    if identity != (meta["namespace"], meta["name"], meta["uid"]):
        return Verdict.INCONCLUSIVE, f"ForeignEvidence: it belongs to Run {'/'.join(identity[:2])}", {}
    ident = results.check
    if (ident.index, ident.name, ident.backend, ident.script_key) != (
        check_index,
        check["name"],
        check["backend"],
        check["scriptKey"],
    ):
        return Verdict.INCONCLUSIVE, f"ForeignEvidence: it describes check {ident.index} {ident.name!r}", {}
    if ident.source_digest != spec["source"]["digest"]:
        return Verdict.INCONCLUSIVE, "ForeignEvidence: another script source digest", {}
    if (ident.parameters or {}) != (check.get("parameters") or {}) or ident.image != check.get("image"):
        return Verdict.INCONCLUSIVE, "ForeignEvidence: other parameters or another image than the Run's check", {}
    expected = {p["index"]: (p["nodeName"], p["nodeUID"]) for p in _participants(run)}
    counts = Counter(p.index for p in results.participants)
    if any(n > 1 for n in counts.values()):
        return Verdict.INCONCLUSIVE, "DuplicateParticipant: a participant appears more than once", {}
    if set(counts) - set(expected):
        return Verdict.INCONCLUSIVE, "ExtraParticipant: evidence names a participant the Run does not have", {}
    if set(expected) - set(counts):
        return Verdict.INCONCLUSIVE, "IncompleteEvidence: a participant has no result", {}
    for p in results.participants:
        if (p.node_name, p.node_uid) != expected[p.index]:
            return Verdict.INCONCLUSIVE, f"ForeignParticipant: participant {p.index} names another Node or uid", {}
    role = "participant" if ident.backend == "Pod" else "worker"
    served = [w for w in results.workloads if w.role == role]
    by_index = {p.index: p for p in results.participants}
    for index, (node, _) in expected.items():
        mine = [w for w in served if w.participant_index == index]
        result = by_index[index]
        if len(mine) > 1:
            return Verdict.INCONCLUSIVE, f"IdentityCoverage: participant {index} served by several workloads", {}
        proven = result.verdict != Verdict.INCONCLUSIVE
        if proven and (len(mine) != 1 or mine[0].node_name != node or mine[0].uid != result.workload_uid):
            return (
                Verdict.INCONCLUSIVE,
                f"IdentityCoverage: participant {index} not served exactly once on its Node",
                {},
            )
    scope = (check.get("mpi") or {}).get("scope") or "perNode"
    launchers = [w for w in results.workloads if w.role == "launcher"]
    if ident.backend == "MPIJob" and scope == "crossNode":
        # The launcher's report decides every participant: from one launcher on a Node that is
        # none of theirs (one of them would speak for the others; docs/security.md).
        nodes_under_test = {node for node, _ in expected.values()}
        trusted = len(launchers) == 1 and launchers[0].node_name and launchers[0].node_name not in nodes_under_test
        if not trusted and any(p.verdict != Verdict.INCONCLUSIVE for p in results.participants):
            return (
                Verdict.INCONCLUSIVE,
                "IdentityCoverage: the verdicts are not from one launcher on a Node that is none of the participants'",
                {},
            )
    if ident.backend == "MPIJob" and scope == "perNode":
        for index, (node, _) in expected.items():
            own = [w for w in launchers if w.participant_index == index]
            if by_index[index].verdict != Verdict.INCONCLUSIVE and (len(own) != 1 or own[0].node_name != node):
                return (
                    Verdict.INCONCLUSIVE,
                    f"IdentityCoverage: participant {index}'s verdict is not from one launcher on its own Node",
                    {},
                )
    unowned = ownership.chain_problem(meta["uid"], results, scope) or snapshot.script_problem(
        spec["source"]["digest"], results
    )
    if unowned:
        return Verdict.INCONCLUSIVE, unowned, {}
    recomputed, _ = check_verdict(list(results.participants))
    if recomputed != results.verdict:
        return Verdict.INCONCLUSIVE, "InconsistentEvidence: the recorded check verdict is not the rules' verdict", {}
    final = recomputed if evidence.cleanup.state == "Complete" else Verdict.INCONCLUSIVE
    if evidence.verdict != final:
        return (
            Verdict.INCONCLUSIVE,
            "InconsistentEvidence: the final verdict does not follow from results and cleanup",
            {},
        )
    per_participant = {p.index: p.verdict for p in results.participants}
    if evidence.cleanup.state != "Complete":
        return Verdict.INCONCLUSIVE, f"CleanupFailed: {evidence.cleanup.message}"[:300], per_participant
    return final, None, per_participant


def assess_check(run: Obj, given: CheckInput) -> CheckOutcome:
    name = run["spec"]["checks"][given.index]["name"]

    def bad(problem: str, digest: str | None = None, document: Obj | None = None) -> CheckOutcome:
        return CheckOutcome(given.index, name, Verdict.INCONCLUSIVE, problem, digest, document, {}, reported)

    reported = given.reported_digest
    if given.config_map is None:
        return bad(f"MissingEvidence: no ConfigMap {given.config_map_name} (the check did not finish)")
    try:
        document, digest = decode_document(given.config_map, CHECK_EVIDENCE_SCHEMA)
    except EvidenceError as exc:
        return bad(f"MalformedEvidence: {exc}"[:300])
    owners = {ref.get("uid") for ref in given.config_map.get("metadata", {}).get("ownerReferences") or []}
    if run["metadata"]["uid"] not in owners:
        return bad(f"ForeignEvidence: ConfigMap {given.config_map_name} is not owned by this Run", digest, document)
    if given.reported_digest is not None and given.reported_digest != digest:
        return bad("DigestMismatch: the stored evidence is not what the adapter reported", digest, document)
    verdict, problem, per_participant = validate_check(run, given.index, document)
    return CheckOutcome(given.index, name, verdict, problem, digest, document, per_participant, reported)


@dataclass(frozen=True)
class RunDecision:
    phase: Phase
    reason: str
    message: str
    checks: list[CheckOutcome]
    node_verdicts: dict[str, Verdict]
    """Per participant Node name: what to project. Replaced Nodes are absent."""
    replaced_nodes: tuple[str, ...] = ()
    deadline_passed: bool = False


def decide(
    run: Obj,
    checks: list[CheckOutcome],
    *,
    node_uids: dict[str, str | None],
    workflow_phase: str | None,
    deadline_passed: bool,
) -> RunDecision:
    """The Run's terminal phase from its checks' outcomes and the world around it."""
    participants = _participants(run)
    expected = len(run["spec"]["checks"])
    if sorted(c.index for c in checks) != list(range(expected)):
        missing = CheckOutcome(
            -1, "?", Verdict.INCONCLUSIVE, "IncompleteEvidence: not one outcome per check", None, None, {}
        )
        checks = [*checks, missing]
    replaced = sorted(p["nodeName"] for p in participants if node_uids.get(p["nodeName"]) != p["nodeUID"])
    failed = [c for c in checks if c.verdict == Verdict.FAIL and c.problem is None]
    problems = [c for c in checks if c.problem or c.verdict == Verdict.INCONCLUSIVE]
    if failed:
        phase, reason = Phase.FAILED, "CheckFailed"
        message = f"check {failed[0].name!r} proved a failure"
    elif replaced:
        phase, reason = Phase.INCONCLUSIVE, "NodeReplaced"
        message = f"Node(s) {', '.join(replaced)} were replaced (uid changed) since admission"
    elif deadline_passed:
        phase, reason = Phase.INCONCLUSIVE, "SuiteDeadlineExceeded"
        message = f"the suite deadline of {run['spec']['suiteDeadlineSeconds']}s passed"
    elif problems:
        first = problems[0]
        phase, reason = Phase.INCONCLUSIVE, (first.problem or "Inconclusive").split(":", 1)[0]
        message = f"check {first.name!r}: {first.problem or 'inconclusive'}"
    elif workflow_phase != "Succeeded":
        phase, reason = Phase.INCONCLUSIVE, "WorkflowNotSucceeded"
        message = f"the Workflow ended {workflow_phase or 'missing'} although every check passed"
    else:
        phase, reason, message = Phase.SUCCEEDED, "AllChecksPassed", f"all {len(checks)} check(s) passed"
    # Per Node: Fail where valid evidence proves it failed; Pass only where every check has
    # valid evidence in which it passed and the Run ended for a proven reason (Succeeded, or
    # Failed because of another Node); everything else Inconclusive.
    complete = all(c.problem is None for c in checks)
    nodes: dict[str, Verdict] = {}
    for p in participants:
        if p["nodeName"] in replaced:
            continue
        own = [c.participant_verdicts.get(p["index"]) for c in checks if c.problem is None]
        if Verdict.FAIL in own:
            nodes[p["nodeName"]] = Verdict.FAIL
        elif complete and phase in {Phase.SUCCEEDED, Phase.FAILED} and all(v == Verdict.PASS for v in own):
            nodes[p["nodeName"]] = Verdict.PASS
        else:
            nodes[p["nodeName"]] = Verdict.INCONCLUSIVE
    return RunDecision(phase, reason, message[:1000], checks, nodes, tuple(replaced), deadline_passed)


def run_document(run: Obj, decision: RunDecision, *, workflow: Obj | None, decided_at: str) -> Obj:
    """The Run's evidence document (``projectsignal.dev/evidence/v2``, shared/runevidence.py):
    each check's verdict and the evidence it was decided from, named by ConfigMap and digest
    (not embedded: the size grows with the checks, not with what they printed), and the
    decision taken from them."""
    meta, spec = run["metadata"], run["spec"]
    return {
        "schema": RUN_EVIDENCE_SCHEMA,
        "run": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
        "profile": spec["profile"],
        "sourceDigest": spec["source"]["digest"],
        "attempt": spec.get("attempt", 1),
        "participants": [
            {"index": p["index"], "nodeName": p["nodeName"], "nodeUID": p["nodeUID"]} for p in _participants(run)
        ],
        "workflow": {
            "name": (workflow or {}).get("metadata", {}).get("name"),
            "phase": (workflow or {}).get("status", {}).get("phase"),
        },
        "checks": [
            check_entry(
                meta["name"],
                c.index,
                c.name,
                c.verdict.value,
                c.problem,
                digest=c.digest,
                reported=c.reported_digest,
                document=c.document,
            )
            for c in decision.checks
        ],
        "replacedNodes": list(decision.replaced_nodes),
        "deadlinePassed": decision.deadline_passed,
        "nodes": {name: verdict.value for name, verdict in sorted(decision.node_verdicts.items())},
        "phase": decision.phase.value,
        "reason": decision.reason,
        "message": decision.message,
        "decidedAt": decided_at,
    }
