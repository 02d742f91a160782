"""Failure-domain budgets counted over whole groups. Pure.

Every live group (all Runs holding reservations, whatever their profile) counts each of its
Nodes in the domain named by the Node's ``topology_key`` label. A new group fits when, for
every domain, the Nodes already under test plus the new group's stay within
``max_nodes_under_test``."""

from collections import Counter
from collections.abc import Iterable, Mapping

from controller.rules.nodes import NodeView
from shared.profile import FailureDomainBudget


def domain_usage(
    group_nodes: Iterable[str], nodes: Mapping[str, NodeView], budget: FailureDomainBudget
) -> Counter[str]:
    """Nodes under test per domain value; Nodes no longer known count nowhere."""
    usage: Counter[str] = Counter()
    for name in group_nodes:
        node = nodes.get(name)
        if node is not None and node.labels.get(budget.topology_key):
            usage[node.labels[budget.topology_key]] += 1
    return usage


def violations(usage: Mapping[str, int], new_group: Iterable[NodeView], budget: FailureDomainBudget) -> list[str]:
    """Domains of the new group that it would push over the budget (empty when it fits).
    A domain the new group does not touch never blocks it, even if already over budget
    (e.g. after the budget was lowered)."""
    added: Counter[str] = Counter(node.labels.get(budget.topology_key, "") for node in new_group)
    return [
        f"{budget.topology_key}={domain or '<none>'}: {usage.get(domain, 0) + count}>{budget.max_nodes_under_test}"
        for domain, count in sorted(added.items())
        if not domain or usage.get(domain, 0) + count > budget.max_nodes_under_test
    ]
