"""A Node's fleet health and capacity as the portal shows it beside the Node's results: the
Ready condition, GPU and RDMA allocatable, whether Signal holds it (reserved and cordoned by
which Run) and whether an operator cordoned it. Pure; no I/O. Used by portal/sources.py (to
reduce watched Nodes) and portal/index.py (to serve them).

RDMA allocatable is every extended resource in the ``rdma/`` domain (``rdma/ib``, the NVIDIA
network operator's ``rdma/rdma_shared_device_a``, ...), reported by name.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared import keys

UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
"""Kubernetes' own cordon taint (what ``kubectl cordon`` leads to), not a Signal key."""
RDMA_PREFIX = "rdma/"
MAX_RDMA = 8
MAX_TEXT = 253


@dataclass(frozen=True, slots=True)
class Hold:
    """Signal's reservation of the Node (shared/keys.py: label, annotation, taint)."""

    run_uid: str
    run_name: str
    run_namespace: str
    index: int | None
    cordoned: bool
    """Signal's reservation taint is on the Node."""


@dataclass(frozen=True, slots=True)
class NodeHealth:
    name: str
    uid: str
    ready: str
    """The Ready condition's status: True, False or Unknown (also when it is missing)."""
    ready_reason: str
    ready_since: str | None
    gpu: str | None
    """Allocatable nvidia.com/gpu, as the Node reports it."""
    rdma: tuple[tuple[str, str], ...]
    held: Hold | None
    operator_cordoned: bool
    """``spec.unschedulable`` or Kubernetes' unschedulable taint: a cordon that is not Signal's."""

    def to_json(self, *, show_run: bool) -> dict[str, Any]:
        """The JSON the API serves; ``show_run``: the caller may see the holding Run's workspace."""
        held: dict[str, Any] | None = None
        if self.held is not None:
            held = {"cordoned": self.held.cordoned, "run": None}
            if show_run:
                held["run"] = {
                    "name": self.held.run_name or None,
                    "namespace": self.held.run_namespace or None,
                    "uid": self.held.run_uid,
                    "index": self.held.index,
                }
        return {
            "ready": {"status": self.ready, "reason": self.ready_reason, "since": self.ready_since},
            "allocatable": {"gpu": self.gpu, "rdma": dict(self.rdma)},
            "signal": held,
            "operatorCordoned": self.operator_cordoned,
        }


def _text(value: Any) -> str:
    return str(value)[:MAX_TEXT] if value is not None else ""


def _hold(labels: Mapping[str, Any], annotations: Mapping[str, Any], taints: list[Any]) -> Hold | None:
    label_uid = _text(labels.get(keys.RESERVED_BY_LABEL))
    taint_uid = next(
        (_text(t.get("value")) for t in taints if isinstance(t, dict) and t.get("key") == keys.RESERVED_TAINT_KEY),
        None,
    )
    if not label_uid and taint_uid is None:
        return None
    try:
        detail = json.loads(str(annotations.get(keys.RESERVATION_ANNOTATION) or "{}"))
    except (ValueError, RecursionError):  # the Node's kubelet may write anything here
        detail = {}
    if not isinstance(detail, dict):
        detail = {}
    uid = label_uid or taint_uid or ""
    same = detail.get("uid") == uid  # the annotation names this very reservation
    index = detail.get("index") if same else None
    return Hold(
        run_uid=uid,
        run_name=_text(detail.get("run")) if same else "",
        run_namespace=_text(detail.get("namespace")) if same else "",
        index=index if isinstance(index, int) and not isinstance(index, bool) else None,
        cordoned=taint_uid is not None,
    )


def node_health(node: Mapping[str, Any]) -> NodeHealth:
    """Reduce a raw Node object (from a watch) to what the portal shows."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    ready = next((c for c in conditions if c.get("type") == "Ready"), {})
    state = ready.get("status")
    allocatable = status.get("allocatable") or {}
    rdma = sorted((_text(k), _text(v)) for k, v in allocatable.items() if str(k).startswith(RDMA_PREFIX))
    return NodeHealth(
        name=_text(meta.get("name")),
        uid=_text(meta.get("uid")),
        ready=state if state in {"True", "False"} else "Unknown",
        ready_reason=_text(ready.get("reason")) if ready else "NoReadyCondition",
        ready_since=_text(ready.get("lastTransitionTime")) or None,
        gpu=_text(allocatable[keys.GPU_RESOURCE]) if keys.GPU_RESOURCE in allocatable else None,
        rdma=tuple(rdma[:MAX_RDMA]),
        held=_hold(meta.get("labels") or {}, meta.get("annotations") or {}, taints),
        operator_cordoned=bool(spec.get("unschedulable"))
        or any(t.get("key") == UNSCHEDULABLE_TAINT_KEY for t in taints),
    )
