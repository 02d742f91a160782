"""Whether one Node may join a group for a profile, and if not, why. Pure.

A candidate is requested for this profile (``node-restriction.kubernetes.io/signal.certify=<profile>``), matches
the profile's selector, is Ready, is reserved by no Run (by label, or by a live group in the
admission ledger), is not cordoned by someone else (unless the profile adopts the cordon:
``adoptQuarantine.cordon``), carries the budget's topology label when
the profile has a budget, carries no NoSchedule or NoExecute taint that a check of the
profile does not tolerate (Signal's own cordon aside; a check tolerates what its
``workload.tolerations`` list; a quarantine taint the profile adopts, ``adoptQuarantine.taints``
or its own ``onFail`` taint, is tolerated by the Run's workloads: shared/quarantine.py), and has
allocatable resources covering the per-Node
requirement."""

from collections.abc import Mapping, Sequence, Set

from controller.rules.nodes import NodeView
from controller.rules.requirements import shortfalls
from controller.rules.selectors import matches
from shared import keys
from shared.profile import CertificationProfile
from shared.workload import Toleration

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates(tolerations: Sequence[Toleration], key: str, value: str, effect: str) -> bool:
    """Whether ``tolerations`` tolerate the taint ``key=value:effect`` (Kubernetes' rule,
    restricted to the forms a profile may write: a named key and one effect)."""
    return any(
        t.key == key and t.effect == effect and (t.operator == "Exists" or t.value == value) for t in tolerations
    )


def adopted(profile: CertificationProfile, key: str, effect: str) -> bool:
    """Whether the profile adopts the quarantine taint ``key:effect`` (an ``adoptQuarantine``
    rule, or its own ``onFail`` taint, which it certifies the Node through again)."""
    adopt, on_fail = profile.spec.adopt_quarantine, profile.spec.on_fail
    if adopt is not None and any(r.key == key and r.effect == effect for r in adopt.taints):
        return True
    fail = on_fail.taint if on_fail is not None else None
    return fail is not None and fail.key == key and fail.effect == effect


def adopts_cordon(profile: CertificationProfile) -> bool:
    return profile.spec.adopt_quarantine is not None and profile.spec.adopt_quarantine.cordon


def untolerated_taint(node: NodeView, profile: CertificationProfile) -> str | None:
    """The first of the Node's blocking taints that some check does not tolerate, as
    ``"<taint> (check <name>)"``; None when every check tolerates them all."""
    for key, value, effect in sorted(node.taints):
        if effect not in BLOCKING_EFFECTS or adopted(profile, key, effect):
            continue
        for check in profile.spec.checks:
            if not tolerates(check.workload.tolerations, key, value, effect):
                taint = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
                return f"{taint} (check {check.name})"
    return None


def ineligibility(
    node: NodeView,
    profile: CertificationProfile,
    requirement: Mapping[str, int],
    held: Set[str],
) -> str | None:
    """None when ``node`` is eligible; otherwise a short reason."""
    if node.labels.get(keys.CERTIFY_LABEL) != profile.metadata.name:
        return "not requested"
    if not matches(profile.spec.participants.selector, node.labels):
        return "selector does not match"
    if not node.ready:
        return "not Ready"
    if node.reservation is not None:
        return f"reserved by Run {node.reservation.run_name or node.reservation.run_uid}"
    if node.name in held or node.signal_tainted:
        return "held by an admission in progress"
    if node.unschedulable and not adopts_cordon(profile):
        return "cordoned by someone else"
    budget = profile.spec.failure_domain_budget
    if budget is not None and not node.labels.get(budget.topology_key):
        return f"no {budget.topology_key} label for the failure-domain budget"
    taint = untolerated_taint(node, profile)
    if taint is not None:
        return f"taint not tolerated: {taint}; add it to the check's workload.tolerations if the suite may run there"
    missing = shortfalls(requirement, node.allocatable)
    if missing:
        return "insufficient allocatable: " + ", ".join(missing)
    return None
