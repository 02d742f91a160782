"""Whether the controller may adopt a Run evidence document it finds already stored. Pure.

Acceptance persists ``<run>-evidence`` before projecting and ending the Run, so a retry after a
crash finds it and must not decide twice. But a stored document is only a claim: it could have
been left by anyone who could write that name (an older controller, a restore, a bug, an
identity the admission policy failed to stop). It is adopted only if

1. its ConfigMap has a *controller* ownerReference to this Run (uid);
2. it names this Run (namespace, name, uid) and exactly the Run's participants;
3. it has one entry per check of the Run, and every check's evidence matches the digest it
   records and the digest the adapter reported to Argo (``reported``: from the Workflow, or
   from the stored check evidence ConfigMap once the Workflow is gone). A v2 document names
   each check's evidence ConfigMap: it is read again (``check_config_maps``) and counts only
   when it is the Run's own and has the recorded digest (shared/runevidence.py); a missing or
   altered one makes that check Inconclusive, so a recorded Pass no longer re-derives. An old
   v1 document embeds the evidence;
4. re-deriving the decision from that evidence (shared/acceptance.py, with the Nodes'
   uids as they are now and the Workflow phase) gives the same phase and the same verdict for
   every Node, and it names no Node outside ``spec.participants``.

A document whose checks carry no evidence because it was too large (reason
``EvidenceTooLarge``; a v1 document, or a v2 one, which the limits should never let happen)
is not re-derived; it is adopted only if it certifies nothing (no
``Succeeded``, no ``Pass``). Anything else is refused with the reason, and the Run ends
Inconclusive (controller/reconcile/accept.py).
"""

from typing import Any

from shared.acceptance import CheckOutcome, decide, validate_check
from shared.digests import canonical_json, sha256_digest
from shared.run import Phase, Verdict
from shared.runevidence import materialize

Obj = dict[str, Any]
TOO_LARGE = "EvidenceTooLarge"


def controller_owned(config_map: Obj, run: Obj) -> bool:
    refs = (config_map.get("metadata") or {}).get("ownerReferences") or []
    uid = run["metadata"]["uid"]
    return any(
        r.get("uid") == uid and r.get("controller") is True and r.get("kind") == "CertificationRun" for r in refs
    )


def _embedded(run: Obj, entry: Obj, index: int, reported: str | None) -> CheckOutcome | str:
    """The outcome re-derived from one check's embedded evidence, or why it cannot be."""
    name = run["spec"]["checks"][index]["name"]
    evidence = entry.get("evidence")

    def unproven(problem: str, digest: str | None = None) -> CheckOutcome:
        return CheckOutcome(index, name, Verdict.INCONCLUSIVE, problem, digest, evidence, {}, reported)

    if evidence is None:
        return unproven(str(entry.get("problem") or "MissingEvidence: no check evidence"))
    if not isinstance(evidence, dict):
        return f"check {index}: the embedded evidence is not an object"
    digest = sha256_digest(canonical_json(evidence))
    if entry.get("digest") != digest:
        return f"check {index}: the embedded evidence does not match the digest recorded beside it"
    if reported is None:
        return unproven("UnverifiableEvidence: no digest reported to Argo or stored for this check", digest)
    if reported != digest:
        return unproven("DigestMismatch: the stored evidence is not what the adapter reported", digest)
    verdict, problem, per_participant = validate_check(run, index, evidence)
    return CheckOutcome(index, name, verdict, problem, digest, evidence, per_participant, reported)


def _index(entry: object) -> int:
    """A check entry's index; -1 for an entry that is not an object with an integer index (a
    boolean is not one, though Python compares False equal to 0)."""
    index = entry.get("index") if isinstance(entry, dict) else None
    return index if isinstance(index, int) and not isinstance(index, bool) else -1


def adoption_problem(
    run: Obj,
    config_map: Obj,
    document: Obj,
    *,
    reported: dict[int, str],
    node_uids: dict[str, str | None],
    workflow_phase: str | None,
    check_config_maps: dict[int, Obj | None] | None = None,
) -> str | None:
    """None when ``document`` (decoded from ``config_map``) may be adopted; else why not.
    ``check_config_maps``: each check's evidence ConfigMap as stored now (v2 documents)."""
    meta, spec = run["metadata"], run["spec"]
    if not controller_owned(config_map, run):
        return "it has no controller ownerReference to this Run"
    if document.get("run") != {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}:
        return "it names another Run"
    participants = sorted(spec["participants"], key=lambda p: p["index"])
    expected = [{"index": p["index"], "nodeName": p["nodeName"], "nodeUID": p["nodeUID"]} for p in participants]
    if document.get("participants") != expected:
        return "its participants are not the Run's"
    names = {p["nodeName"] for p in participants}
    nodes = document.get("nodes")
    if not isinstance(nodes, dict) or set(nodes) - names:
        outside = sorted(set(nodes) - names) if isinstance(nodes, dict) else []
        return f"it names Node(s) outside spec.participants: {', '.join(outside[:5]) or 'malformed nodes'}"
    checks = document.get("checks")
    if not isinstance(checks, list) or sorted(_index(c) for c in checks) != list(range(len(spec["checks"]))):
        return "it does not hold exactly one entry per check of the Run"
    if document.get("reason") == TOO_LARGE and all(c.get("evidence") is None for c in checks):
        if document.get("phase") == Phase.SUCCEEDED.value or Verdict.PASS.value in nodes.values():
            return "it claims a pass without any check evidence"
        return None
    checks = materialize(run, document, check_config_maps or {})["checks"]
    outcomes: list[CheckOutcome] = []
    for entry in sorted(checks, key=lambda c: c["index"]):
        outcome = _embedded(run, entry, entry["index"], reported.get(entry["index"]))
        if isinstance(outcome, str):
            return outcome
        outcomes.append(outcome)
    deadline_passed = document.get("deadlinePassed")
    if not isinstance(deadline_passed, bool):
        return "its deadlinePassed is not a boolean"
    decision = decide(
        run, outcomes, node_uids=node_uids, workflow_phase=workflow_phase, deadline_passed=deadline_passed
    )
    if decision.phase.value != document.get("phase"):
        return f"re-deriving it from its check evidence gives {decision.phase.value}, not {document.get('phase')}"
    derived = {node: verdict.value for node, verdict in decision.node_verdicts.items()}
    if derived != nodes:
        differ = sorted(n for n in set(derived) | set(nodes) if derived.get(n) != nodes.get(n))
        return f"re-deriving it gives other Node verdicts (for {', '.join(differ[:5])})"
    return None
