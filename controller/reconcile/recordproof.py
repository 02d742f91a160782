"""A certified-record entry is only as good as the Run evidence it cites (issue 42, H-A).

The profile's ``status.certifiedNodes`` (shared/certified.py) is the original the re-assertion
copies onto Nodes. Whoever can write it (any identity that can act as the controller) would
decide what the trusted label says, so a ``Pass`` entry counts only when the evidence it names
proves it (``entry_problem``, pure):

1. the ConfigMap ``<run>-evidence`` in the entry's namespace exists, has a controller
   ownerReference to the entry's Run uid, and decodes (v2 or v1) to exactly the entry's
   ``evidenceDigest``;
2. the Run (that uid) exists and its evidence document re-derives from the check evidence it
   names, read again (the adoption rule, controller/rules/evidence_adoption.py);
3. that decision gives this Node, with the entry's ``nodeUID``, the entry's verdict; and the
   entry's other fields are the Run's: ``runCreated`` (set by the API server), ``sourceDigest``
   and ``profileGeneration`` (as the evidence records them), and a ``completionTime`` no later
   than the evidence's ``decidedAt`` (so a forged far-future time cannot put off recurrence).

A proof is cached by (namespace, Run name, Run uid, evidence digest): one derivation per Run,
whatever the number of Nodes and resyncs. An unproven ``Pass`` is projected ``Inconclusive``
(never Pass), with a Warning Event ``CertifiedRecordUnproven`` on the Node (once per entry and
controller process) and ``signal_certified_record_unproven_total{profile}``. ``Fail`` and
``Inconclusive`` entries claim nothing healthy and are taken as recorded.
"""

import contextlib
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import Counter

from controller.reconcile import events, metrics
from controller.reconcile.state import Context, log
from controller.rules.evidence_adoption import adoption_problem, controller_owned
from kubeio.client import Obj, resource_path
from shared import certified, keys
from shared.evidence import CHECK_EVIDENCE_SCHEMA, EvidenceError, decode_document
from shared.runevidence import RUN_EVIDENCE_SCHEMAS

UNPROVEN = Counter(
    "signal_certified_record_unproven",
    "Pass entries of a profile's certified-nodes record that the Run evidence they cite does not prove",
    ["profile"],
    registry=metrics.REGISTRY,
)
CACHE_SIZE = 4096


@dataclass(frozen=True)
class Proof:
    """What one Run evidence document proves: per Node name, (uid, verdict), and the fields every
    entry citing it must carry; or why nothing."""

    problem: str | None
    verdicts: dict[str, tuple[str, str]]
    fields: dict[str, str] = field(default_factory=dict)
    decided_at: str = ""


def derive_proof(
    run: Obj | None, config_map: Obj | None, run_uid: str, digest: str, checks: dict[int, Obj | None]
) -> Proof:
    """Pure: the proof of the Run evidence ``config_map`` for entries citing (``run_uid``, ``digest``)."""
    if config_map is None:
        return Proof("the Run evidence ConfigMap is gone", {})
    if not controller_owned(config_map, {"metadata": {"uid": run_uid}}):
        return Proof(f"the Run evidence ConfigMap is not owned by Run uid {run_uid}", {})
    try:
        document, found = decode_document(config_map, RUN_EVIDENCE_SCHEMAS)
    except EvidenceError as exc:
        return Proof(f"the Run evidence is unreadable: {exc}"[:300], {})
    if found != digest:
        return Proof(f"the Run evidence is {found}, the record cites {digest}", {})
    if run is None or (run.get("metadata") or {}).get("uid") != run_uid:
        return Proof(f"Run uid {run_uid} no longer exists: its evidence cannot be re-derived", {})
    nodes = document.get("nodes")
    if not isinstance(nodes, dict):
        return Proof("the Run evidence has no per-Node verdicts", {})
    listed = [p for p in document.get("participants") or [] if isinstance(p, dict)]
    uids = {str(p.get("nodeName")): (str(p.get("nodeUID")) if p.get("nodeName") in nodes else None) for p in listed}
    reported = {}
    for index, stored in checks.items():
        with contextlib.suppress(EvidenceError):
            if stored is not None and _owned_by(stored, run_uid):
                reported[index] = decode_document(stored, CHECK_EVIDENCE_SCHEMA)[1]
    problem = adoption_problem(
        run,
        config_map,
        document,
        reported=reported,
        node_uids=uids,
        workflow_phase=(document.get("workflow") or {}).get("phase"),
        check_config_maps=checks,
    )
    if problem is not None:
        return Proof(f"the Run evidence does not re-derive: {problem}"[:500], {})
    fields = {
        "runCreated": str(run["metadata"].get("creationTimestamp")),
        "sourceDigest": str(document.get("sourceDigest")),
        "profileGeneration": str((document.get("profile") or {}).get("generation")),
    }
    verdicts = {name: (uid, str(nodes[name])) for name, uid in uids.items() if uid and name in nodes}
    return Proof(None, verdicts, fields, str(document.get("decidedAt")))


def _time(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _owned_by(config_map: Obj, run_uid: str) -> bool:
    refs = (config_map.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") == run_uid for r in refs)


def entry_problem(entry: certified.Entry, node_name: str, proof: Proof) -> str | None:
    """Pure: None when ``proof`` gives ``node_name`` (with the entry's uid) the entry's verdict."""
    if proof.problem is not None:
        return proof.problem
    proven = proof.verdicts.get(node_name)
    if proven is None or proven[0] != entry["nodeUID"]:
        return f"the Run evidence gives no verdict for Node {node_name} with uid {entry['nodeUID']}"
    if proven[1] != entry["verdict"]:
        return f"the Run evidence gives Node {node_name} {proven[1]}, the record says {entry['verdict']}"
    wrong = [f"{k} {entry[k]!r} (the Run's: {v!r})" for k, v in proof.fields.items() if entry[k] != v]
    if wrong:
        return "the entry is not the Run's: " + ", ".join(wrong)
    completed, decided = _time(entry["completionTime"]), _time(proof.decided_at)
    if completed is None or decided is None or completed > decided:
        return f"its completionTime {entry['completionTime']!r} is not at or before the decision ({proof.decided_at})"
    return None


_proofs: "OrderedDict[tuple[str, str, str, str], Proof]" = OrderedDict()
_reported: set[tuple[str, str, str]] = set()


async def _proof(ctx: Context, entry: certified.Entry) -> Proof:
    key = (entry["namespace"], entry["run"], entry["runUID"], entry["evidenceDigest"])
    if key in _proofs:
        _proofs.move_to_end(key)
        return _proofs[key]
    namespace, name = entry["namespace"], entry["run"]
    path = resource_path("v1", "configmaps", namespace)
    config_map = await ctx.kube.get_or_none(f"{path}/{keys.run_evidence_name(name)}")
    run = await ctx.kube.get_or_none(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, name))
    checks: dict[int, Obj | None] = {}
    if run is not None and config_map is not None:
        for index in range(len(run["spec"]["checks"])):
            checks[index] = await ctx.kube.get_or_none(f"{path}/{keys.check_evidence_name(name, index)}")
    proof = derive_proof(run, config_map, entry["runUID"], entry["evidenceDigest"], checks)
    if proof.problem is None or run is not None:  # a Run not (yet) visible is asked again later
        _proofs[key] = proof
        if len(_proofs) > CACHE_SIZE:
            _proofs.popitem(last=False)
    return proof


async def proven(ctx: Context, profile: str, node_name: str, entry: certified.Entry | None) -> certified.Entry | None:
    """``entry`` when it may be projected as recorded; an unproven Pass as Inconclusive."""
    if entry is None or entry["verdict"] != "Pass":
        return entry
    if entry["namespace"] != ctx.namespace:
        problem: str | None = f"it cites a Run in namespace {entry['namespace']}, not {ctx.namespace}"
    else:
        problem = entry_problem(entry, node_name, await _proof(ctx, entry))
    if problem is None:
        return entry
    seen = (profile, node_name, f"{entry['runUID']}|{entry['evidenceDigest']}|{entry['nodeUID']}")
    if seen not in _reported:
        _reported.add(seen)
        UNPROVEN.labels(profile).inc()
        message = (
            f"{profile}: the certified-nodes record says Pass (Run {entry['namespace']}/{entry['run']}, evidence "
            f"{entry['evidenceDigest']}) but {problem}; projected Inconclusive. Find who wrote "
            f"CertificationProfile {profile} status.certifiedNodes, then request a new certification"
        )
        log.warning("certified record entry unproven", profile=profile, node=node_name, problem=problem)
        await events.emit(ctx, events.node_ref(node_name), "CertifiedRecordUnproven", message[:1000], warning=True)
    return {**entry, "verdict": "Inconclusive"}
