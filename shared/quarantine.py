"""Signal in a remediation loop (issue 43, items 1 and 3): the profile's quarantine adoption and
its Fail taint, as API models, and the pure rules over a Node's taints that the controller and
the adapter share. Pure; no I/O.

* ``adoptQuarantine``: a health system (or a person) quarantined the Node with a cordon and/or
  taints of its own. A profile naming them *adopts* that quarantine: the Node is eligible while
  it carries it, the quarantine stays for the whole Run (nothing else schedules there at any
  moment; the Run's backend workloads tolerate exactly it), and Signal lifts it only when it
  releases the Node after a Pass (a Succeeded Run). What a Run adopted on each Node is recorded
  in its ``spec.participants[].adopted``, written once by the controller at admission (never on
  a Node, whose kubelet can write its own annotations), and only that is ever lifted.
* ``onFail``: a taint Signal adds to a Node whose verdict is Fail (a remediator's signal, with
  the Node condition ``failed.projectsignal.dev/<profile>``). The same profile adopts it when it
  certifies the Node again, and lifts it with the rest after a Pass.
"""

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from shared import keys
from shared.meta import WireModel

MAX_ADOPTED_TAINTS = 8
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
"""The taint the node lifecycle controller mirrors a cordon (``spec.unschedulable``) with."""
# Never adoptable, never a Fail taint: Signal's own keys (its cordon is the Run's; a Fail taint
# is adopted implicitly by its own profile) and the Node lifecycle taints (not-ready,
# unreachable, pressure...), which say something only the Node's state may lift.
FORBIDDEN_ADOPT_PREFIXES = (f"{keys.GROUP}/", "node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
FORBIDDEN_FAIL_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
_TAINT_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_TAINT_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"


def _key_rule(prefixes: tuple[str, ...], message: str, *, never: str = "") -> dict[str, Any]:
    rule = " && ".join([f"!self.startsWith('{p}')" for p in prefixes] + ([f"self != '{never}'"] if never else []))
    return {"x-kubernetes-validations": [{"rule": rule, "message": message}]}


_ADOPT_MESSAGE = (
    "an adopted taint is another system's: never Signal's own (projectsignal.dev/) nor a Node lifecycle "
    "taint (node.kubernetes.io/, node.cloudprovider.kubernetes.io/); adopt a cordon with cordon: true"
)
_FAIL_MESSAGE = (
    "a Fail taint may be neither a Node lifecycle taint (node.kubernetes.io/, node.cloudprovider.kubernetes.io/) "
    "nor Signal's reservation taint"
)


class AdoptedTaintRule(WireModel):
    """One foreign quarantine taint a profile adopts: any value of ``key`` with ``effect``."""

    key: Annotated[
        str,
        Field(
            min_length=1,
            max_length=317,
            pattern=_TAINT_KEY_PATTERN,
            json_schema_extra=_key_rule(FORBIDDEN_ADOPT_PREFIXES, _ADOPT_MESSAGE),
        ),
    ]
    """Taint key the health system quarantines with, e.g. ``example.com/quarantine``."""
    effect: TaintEffect
    """The taint's effect; a taint of the same key with another effect is not adopted."""

    @model_validator(mode="after")
    def _foreign(self) -> "AdoptedTaintRule":
        if self.key.startswith(FORBIDDEN_ADOPT_PREFIXES):
            raise ValueError(f"adoptQuarantine taint {self.key!r}: {_ADOPT_MESSAGE}")
        return self


class AdoptQuarantine(WireModel):
    """Which quarantine on a requested Node this profile adopts (issue 43, item 1)."""

    cordon: bool = False
    """Adopt a cordon (``spec.unschedulable``): the Node is eligible while cordoned, stays
    cordoned through the Run and is uncordoned when released after a Pass."""
    taints: Annotated[
        list[AdoptedTaintRule],
        Field(
            max_length=MAX_ADOPTED_TAINTS,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key", "effect"]},
        ),
    ] = Field(default_factory=list)
    """Foreign quarantine taints adopted (at most 8), each by key and effect."""


class FailTaint(WireModel):
    """The taint Signal adds to a Node whose verdict is Fail."""

    key: Annotated[
        str,
        Field(
            min_length=1,
            max_length=317,
            pattern=_TAINT_KEY_PATTERN,
            json_schema_extra=_key_rule(FORBIDDEN_FAIL_PREFIXES, _FAIL_MESSAGE, never=keys.RESERVED_TAINT_KEY),
        ),
    ]
    """E.g. ``projectsignal.dev/failed``; never Signal's reservation taint."""
    value: Annotated[str, Field(max_length=63, pattern=_TAINT_VALUE_PATTERN)] = ""
    effect: TaintEffect = "NoSchedule"

    @model_validator(mode="after")
    def _allowed(self) -> "FailTaint":
        if self.key.startswith(FORBIDDEN_FAIL_PREFIXES) or self.key == keys.RESERVED_TAINT_KEY:
            raise ValueError(f"onFail taint {self.key!r}: {_FAIL_MESSAGE}")
        return self


class OnFail(WireModel):
    """What a Fail leaves on the Node for a remediator besides its Node condition."""

    taint: FailTaint | None = None
    """Optional taint added on Fail (e.g. ``projectsignal.dev/failed:NoSchedule``)."""


class AdoptedTaint(WireModel):
    """One taint exactly as the Node carried it when a Run adopted it."""

    key: Annotated[str, Field(min_length=1, max_length=317)]
    value: Annotated[str, Field(max_length=63)] = ""
    effect: TaintEffect


class Adopted(WireModel):
    """What a Run adopted on one participant at admission: what a release after a Pass lifts."""

    cordon: bool = False
    taints: Annotated[list[AdoptedTaint], Field(max_length=MAX_ADOPTED_TAINTS + 1)] = Field(default_factory=list)


# -- pure rules over raw data (the controller's NodeView taints, the Run's raw spec) --

Taint = tuple[str, str, str]
"""(key, value, effect)."""


def _rules(spec: Mapping[str, Any]) -> tuple[bool, list[tuple[str, str]], Taint | None]:
    """(adopts the cordon, adopted (key, effect) pairs, the Fail taint) of a raw profile or Run
    spec (camelCase); anything malformed adopts nothing."""
    adopt = spec.get("adoptQuarantine")
    adopt = adopt if isinstance(adopt, Mapping) else {}
    rules = [
        (str(t.get("key")), str(t.get("effect")))
        for t in adopt.get("taints") or []
        if isinstance(t, Mapping) and not str(t.get("key", "")).startswith(FORBIDDEN_ADOPT_PREFIXES)
    ]
    on_fail = spec.get("onFail")
    taint = on_fail.get("taint") if isinstance(on_fail, Mapping) else None
    fail = (
        (str(taint.get("key")), str(taint.get("value") or ""), str(taint.get("effect") or "NoSchedule"))
        if isinstance(taint, Mapping) and taint.get("key")
        else None
    )
    return adopt.get("cordon") is True, rules, fail


def adopts_cordon(spec: Mapping[str, Any]) -> bool:
    return _rules(spec)[0]


def fail_taint(spec: Mapping[str, Any]) -> Taint | None:
    """The (key, value, effect) a Fail adds, or None."""
    return _rules(spec)[2]


def adopts(spec: Mapping[str, Any], taint: Taint) -> bool:
    """Whether a profile (or Run) ``spec`` adopts the Node taint ``taint``: a rule of its key and
    effect, or its own Fail taint (key and effect; any value)."""
    _, rules, fail = _rules(spec)
    key, _, effect = taint
    return (key, effect) in rules or (fail is not None and (fail[0], fail[2]) == (key, effect))


def adopted_on(spec: Mapping[str, Any], taints: Iterable[Taint], cordoned: bool) -> dict[str, Any]:
    """The ``adopted`` record of one participant: the cordon (when adopted and present) and each
    of the Node's taints the spec adopts, exactly as carried; {} when nothing is adopted."""
    found = sorted({t for t in taints if adopts(spec, t)})
    record: dict[str, Any] = {}
    if cordoned and adopts_cordon(spec):
        record["cordon"] = True
    if found:
        record["taints"] = [{"key": k, "value": v, "effect": e} if v else {"key": k, "effect": e} for k, v, e in found]
    return record


def recorded(participant: Mapping[str, Any]) -> tuple[bool, list[Taint]]:
    """(cordon, taints) a raw participant's ``adopted`` record holds; malformed: nothing."""
    adopted = participant.get("adopted")
    if not isinstance(adopted, Mapping):
        return False, []
    taints = [
        (str(t.get("key")), str(t.get("value") or ""), str(t.get("effect")))
        for t in adopted.get("taints") or []
        if isinstance(t, Mapping) and t.get("key") and t.get("effect")
    ]
    return adopted.get("cordon") is True, taints


def tolerations(spec: Mapping[str, Any]) -> list[dict[str, str]]:
    """The tolerations a Run's backend workloads add for the quarantine it adopted (its Pods
    are pinned to its participants, so these matter only there): each adopted key and effect
    (any value), the Fail taint, and the cordon's taint when the cordon is adopted."""
    cordon, rules, fail = _rules(spec)
    pairs = (
        set(rules)
        | ({(fail[0], fail[2])} if fail else set())
        | ({(UNSCHEDULABLE_TAINT_KEY, "NoSchedule")} if cordon else set())
    )
    return [{"key": k, "operator": "Exists", "effect": e} for k, e in sorted(pairs)]
