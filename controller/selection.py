"""Deterministic participant selection. Pure.

Order: eligible Nodes sorted by name, then uid (the list order of the snapshot never
matters). Nodes are taken in that order, skipping any whose failure domain is already full
under the profile's budget, until ``count`` are chosen. Fewer than ``count`` means no Run:
the result says how many were eligible and, bounded, why the others were not."""

from collections import Counter
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from controller.budgets import domain_usage, violations
from controller.eligibility import ineligibility
from controller.nodes import NodeView
from controller.requirements import per_node_requirement
from shared.profile import CertificationProfile

MAX_REASONS = 5


@dataclass(frozen=True)
class Selection:
    nodes: tuple[NodeView, ...]


@dataclass(frozen=True)
class Shortfall:
    requested: int
    eligible: int
    needed: int
    reasons: tuple[str, ...]

    @property
    def message(self) -> str:
        text = f"{self.eligible} of {self.requested} requested Nodes eligible, {self.needed} needed"
        if self.reasons:
            text += "; " + "; ".join(self.reasons)
        return text


def _bounded(examples: Mapping[str, list[str]]) -> tuple[str, ...]:
    reasons = []
    for reason, names in sorted(examples.items(), key=lambda item: (-len(item[1]), item[0])):
        shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
        reasons.append(f"{len(names)} {reason} ({shown})")
    return tuple(reasons[:MAX_REASONS])


def select_participants(
    nodes: Iterable[NodeView],
    profile: CertificationProfile,
    held: Set[str],
    live_group_nodes: Iterable[str] = (),
) -> Selection | Shortfall:
    """Choose exactly ``participants.count`` Nodes, or explain why not."""
    all_nodes = sorted(nodes, key=lambda n: (n.name, n.uid))
    by_name = {n.name: n for n in all_nodes}
    requirement = per_node_requirement(profile.spec.checks)
    eligible: list[NodeView] = []
    examples: dict[str, list[str]] = {}
    requested = 0
    for node in all_nodes:
        reason = ineligibility(node, profile, requirement, held)
        if reason != "not requested":
            requested += 1
        if reason is None:
            eligible.append(node)
        elif reason != "not requested":
            examples.setdefault(reason, []).append(node.name)
    count = profile.spec.participants.count
    budget = profile.spec.failure_domain_budget
    chosen: list[NodeView] = []
    if budget is None:
        chosen = eligible[:count]
    else:
        usage: Counter[str] = domain_usage(live_group_nodes, by_name, budget)
        for node in eligible:
            if len(chosen) == count:
                break
            if violations(usage, [*chosen, node], budget):
                examples.setdefault("over the failure-domain budget", []).append(node.name)
                continue
            chosen.append(node)
    if len(chosen) < count:
        return Shortfall(requested, len(eligible), count, _bounded(examples))
    return Selection(tuple(chosen))
