"""Projection of a Run's result onto its Nodes, as plain data. Pure.

For profile ``p`` each participant Node gets the label ``certified.projectsignal.dev/p``
(``Pass``/``Fail``/``Inconclusive``), an annotation of the same key with the detail (Run
name, namespace and uid, when the Run was created and completed, the evidence digest and
the profile's source digest: the suite identity) and a Node condition of the same type, plus
the label schedulers can trust, ``node-restriction.kubernetes.io/signal-<profile>``
(shared/certified.py). These are copies: the original is the profile's record, from which the
controller re-asserts them (``reassert_patches``; controller/reconcile/reassert.py).

Monotonic: a Node keeps the result of the newest Run, ordered by the Run's creation time
(Runs of one Node never overlap, so a later creation is a later admission). A Run created
at the same second as the recorded one but with another uid does not overwrite it either.
"""

import json
from collections.abc import Mapping
from typing import Any

from shared import certified, keys

Obj = dict[str, Any]


def detail(run: Obj, verdict: str, digest: str, completed: str) -> dict[str, str]:
    meta, spec = run["metadata"], run["spec"]
    return {
        "verdict": verdict,
        "run": meta["name"],
        "namespace": meta["namespace"],
        "runUID": meta["uid"],
        "runCreated": meta["creationTimestamp"],
        "completionTime": completed,
        "evidenceDigest": digest,
        "sourceDigest": spec["source"]["digest"],
        "profileGeneration": str(spec["profile"]["generation"]),
    }


def recorded(node: Obj, profile: str) -> dict[str, str] | None:
    """The detail of the result a Node carries for ``profile``, if readable."""
    raw = (node.get("metadata", {}).get("annotations") or {}).get(keys.certified_label(profile))
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # the Node's kubelet may write anything here
        return None
    return value if isinstance(value, dict) else None


def supersedes(new: dict[str, str], old: dict[str, str] | None) -> bool:
    """Whether ``new`` may replace ``old`` on a Node (same Run: yes, to repair)."""
    if old is None or old.get("runUID") == new["runUID"]:
        return True
    old_created = old.get("runCreated")
    if not isinstance(old_created, str):
        return True  # garbled: not a result Signal wrote
    return new["runCreated"] > old_created


def projection_patch(
    node: Obj, profile: str, new: dict[str, str], *, on_record: Mapping[str, str] | None = None
) -> Obj | None:
    """Merge patch (conditioned on the Node's resourceVersion) projecting ``new``, or None
    when the Node already carries it, or when the profile's record (``on_record``: its entry
    for this Node, which the record keeps monotonic) holds another Run's result. The Node's own
    annotation is never compared with: its kubelet can write it (a far-future ``runCreated``
    would otherwise hold a real result off until the next re-assertion)."""
    key = keys.certified_label(profile)
    if on_record is not None and on_record.get("runUID") != new["runUID"] and not supersedes(new, dict(on_record)):
        return None
    labels = node.get("metadata", {}).get("labels") or {}
    encoded = json.dumps(new, sort_keys=True, separators=(",", ":"))
    annotations = node.get("metadata", {}).get("annotations") or {}
    if labels.get(key) == new["verdict"] and annotations.get(key) == encoded:
        return None
    return {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "labels": {key: new["verdict"], certified.trusted_label(profile): new["verdict"]},
            "annotations": {key: encoded},
        }
    }


def node_condition(profile: str, new: dict[str, str]) -> Obj:
    return {
        "type": keys.certified_label(profile),
        "status": "True" if new["verdict"] == "Pass" else "False",
        "reason": new["verdict"],
        "message": (
            f"Run {new['namespace']}/{new['run']} ({new['runUID']}) completed {new['completionTime']}; "
            f"evidence {new['evidenceDigest']}"
        ),
        "lastTransitionTime": new["completionTime"],
        "lastHeartbeatTime": new["completionTime"],
    }


FAILED_REASONS = {
    "Pass": "CertificationPassed",
    "Fail": "CertificationFailed",
    "Inconclusive": "CertificationInconclusive",
}


def failed_condition(profile: str, new: dict[str, str]) -> Obj:
    """The Node condition a remediator watches (issue 43, item 3): type
    ``failed.projectsignal.dev/<profile>``, True only for a Fail (reason ``CertificationFailed``);
    False with reason ``CertificationPassed`` or ``CertificationInconclusive`` otherwise. An
    Inconclusive says nothing about the Node's health, so it never reads as a failure."""
    verdict = new["verdict"]
    return node_condition(profile, new) | {
        "type": keys.failed_condition(profile),
        "status": "True" if verdict == "Fail" else "False",
        "reason": FAILED_REASONS.get(verdict, "CertificationInconclusive"),
    }


# -- the authoritative record and the Node's copy of it (issue 12, item 6; shared/certified.py) --

LABEL, ANNOTATION, CONDITION = "label:", "annotation:", "condition:"


def record_entry(run: Obj, verdict: str, digest: str, completed: str, node_uid: str) -> dict[str, str]:
    """A Node's entry in its profile's record: the projection detail and the Node's uid."""
    return {**detail(run, verdict, digest, completed), "nodeUID": node_uid}


def _encoded(detail_: dict[str, str]) -> str:
    return json.dumps(detail_, sort_keys=True, separators=(",", ":"))


def _condition_signature(condition: Obj) -> str:
    return f"{condition.get('status')}|{condition.get('reason')}|{condition.get('message')}"


def node_copy(node: Mapping[str, Any]) -> dict[str, str]:
    """What a raw Node carries of Signal's projections: ``label:<key>``, ``annotation:<key>``,
    ``condition:<type>`` (status|reason|message) for every projection key on it."""
    meta = node.get("metadata") or {}
    found: dict[str, str] = {}
    for key, value in (meta.get("labels") or {}).items():
        if key.startswith((keys.CERTIFIED_LABEL_PREFIX, certified.TRUSTED_LABEL_PREFIX)):
            found[LABEL + key] = str(value)
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith(keys.CERTIFIED_LABEL_PREFIX):
            found[ANNOTATION + key] = str(value)
    for condition in (node.get("status") or {}).get("conditions") or []:
        kind = str(condition.get("type", ""))
        if kind.startswith((keys.CERTIFIED_LABEL_PREFIX, keys.FAILED_CONDITION_PREFIX)):
            found[CONDITION + kind] = _condition_signature(condition)
    return found


STALE = certified.STALE


def stale_condition(profile: str, shown: dict[str, str], why: str) -> Obj:
    """The Node condition of a result that expired: False, reason ``Stale``, and why."""
    condition = node_condition(profile, shown)
    return condition | {"status": "False", "reason": STALE, "message": f"{why}; was: {condition['message']}"[:1000]}


def expected_copy(profile: str, entry: dict[str, str] | None, stale: str | None = None) -> dict[str, str | None]:
    """What a Node must carry for ``profile`` given its record entry (None: nothing); ``stale``:
    why the entry proves nothing current any more (its labels then say ``Stale``)."""
    key, trusted = keys.certified_label(profile), certified.trusted_label(profile)
    failed = keys.failed_condition(profile)
    if entry is None:
        return {
            LABEL + key: None,
            LABEL + trusted: None,
            ANNOTATION + key: None,
            CONDITION + key: None,
            CONDITION + failed: None,
        }
    shown = {k: v for k, v in entry.items() if k != "nodeUID"}
    shown_condition = node_condition(profile, shown) if stale is None else stale_condition(profile, shown, stale)
    value = entry["verdict"] if stale is None else STALE
    return {
        LABEL + key: value,
        LABEL + trusted: value,
        ANNOTATION + key: _encoded(shown),
        CONDITION + key: _condition_signature(shown_condition),
        # A Fail stays a Fail when it goes stale: nothing has proven the Node since.
        CONDITION + failed: _condition_signature(failed_condition(profile, shown)),
    }


def reassert_patches(
    profile: str, entry: dict[str, str] | None, copy: dict[str, str], resource_version: str, stale: str | None = None
) -> tuple[Obj | None, Obj | None, list[str]]:
    """(metadata merge patch, status strategic patch, what differed) making a Node's copy of
    ``profile`` equal its record entry (``stale``: as expected_copy); (None, None, []) when it
    already is."""
    expected = expected_copy(profile, entry, stale)
    differs = sorted(k for k, v in expected.items() if copy.get(k) != v)
    if not differs:
        return None, None, []
    labels = {k[len(LABEL) :]: expected[k] for k in differs if k.startswith(LABEL)}
    annotations = {k[len(ANNOTATION) :]: expected[k] for k in differs if k.startswith(ANNOTATION)}
    meta: Obj | None = None
    if labels or annotations:
        meta = {"metadata": {"resourceVersion": resource_version}}
        if labels:
            meta["metadata"]["labels"] = labels
        if annotations:
            meta["metadata"]["annotations"] = annotations
    key, failed = keys.certified_label(profile), keys.failed_condition(profile)
    conditions: list[Obj] = []
    if entry is None:
        conditions = [{"type": k, "$patch": "delete"} for k in (key, failed) if CONDITION + k in differs]
    else:
        shown = {k: v for k, v in entry.items() if k != "nodeUID"}
        if CONDITION + key in differs:
            conditions.append(
                node_condition(profile, shown) if stale is None else stale_condition(profile, shown, stale)
            )
        if CONDITION + failed in differs:
            conditions.append(failed_condition(profile, shown))
    status: Obj | None = {"status": {"conditions": conditions}} if conditions else None
    return meta, status, differs
