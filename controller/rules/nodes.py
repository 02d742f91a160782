"""A compact, frozen view of a Node: only what admission decides on. Parsed from raw JSON
(never typed client models) so that 10,000 watched Nodes stay small. Pure."""

import functools
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from controller.rules.projection import node_copy
from shared import keys
from shared.cachetransform import shared_mapping
from shared.quantity import QuantityError, parse_quantity

RESERVED_TAINT_KEY = keys.RESERVED_TAINT_KEY
NOTHING: Mapping[str, str] = shared_mapping(())
"""The empty mapping every cached Node without projections or completions shares (read-only)."""
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True)
class Reservation:
    """Who holds a Node: from the reservation label and annotation."""

    run_uid: str
    run_name: str = ""
    run_namespace: str = ""
    index: int = -1


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    uid: str
    resource_version: str
    labels: Mapping[str, str]
    ready: bool
    unschedulable: bool
    """Cordoned by someone other than Signal (spec.unschedulable or the unschedulable taint)."""
    allocatable: Mapping[str, int]
    """cpu in millicores; everything else in whole units."""
    capacity_raw: Mapping[str, str]
    allocatable_raw: Mapping[str, str]
    reservation: Reservation | None
    signal_taint_uid: str | None
    """The Run uid in Signal's reservation taint, when the Node carries it."""
    next_attempt: tuple[str, int] | None = None
    """(profile, attempt) recorded when the Node was released for a retry."""
    completed: Mapping[str, str] = field(default_factory=dict)
    """Profile -> completion time the Node's annotation claims (never trusted: recurrence
    reads the profile's record, shared/certified.py)."""
    projection: Mapping[str, str] = field(default_factory=dict)
    """Signal's projection keys on the Node as it carries them (controller/rules/projection.node_copy),
    compared with the profile's record on every resync (controller/reconcile/reassert.py)."""
    taints: tuple[tuple[str, str, str], ...] = ()
    """(key, value, effect) of the Node's taints other than Signal's cordon and the
    unschedulable taint (those are ``signal_taint_uid`` and ``unschedulable``)."""
    raw_taints: tuple[tuple[tuple[str, str], ...], ...] = ()
    """Every taint as the Node carries it (all its fields, in order): what a reservation
    patch written from this view keeps (``patch_basis``)."""
    attempt_raw: str = ""
    """The Node's next-attempt annotation as it is (``next_attempt`` is its parsed form)."""
    guards: tuple[str, ...] = ()
    """Which of the autoscalers' do-not-disrupt annotations the Node carries (a reservation
    adds the others, and its release removes only those: controller/rules/manifests.py)."""

    @property
    def signal_tainted(self) -> bool:
        return self.signal_taint_uid is not None

    @property
    def stray_reservation(self) -> str | None:
        """The Run uid of a reservation label that Signal's taint does not back (written by the
        Node's kubelet, or by someone else): it reserves nothing and is removed by recovery."""
        uid = self.labels.get(keys.RESERVED_BY_LABEL)
        return uid if uid and self.reservation is None else None


def _text(items: tuple[tuple[Any, Any], ...]) -> Mapping[str, str]:
    """A Node's capacity or allocatable as text, read-only and shared by every cached Node with
    the same (a fleet's Nodes mostly have one of a few: about 1 KiB less per cached Node)."""
    try:
        return _shared_text(items)
    except TypeError:  # an unhashable value (never from the API server): keyed by its text
        return _shared_text(tuple((str(k), str(v)) for k, v in items))


@functools.lru_cache(maxsize=1024)
def _shared_text(items: tuple[tuple[Any, Any], ...]) -> Mapping[str, str]:
    return MappingProxyType({sys.intern(str(k)): sys.intern(str(v)) for k, v in items})


def _allocatable(items: tuple[tuple[Any, Any], ...]) -> Mapping[str, int]:
    try:
        return _parsed_resources(items)
    except TypeError:
        return _parsed_resources(tuple((str(k), str(v)) for k, v in items))


@functools.lru_cache(maxsize=1024)
def _parsed_resources(raw: tuple[tuple[Any, Any], ...]) -> Mapping[str, int]:
    """A Node's resources parsed, read-only (cached by their text: a fleet's Nodes mostly share
    it, and parsing a quantity is most of what reading a Node costs; bounded, so a fleet of
    distinct Nodes only misses it; views with the same text share the mapping). An
    unparseable resource simply cannot satisfy a request."""
    parsed = {}
    for name, value in raw:
        try:
            parsed[str(name)] = parse_quantity(str(value), milli=name == "cpu")
        except QuantityError:
            continue
    return MappingProxyType(parsed)


def parse_reservation(
    labels: Mapping[str, str], annotations: Mapping[str, str], taint_uid: str | None
) -> Reservation | None:
    """The Node's reservation: the reservation label AND Signal's taint naming the same Run.
    The label and annotation are the Node's own kubelet's to write; the taint is not
    (NodeRestriction refuses a kubelet any change of its taints). A label without that taint
    reserves nothing (``stray_reservation`` tells it apart, for orphan recovery)."""
    uid = labels.get(keys.RESERVED_BY_LABEL)
    if not uid or uid != taint_uid:
        return None
    try:
        detail = json.loads(annotations.get(keys.RESERVATION_ANNOTATION, "{}"))
        if not isinstance(detail, dict):
            detail = {}
    except (ValueError, RecursionError):  # the Node's kubelet may write anything here
        detail = {}
    try:
        index = int(str(detail.get("index", -1)), 10)
    except ValueError:
        index = -1
    run, namespace = detail.get("run"), detail.get("namespace")
    return Reservation(
        run_uid=uid,
        run_name=run if isinstance(run, str) else "",
        run_namespace=namespace if isinstance(namespace, str) else "",
        index=index,
    )


def node_view(node: Mapping[str, Any]) -> NodeView:
    """Parse a raw Node object."""
    meta = node.get("metadata", {})
    spec = node.get("spec", {}) or {}
    status = node.get("status", {}) or {}
    labels = {sys.intern(k): sys.intern(str(v)) for k, v in (meta.get("labels") or {}).items() if v is not None}
    annotations = meta.get("annotations") or {}
    taints = spec.get("taints") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    taint_uid = next((str(t.get("value", "")) for t in taints if t.get("key") == RESERVED_TAINT_KEY), None)
    allocatable = tuple((status.get("allocatable") or {}).items())
    foreign_cordon = bool(spec.get("unschedulable")) or any(t.get("key") == UNSCHEDULABLE_TAINT_KEY for t in taints)
    return NodeView(
        # Interned: every cached Run that names the Node shares these (controller/rules/runview.py).
        name=sys.intern(str(meta.get("name", ""))),
        uid=sys.intern(str(meta.get("uid", ""))),
        resource_version=meta.get("resourceVersion", ""),
        labels=labels,
        ready=ready,
        unschedulable=foreign_cordon,
        allocatable=_allocatable(allocatable),
        capacity_raw=_text(tuple((status.get("capacity") or {}).items())),
        allocatable_raw=_text(allocatable),
        reservation=parse_reservation(labels, annotations, taint_uid),
        signal_taint_uid=taint_uid,
        next_attempt=_next_attempt(str(annotations.get(keys.ATTEMPT_ANNOTATION) or "")),
        completed=_completed(annotations) or NOTHING,
        projection=node_copy(node) or NOTHING,
        taints=tuple(
            (str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
            for t in taints
            if t.get("key") not in {RESERVED_TAINT_KEY, UNSCHEDULABLE_TAINT_KEY}
        ),
        raw_taints=tuple(tuple((sys.intern(str(k)), str(v)) for k, v in t.items()) for t in taints),
        attempt_raw=sys.intern(str(annotations.get(keys.ATTEMPT_ANNOTATION) or "")),
        guards=tuple(k for k in keys.DO_NOT_DISRUPT_ANNOTATIONS if k in annotations),
    )


def patch_basis(view: NodeView) -> dict[str, Any]:
    """The part of a raw Node that a reservation patch is decided on (its resourceVersion,
    labels, next-attempt annotation and taints), rebuilt from a cached view. A patch made from
    it is conditioned on that resourceVersion, so it applies only to exactly the Node the view
    was parsed from (else the API server answers Conflict)."""
    annotations = {keys.ATTEMPT_ANNOTATION: view.attempt_raw} if view.attempt_raw else {}
    annotations |= dict.fromkeys(view.guards, "true")  # their presence is what a reservation decides on
    return {
        "metadata": {
            "name": view.name,
            "uid": view.uid,
            "resourceVersion": view.resource_version,
            "labels": dict(view.labels),
            "annotations": annotations,
        },
        "spec": {"taints": [dict(t) for t in view.raw_taints]} if view.raw_taints else {},
    }


_MAX_ATTEMPT_DIGITS = 18
"""An attempt number Signal writes fits in 64 bits; a longer one is not Signal's."""


def _next_attempt(value: str) -> tuple[str, int] | None:
    profile, _, number = value.rpartition(":")
    if not profile or not (number.isascii() and number.isdigit()) or len(number) > _MAX_ATTEMPT_DIGITS:
        return None
    return sys.intern(profile), int(number)


def _completed(annotations: Mapping[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in annotations.items():
        if not key.startswith(keys.CERTIFIED_LABEL_PREFIX):
            continue
        try:
            detail = json.loads(value)
        except (ValueError, RecursionError):
            continue
        when = detail.get("completionTime") if isinstance(detail, dict) else None
        if isinstance(when, str):
            found[sys.intern(key[len(keys.CERTIFIED_LABEL_PREFIX) :])] = when
    return found
