"""Projection of a Run's result onto its Nodes, as plain data. Pure.

For profile ``p`` each participant Node gets the label ``certified.projectsignal.dev/p``
(``Pass``/``Fail``/``Inconclusive``), an annotation of the same key with the detail (Run
name, namespace and uid, when the Run was created and completed, the evidence digest and
the profile's source digest: the suite identity) and a Node condition of the same type.

Monotonic: a Node keeps the result of the newest Run, ordered by the Run's creation time
(Runs of one Node never overlap, so a later creation is a later admission). A Run created
at the same second as the recorded one but with another uid does not overwrite it either.
"""

import json
from typing import Any

from shared import keys

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
    except ValueError:
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


def projection_patch(node: Obj, profile: str, new: dict[str, str]) -> Obj | None:
    """Merge patch (conditioned on the Node's resourceVersion) projecting ``new``, or None
    when the Node already carries it or a newer result."""
    key = keys.certified_label(profile)
    old = recorded(node, profile)
    if not supersedes(new, old):
        return None
    labels = node.get("metadata", {}).get("labels") or {}
    encoded = json.dumps(new, sort_keys=True, separators=(",", ":"))
    annotations = node.get("metadata", {}).get("annotations") or {}
    if labels.get(key) == new["verdict"] and annotations.get(key) == encoded:
        return None
    return {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "labels": {key: new["verdict"]},
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
