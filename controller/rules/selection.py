"""Deterministic participant selection. Pure.

Order: eligible Nodes sorted by name, then uid (the list order of the snapshot never
matters). Nodes are taken in that order, skipping any whose failure domain is already full
under the profile's budget, until ``count`` are chosen. Fewer than ``count`` means no Run:
the result says how many were eligible and, bounded, why the others were not."""

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass

from controller.rules.budgets import domain_usage, violations
from controller.rules.eligibility import ineligibility
from controller.rules.nodes import NodeView
from controller.rules.requirements import per_node_requirement
from shared import keys
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


def _requested(nodes: Iterable[NodeView], profile_name: str) -> tuple[list[NodeView], list[NodeView]]:
    """The Nodes requested for ``profile_name``: those reserved by no Run, and those reserved
    (never eligible, so never chosen: only a shortfall looks at them, for its counts)."""
    label = keys.CERTIFY_LABEL
    free: list[NodeView] = []
    reserved: list[NodeView] = []
    for n in nodes:
        if n.labels.get(label) == profile_name:
            (free if n.reservation is None else reserved).append(n)
    return free, reserved


def _free(in_order: Iterable[NodeView], reserved: list[NodeView]) -> Iterator[NodeView]:
    """The Nodes of ``in_order`` that no Run reserves, lazily; the others go to ``reserved``."""
    for node in in_order:
        if node.reservation is None:
            yield node
        else:
            reserved.append(node)


def _in_order(wanted: list[NodeView]) -> Iterator[NodeView]:
    """``wanted`` lazily, by name then uid. A heap over the names costs O(n) to build and
    O(log n) per Node taken, so choosing a few Nodes out of a large requested fleet never sorts
    all of it."""
    by_name = {n.name: n for n in wanted}
    if len(by_name) < len(wanted):  # the same name twice (a replaced Node): by uid within a name
        yield from sorted(wanted, key=lambda n: (n.name, n.uid))
        return
    names = list(by_name)
    heapq.heapify(names)
    while names:
        yield by_name[heapq.heappop(names)]


def select_participants(
    nodes: Iterable[NodeView],
    profile: CertificationProfile,
    held: Set[str],
    live_group_nodes: Iterable[str] = (),
    *,
    in_order: Iterable[NodeView] | None = None,
) -> Selection | Shortfall:
    """Choose exactly ``participants.count`` Nodes, or explain why not.

    Only Nodes requested for the profile and reserved by no Run are looked at, in order, until
    ``count`` are chosen; only a shortfall looks at every one (for its counts and reasons).
    ``in_order``, when given, is exactly the Nodes requested for the profile, already by name
    then uid (controller/rules/requested.py keeps them so): they are taken as they come, and ``nodes``
    serves only to find the live groups' Nodes for the budget."""
    requirement = per_node_requirement(profile.spec.checks)
    count = profile.spec.participants.count
    budget = profile.spec.failure_domain_budget
    usage: Counter[str] = Counter()
    added: Counter[str] = Counter()
    if budget is not None:
        group_nodes = list(live_group_nodes)
        wanted = set(group_nodes)
        if group_nodes:
            nodes = list(nodes)
            known: dict[str, NodeView] = {}
            for n in nodes:  # a name seen twice (a replaced Node): the one last by uid, as sorted
                if n.name in wanted and (n.name not in known or n.uid > known[n.name].uid):
                    known[n.name] = n
            usage = domain_usage(group_nodes, known, budget)
    examples: dict[str, list[str]] = {}
    chosen: list[NodeView] = []
    requested = eligible = 0
    reserved: list[NodeView] = []
    if in_order is None:
        free, reserved = _requested(nodes, profile.metadata.name)
        taken: Iterable[NodeView] = _in_order(free)
    else:
        taken = _free(in_order, reserved)
    for node in taken:
        requested += 1
        reason = ineligibility(node, profile, requirement, held)
        if reason is not None:
            examples.setdefault(reason, []).append(node.name)
            continue
        eligible += 1
        if budget is not None:
            # What violations(usage, [*chosen, node], budget) says, counted incrementally:
            # the chosen Nodes already fit, so only this Node's domain can go over.
            domain = node.labels.get(budget.topology_key, "")
            if (
                violations(usage, [node], budget)
                or usage.get(domain, 0) + added[domain] + 1 > budget.max_nodes_under_test
            ):
                examples.setdefault("over the failure-domain budget", []).append(node.name)
                continue
            added[domain] += 1
        chosen.append(node)
        if len(chosen) == count:
            return Selection(tuple(chosen))
    for node in reserved:
        requested += 1
        reason = ineligibility(node, profile, requirement, held)
        examples.setdefault(reason or "reserved", []).append(node.name)
    return Shortfall(requested, eligible, count, _bounded(examples))
