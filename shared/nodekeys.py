"""Every key Signal writes on Nodes, in one inventory (issue 43, item 6): what
``signalctl uninstall --clean-nodes`` removes, what docs/reference.md ("Keys on Nodes") lists,
and what tests/unit/test_node_keys.py holds against the code that writes Nodes (so that a new
key cannot be forgotten). Pure; no I/O.

A key is ``exact`` or a ``prefix`` (one key per profile). ``held`` keys belong to a Node that
a Run holds (reserved, or held after a Fail): the clean-up leaves them unless told to release
(``--release-held``); a held Node's other keys are removed all the same. The do-not-disrupt
annotations are removed only where Signal's reservation added them (its detail says which).
"""

from dataclasses import dataclass

from shared import certified, keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, Literal

    Where = Literal["label", "annotation", "taint", "condition"]


@dataclass(frozen=True, slots=True)
class NodeKey:
    where: "Where"
    key: str
    prefix: bool
    held: bool
    what: str

    def matches(self, key: str) -> bool:
        return key.startswith(self.key) if self.prefix else key == self.key


NODE_KEYS: "Final" = (
    NodeKey(
        "label", keys.CERTIFY_LABEL, False, False, "a certification request (the operator's, or given back by Signal)"
    ),
    NodeKey("label", keys.LEGACY_CERTIFY_LABEL, False, False, "the request label of earlier versions (legacy)"),
    NodeKey("label", keys.TRUSTED_NODE_LABEL, False, False, "the admin's mark of a Node trusted to run adapter steps"),
    NodeKey("label", keys.CERTIFIED_LABEL_PREFIX, True, False, "a profile's result (Pass, Fail, Inconclusive, Stale)"),
    NodeKey(
        "label",
        certified.TRUSTED_LABEL_PREFIX + "signal-",
        True,
        False,
        "a profile's result under the prefix kubelets cannot write",
    ),
    NodeKey("annotation", keys.CERTIFIED_LABEL_PREFIX, True, False, "a profile's result in detail (Run, evidence)"),
    NodeKey("annotation", keys.ATTEMPT_ANNOTATION, False, False, "the next attempt of a retried request"),
    NodeKey("condition", keys.CERTIFIED_LABEL_PREFIX, True, False, "a profile's result as a Node condition"),
    NodeKey(
        "condition",
        keys.FAILED_CONDITION_PREFIX,
        True,
        False,
        "True while a profile's latest result on the Node is Fail (what a remediator watches)",
    ),
    NodeKey("label", keys.RESERVED_BY_LABEL, False, True, "the reserving Run's uid"),
    NodeKey("annotation", keys.RESERVATION_ANNOTATION, False, True, "the reservation's detail"),
    NodeKey("taint", keys.RESERVED_TAINT_KEY, False, True, "Signal's cordon (NoSchedule, the Run's uid)"),
    NodeKey(
        "annotation",
        keys.AUTOSCALER_SCALE_DOWN_DISABLED,
        False,
        True,
        "autoscalers leave a held Node alone (only where the reservation added it)",
    ),
    NodeKey(
        "annotation",
        keys.KARPENTER_DO_NOT_DISRUPT,
        False,
        True,
        "Karpenter leaves a held Node alone (only where the reservation added it)",
    ),
)
GUARDED: "Final" = frozenset(keys.DO_NOT_DISRUPT_ANNOTATIONS)
"""Keys that are not Signal's alone: removed only where the reservation's detail lists them."""


def node_key(where: "Where", key: str) -> NodeKey | None:
    """The inventory's entry for ``key`` written at ``where`` (None: not Signal's)."""
    return next((k for k in NODE_KEYS if k.where == where and k.matches(key)), None)
