"""Fluent builders of raw Node JSON and parsed profiles for the controller's pure modules
(kueue-style wrappers): ``make_node("n1").gpus(8).zone("a").requested("p").ready(False).build()``.

A fresh ``make_node`` is a Ready Node with a uid and a resourceVersion and nothing else:
no labels, no taints, no resources. ``candidate`` adds what ``ProfileBuilder``'s default
profile asks for (requested, ``pool=gpu``, 8 allocatable GPUs)."""

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Self

from controller.rules.nodes import RESERVED_TAINT_KEY, UNSCHEDULABLE_TAINT_KEY, NodeView, node_view
from shared import keys
from shared.profile import CertificationProfile
from tests.builders import ProfileBuilder

Obj = dict[str, Any]


@dataclass
class NodeBuilder:
    name: str
    obj: Obj = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "uid": f"uid-{self.name}", "resourceVersion": "1"},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }

    # -- metadata ----------------------------------------------------------------------

    def uid(self, uid: str) -> Self:
        self.obj["metadata"]["uid"] = uid
        return self

    def resource_version(self, rv: str) -> Self:
        self.obj["metadata"]["resourceVersion"] = rv
        return self

    def label(self, key: str, value: str) -> Self:
        self.obj["metadata"].setdefault("labels", {})[key] = value
        return self

    def annotation(self, key: str, value: str) -> Self:
        self.obj["metadata"].setdefault("annotations", {})[key] = value
        return self

    def requested(self, profile: str) -> Self:
        return self.label(keys.CERTIFY_LABEL, profile)

    def pool(self, pool: str) -> Self:
        return self.label("pool", pool)

    def zone(self, zone: str) -> Self:
        return self.label(keys.ZONE_LABEL, zone)

    def reserved_by(self, run_uid: str, detail: Obj | str | None = None) -> Self:
        """A reservation as Signal writes it: the label, Signal's taint naming the same Run (unless
        the Node has Signal's taint already), and the annotation (a dict as JSON, a str verbatim)
        when given."""
        self.reservation_label(run_uid, detail)
        if not any(t.get("key") == RESERVED_TAINT_KEY for t in self.obj["spec"].get("taints") or []):
            self.signal_taint(run_uid)
        return self

    def reservation_label(self, run_uid: str, detail: Obj | str | None = None) -> Self:
        """The reservation label (and annotation) alone, without Signal's taint: what the Node's
        own kubelet can write."""
        self.label(keys.RESERVED_BY_LABEL, run_uid)
        if detail is not None:
            self.annotation(keys.RESERVATION_ANNOTATION, detail if isinstance(detail, str) else json.dumps(detail))
        return self

    # -- spec ----------------------------------------------------------------------------

    def unschedulable(self, value: bool = True) -> Self:
        self.obj["spec"]["unschedulable"] = value
        return self

    def taint(self, key: str, value: str | None = None, effect: str = "NoSchedule") -> Self:
        taint: Obj = {"key": key, "effect": effect}
        if value is not None:
            taint["value"] = value
        self.obj["spec"].setdefault("taints", []).append(taint)
        return self

    def cordon_taint(self) -> Self:
        return self.taint(UNSCHEDULABLE_TAINT_KEY)

    def signal_taint(self, run_uid: str) -> Self:
        taint = {"key": RESERVED_TAINT_KEY, "effect": "NoSchedule", "value": run_uid}
        if taint in (self.obj["spec"].get("taints") or []):
            return self
        return self.taint(RESERVED_TAINT_KEY, run_uid)

    # -- status --------------------------------------------------------------------------

    def ready(self, ready: bool | str = True) -> Self:
        value = ready if isinstance(ready, str) else ("True" if ready else "False")
        return self.conditions([{"type": "Ready", "status": value}])

    def conditions(self, conditions: list[Obj] | None) -> Self:
        self.obj["status"]["conditions"] = conditions
        return self

    def resource(self, name: str, allocatable: Any, capacity: Any = None) -> Self:
        """Set an allocatable (and capacity, defaulting to the same) quantity."""
        self.obj["status"].setdefault("allocatable", {})[name] = allocatable
        self.obj["status"].setdefault("capacity", {})[name] = allocatable if capacity is None else capacity
        return self

    def gpus(self, count: int) -> Self:
        return self.resource(keys.GPU_RESOURCE, str(count))

    def cpu(self, quantity: str) -> Self:
        return self.resource("cpu", quantity)

    def memory(self, quantity: str) -> Self:
        return self.resource("memory", quantity)

    def candidate(self, profile: str) -> Self:
        """Everything ProfileBuilder's default profile needs: requested, pool=gpu, 8 GPUs."""
        return self.requested(profile).pool("gpu").gpus(8)

    # -- results ---------------------------------------------------------------------------

    def build(self) -> Obj:
        return copy.deepcopy(self.obj)

    def view(self) -> NodeView:
        return node_view(self.build())


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_profile(builder: ProfileBuilder | str = "p") -> CertificationProfile:
    """A parsed profile from a ProfileBuilder (or the default one of that name)."""
    body = (ProfileBuilder(builder) if isinstance(builder, str) else builder).build()
    return CertificationProfile.model_validate(body)
