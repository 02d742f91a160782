"""What ``signalctl uninstall --clean-nodes`` does to one Node (issue 43, item 6): the patches
that remove every key of shared/nodekeys.py from it. Pure; signalctl/uninstall.py does the I/O.

A Node a Run holds (Signal's reservation label or taint) keeps what holds it (the held keys)
unless ``release_held``; everything else of Signal's goes. The do-not-disrupt annotations go
only where the reservation's detail says Signal added them (an operator's own stay).

A profile's ``onFail`` taint has a key the operator chose, which no inventory can name: it goes
only when named in ``fail_taints`` (``--fail-taint KEY``) and only from a Node that carries
Signal's Fail condition (``failed.projectsignal.dev/<profile>``, status True), the mark Signal
writes beside it; elsewhere the same key is the operator's or another system's and stays."""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared import keys
from shared.nodekeys import GUARDED, node_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from shared.nodekeys import Where

Obj = dict[str, Any]


@dataclass
class NodeCleanup:
    name: str
    held_by: str | None = None
    """The uid of the Run holding the Node (None: not held)."""
    remove: list[str] = field(default_factory=list)
    """``label key``, ``annotation key``, ``taint key``, ``condition type``: what goes."""
    keep: list[str] = field(default_factory=list)
    """Held keys left in place (without ``release_held``)."""
    metadata_patch: Obj | None = None
    """Merge patch of the Node (labels, annotations, taints), conditioned on its resourceVersion."""
    status_patch: Obj | None = None
    """Strategic merge patch of ``nodes/status`` deleting Signal's conditions."""


def _reserved_detail(annotations: Mapping[str, str]) -> Mapping[str, Any]:
    try:
        detail = json.loads(annotations.get(keys.RESERVATION_ANNOTATION) or "{}")
    except (ValueError, RecursionError):
        return {}
    return detail if isinstance(detail, dict) else {}


def _failed(conditions: list[Obj]) -> bool:
    return any(
        str(c.get("type", "")).startswith(keys.FAILED_CONDITION_PREFIX) and c.get("status") == "True"
        for c in conditions
    )


def plan_node(node: Mapping[str, Any], *, release_held: bool, fail_taints: frozenset[str] = frozenset()) -> NodeCleanup:
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    taints: list[Obj] = list((node.get("spec") or {}).get("taints") or [])
    conditions: list[Obj] = list((node.get("status") or {}).get("conditions") or [])
    reserved_taints = [t for t in taints if t.get("key") == keys.RESERVED_TAINT_KEY]
    holder = labels.get(keys.RESERVED_BY_LABEL) or next((str(t.get("value", "")) for t in reserved_taints), None)
    plan = NodeCleanup(str(meta.get("name", "")), held_by=holder or None)
    added = _reserved_detail(annotations).get("doNotDisrupt")
    signal_added = {k for k in added if isinstance(k, str)} if isinstance(added, list) else set()

    def goes(where: "Where", key: str) -> bool | None:
        """True: removed; False: kept (held); None: not Signal's."""
        entry = node_key(where, key)
        if entry is None or (key in GUARDED and key not in signal_added):
            return None
        if entry.held and plan.held_by is not None and not release_held:
            plan.keep.append(f"{where} {key}")
            return False
        plan.remove.append(f"{where} {key}")
        return True

    gone_labels = [k for k in sorted(labels) if goes("label", k)]
    gone_annotations = [k for k in sorted(annotations) if goes("annotation", k)]
    failed = _failed(conditions)

    def taint_goes(key: str) -> bool:
        if failed and key in fail_taints and node_key("taint", key) is None:
            plan.remove.append(f"taint {key}")
            return True
        return bool(goes("taint", key))

    kept_taints = [t for t in taints if not taint_goes(str(t.get("key", "")))]
    gone_conditions = [str(c.get("type")) for c in conditions if goes("condition", str(c.get("type", "")))]
    if gone_labels or gone_annotations or len(kept_taints) != len(taints):
        patch: Obj = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
        if gone_labels:
            patch["metadata"]["labels"] = dict.fromkeys(gone_labels)
        if gone_annotations:
            patch["metadata"]["annotations"] = dict.fromkeys(gone_annotations)
        if len(kept_taints) != len(taints):
            patch["spec"] = {"taints": kept_taints or None}
        plan.metadata_patch = patch
    if gone_conditions:
        plan.status_patch = {"status": {"conditions": [{"type": t, "$patch": "delete"} for t in gone_conditions]}}
    return plan
