"""Objects the controller writes, built as plain dicts from plain data. Pure.

Deterministic names: a Run is ``<profile>-<hash of profile uid, attempt and the group's Node
uids>-<ordinal>``, where the ordinal is one past the highest of the group's Runs still there
(``next_ordinal``), so a repeated admission of the same state produces the same name (a
harmless AlreadyExists) while a later re-certification of the same group gets a new one, also
after retention deleted the group's older Runs. Children are named after their Run."""

import hashlib
import json
import math
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controller.rules.nodes import RESERVED_TAINT_KEY, NodeView
from shared import keys, quarantine, snapshot
from shared.durations import parse_duration
from shared.profile import CertificationProfile

WORKFLOW_TEMPLATE = keys.WORKFLOW_TEMPLATE
GROUP_HASH_LABEL = f"{keys.GROUP}/group-hash"


def group_hash(profile_uid: str, attempt: int, nodes: Sequence[NodeView]) -> str:
    material = json.dumps([profile_uid, attempt, sorted(n.uid for n in nodes)]).encode()
    return hashlib.sha256(material).hexdigest()[:10]


def run_name(profile: str, ghash: str, ordinal: int) -> str:
    return f"{profile[:40]}-{ghash}-{ordinal}"


MAX_ORDINAL_DIGITS = 9
"""A name's ordinal beyond this many digits is no Run of ours: it is ignored, not continued."""


def next_ordinal(profile: str, ghash: str, names: Iterable[str]) -> int:
    """The ordinal of a group's next Run: one past the highest ordinal among ``names`` (the
    group's Runs still there). Not their count: retention deletes a group's oldest Runs, and a
    count would then name the newest Run still there, again and again. A name not of this
    profile and group (hand-made, carrying the group's label) counts for nothing."""
    prefix = run_name(profile, ghash, 0)[:-1]
    ordinals = [
        int(tail)
        for name in names
        if name.startswith(prefix)
        and (tail := name[len(prefix) :]).isascii()
        and tail.isdigit()
        and len(tail) <= MAX_ORDINAL_DIGITS
    ]
    return 1 + max(ordinals, default=0)


def snapshot_name(run: str, nonce: str = "") -> str:
    """``<run>-scripts-<nonce>``: a fresh ``nonce`` for each Run (``new_nonce``), so that a
    ConfigMap squatting a group's snapshot name can block at most the Run it was made for
    (rolled back), never the group's next admission, whose Run gets another name."""
    return f"{run}-scripts-{nonce}" if nonce else f"{run}-scripts"


def new_nonce() -> str:
    """Eight random hex digits for a Run's snapshot name."""
    return secrets.token_hex(4)


def suite_deadline_seconds(profile: CertificationProfile) -> int:
    total = sum(parse_duration(c.backend_active_deadline).total_seconds() for c in profile.spec.checks)
    return max(1, math.ceil(total + parse_duration(profile.spec.evidence_reserve).total_seconds()))


def owner_reference(run: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.RUN_KIND,
        "name": run["metadata"]["name"],
        "uid": run["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controlled_by(obj: Mapping[str, Any], run: Mapping[str, Any]) -> bool:
    """Whether ``run`` is ``obj``'s controller (an ownerReference with its uid and
    ``controller: true``): the only children Signal uses, adopts or deletes."""
    uid = run["metadata"]["uid"]
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(
        isinstance(o, dict) and o.get("uid") == uid and o.get("controller") is True and o.get("kind") == keys.RUN_KIND
        for o in owners
    )


def run_manifest(
    *,
    profile: CertificationProfile,
    nodes: Sequence[NodeView],
    name: str,
    namespace: str,
    ghash: str,
    source_digest: str,
    attempt: int = 1,
    snapshot_nonce: str = "",
) -> dict[str, Any]:
    # The quarantine the Run adopts (shared/quarantine.py): its rules, copied, and what each
    # Node carried of it, recorded where only the controller writes (never on the Node).
    rules: dict[str, Any] = {}
    if profile.spec.adopt_quarantine is not None:
        rules["adoptQuarantine"] = profile.spec.adopt_quarantine.to_wire()
    if profile.spec.on_fail is not None:
        rules["onFail"] = profile.spec.on_fail.to_wire()
    participants = [
        {
            "index": i,
            "nodeName": node.name,
            "nodeUID": node.uid,
            "capacity": dict(sorted(node.capacity_raw.items())),
            "allocatable": dict(sorted(node.allocatable_raw.items())),
            **({"adopted": a} if (a := quarantine.adopted_on(rules, node.taints, node.unschedulable)) else {}),
        }
        for i, node in enumerate(nodes)
    ]
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.RUN_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {keys.PROFILE_LABEL: profile.metadata.name, GROUP_HASH_LABEL: ghash},
        },
        "spec": {
            "profile": {
                "name": profile.metadata.name,
                "uid": profile.metadata.uid,
                "generation": profile.metadata.generation or 1,
            },
            "checks": [c.to_wire() for c in profile.spec.checks],
            "source": {"digest": source_digest, "snapshotConfigMap": snapshot_name(name, snapshot_nonce)},
            "participants": participants,
            "suiteDeadlineSeconds": suite_deadline_seconds(profile),
            "attempt": attempt,
            **rules,
            **({"busyNodes": profile.spec.busy_nodes.to_wire()} if profile.spec.busy_nodes.policy != "none" else {}),
        },
    }


def snapshot_manifest(run: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """The Run-owned immutable copy of the source ConfigMap's exact bytes."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": run["spec"]["source"]["snapshotConfigMap"],
            "namespace": run["metadata"]["namespace"],
            "labels": {
                keys.RUN_NAME_LABEL: run["metadata"]["name"],
                keys.RUN_UID_LABEL: run["metadata"]["uid"],
                keys.COMPONENT_LABEL: snapshot.COMPONENT,
            },
            "ownerReferences": [owner_reference(run)],
        },
        "immutable": True,
    }
    if source.get("data"):
        body["data"] = dict(source["data"])
    if source.get("binaryData"):
        body["binaryData"] = dict(source["binaryData"])
    return body


def workflow_manifest(run: Mapping[str, Any], instance_id: str = "") -> dict[str, Any]:
    """The Run's Workflow. ``instance_id``: the Argo workflow-controller instance that should
    run it (Argo's ``instanceID``), when the cluster runs several."""
    spec = run["spec"]
    participants = sorted(spec["participants"], key=lambda p: p["index"])
    compact = [{"index": p["index"], "nodeName": p["nodeName"], "nodeUID": p["nodeUID"]} for p in participants]
    meta = run["metadata"]
    parameters = {
        "run-name": meta["name"],
        "run-namespace": meta["namespace"],
        "run-uid": meta["uid"],
        "participants": ",".join(p["nodeName"] for p in participants),
        "participants-json": json.dumps(compact, separators=(",", ":")),
        "checks": json.dumps(spec["checks"], separators=(",", ":"), sort_keys=True),
        "check-count": str(len(spec["checks"])),
        "snapshot": spec["source"]["snapshotConfigMap"],
    }
    if tuple(parameters) != keys.WORKFLOW_PARAMETERS:  # pragma: no cover - guarded by unit tests
        raise AssertionError("workflow parameters drifted from shared.keys.WORKFLOW_PARAMETERS")
    return {
        "apiVersion": keys.ARGO_API_VERSION,
        "kind": "Workflow",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {
                keys.RUN_NAME_LABEL: meta["name"],
                keys.RUN_UID_LABEL: meta["uid"],
                **({keys.ARGO_INSTANCE_LABEL: instance_id} if instance_id else {}),
            },
            "ownerReferences": [owner_reference(run)],
        },
        "spec": {
            "workflowTemplateRef": {"name": WORKFLOW_TEMPLATE},
            "activeDeadlineSeconds": spec["suiteDeadlineSeconds"],
            "arguments": {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]},
        },
    }


def reservation_patch(node: Mapping[str, Any], run: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Merge patch reserving a Node for a Run: label, annotation and Signal's NoSchedule taint.
    Conditioned on the Node's resourceVersion (optimistic concurrency)."""
    meta = run["metadata"]
    taints = [t for t in (node.get("spec", {}).get("taints") or []) if t.get("key") != RESERVED_TAINT_KEY]
    taints.append({"key": RESERVED_TAINT_KEY, "value": meta["uid"], "effect": "NoSchedule"})
    request = (node["metadata"].get("labels") or {}).get(keys.CERTIFY_LABEL, "")
    detail = {
        "run": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
        "index": index,
        "request": request,
    }
    present = node["metadata"].get("annotations") or {}
    attempt = present.get(keys.ATTEMPT_ANNOTATION)
    if attempt:
        detail["nextAttempt"] = attempt  # restored by a rollback, with the request
    # Autoscalers leave a held Node alone; only what the reservation adds goes with the release.
    guards = [k for k in keys.DO_NOT_DISRUPT_ANNOTATIONS if k not in present]
    detail["doNotDisrupt"] = guards
    return {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            # The operator's request is consumed by the admission (restored by a rollback).
            "labels": {keys.RESERVED_BY_LABEL: meta["uid"], keys.CERTIFY_LABEL: None},
            "annotations": {
                keys.RESERVATION_ANNOTATION: json.dumps(detail, sort_keys=True),
                keys.ATTEMPT_ANNOTATION: None,
                **dict.fromkeys(guards, "true"),
            },
        },
        "spec": {"taints": taints},
    }


def release_patch(
    node: Mapping[str, Any],
    run_uid: str,
    *,
    restore_request: str | None = None,
    next_attempt: int | None = None,
    lift: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Merge patch removing a Run's reservation, or None when the Node is not held by it.
    Only Signal's own taint is removed: an operator's cordon (spec.unschedulable) stays.
    ``restore_request`` (rollback of an admission that never completed, or a retry) is the
    profile whose certification request the Node gets back, unless it carries a newer one: the
    Run's profile (or its ledger group's), never the profile the reservation annotation names,
    which the Node's own kubelet can rewrite (the request label is one a kubelet cannot write,
    and a release must not write it on a kubelet's word). ``next_attempt`` (a retry) records the
    attempt number the next admission of that request takes. ``lift`` (a release after a Pass:
    the Run's raw participant entry) also lifts the quarantine the Run adopted on the Node
    (shared/quarantine.py): each recorded taint still carried exactly (key, value, effect), and
    the cordon when recorded; nothing else, in the same patch as the reservation's removal."""
    labels = node.get("metadata", {}).get("labels") or {}
    taints = node.get("spec", {}).get("taints") or []
    ours = labels.get(keys.RESERVED_BY_LABEL) == run_uid
    our_taint = [t for t in taints if t.get("key") == RESERVED_TAINT_KEY and t.get("value") == run_uid]
    if not ours and not our_taint:
        return None
    cordon, adopted = quarantine.recorded(lift) if lift is not None else (False, [])
    lifted = [t for t in taints if _as_taint(t) in adopted]
    remaining = [t for t in taints if t not in our_taint and t not in lifted]
    patch: dict[str, Any] = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}
    if ours:
        patch["metadata"]["labels"] = {keys.RESERVED_BY_LABEL: None}
        patch["metadata"]["annotations"] = {keys.RESERVATION_ANNOTATION: None}
        annotations = node.get("metadata", {}).get("annotations") or {}
        detail = _detail_of(annotations.get(keys.RESERVATION_ANNOTATION, ""))
        added = detail.get("doNotDisrupt")
        for key in added if isinstance(added, list) else []:
            if key in keys.DO_NOT_DISRUPT_ANNOTATIONS and key in annotations:  # never anything else
                patch["metadata"]["annotations"][key] = None
        request = restore_request
        if request and keys.CERTIFY_LABEL not in labels:
            patch["metadata"]["labels"][keys.CERTIFY_LABEL] = request
            attempt = detail.get("nextAttempt")
            if next_attempt is not None:
                patch["metadata"]["annotations"][keys.ATTEMPT_ANNOTATION] = f"{request}:{next_attempt}"
            elif isinstance(attempt, str) and attempt.startswith(f"{request}:"):
                patch["metadata"]["annotations"][keys.ATTEMPT_ANNOTATION] = attempt
    patch["spec"] = {"taints": remaining or None}
    if cordon and node.get("spec", {}).get("unschedulable"):
        patch["spec"]["unschedulable"] = None
    return patch


def _as_taint(taint: Mapping[str, Any]) -> quarantine.Taint:
    return str(taint.get("key", "")), str(taint.get("value") or ""), str(taint.get("effect", ""))


def fail_taint_patch(node: Mapping[str, Any], taint: quarantine.Taint) -> dict[str, Any] | None:
    """Merge patch adding the Fail taint ``taint`` (key, value, effect) to a Node, conditioned on
    its resourceVersion; None when it already carries it (any value of its key and effect)."""
    taints = list(node.get("spec", {}).get("taints") or [])
    key, value, effect = taint
    if any(t.get("key") == key and t.get("effect") == effect for t in taints):
        return None
    taints.append({"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect})
    return {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}, "spec": {"taints": taints}}


def _detail_of(annotation: str) -> dict[str, Any]:
    """The reservation's detail; empty when unreadable (the Node's kubelet may write anything)."""
    try:
        detail = json.loads(annotation)
    except (ValueError, RecursionError):
        return {}
    return detail if isinstance(detail, dict) else {}
