"""controller/rules/budgets.py: failure-domain usage counted over whole live groups, and the
domains a new group would push over the budget."""

from collections import Counter

import pytest

from controller.rules.budgets import domain_usage, violations
from controller.rules.nodes import NodeView
from shared.profile import FailureDomainBudget
from tests.unit.node_builders import make_node

BUDGET = FailureDomainBudget.model_validate({"topologyKey": "zone", "maxNodesUnderTest": 2})


def _nodes(**zones: str | None) -> dict[str, NodeView]:
    """Views by name; ``None`` means no topology label."""
    views = {}
    for name, zone in zones.items():
        builder = make_node(name)
        if zone is not None:
            builder.label("zone", zone)
        views[name] = builder.view()
    return views


FLEET = _nodes(a1="a", a2="a", a3="a", b1="b", b2="b", c1="c", bare=None, empty="")


@pytest.mark.parametrize(
    ("group_nodes", "usage"),
    [
        pytest.param([], {}, id="no live groups: nothing under test"),
        pytest.param(["a1", "a2", "b1"], {"a": 2, "b": 1}, id="counted per domain"),
        pytest.param(["a1", "ghost", "b1"], {"a": 1, "b": 1}, id="a Node no longer known counts nowhere"),
        pytest.param(["bare", "empty", "c1"], {"c": 1}, id="a Node without (or with empty) label counts nowhere"),
        pytest.param(["a1", "a1"], {"a": 2}, id="a name listed by two groups counts twice (whole groups are counted)"),
    ],
)
def test_domain_usage(group_nodes: list[str], usage: dict[str, int]) -> None:
    assert domain_usage(group_nodes, FLEET, BUDGET) == Counter(usage)


def test_domain_usage_uses_the_budget_topology_key() -> None:
    nodes = {"r1": make_node("r1").label("rack", "r-7").label("zone", "a").view()}
    rack = FailureDomainBudget.model_validate({"topologyKey": "rack", "maxNodesUnderTest": 1})
    assert domain_usage(["r1"], nodes, rack) == Counter({"r-7": 1})


@pytest.mark.parametrize(
    ("usage", "new_group", "expected"),
    [
        pytest.param({}, [], [], id="nothing at all fits"),
        pytest.param({}, ["a1", "a2"], [], id="exactly the budget in one domain fits"),
        pytest.param({}, ["a1", "a2", "a3"], ["zone=a: 3>2"], id="new group alone over the budget"),
        pytest.param({"a": 1}, ["a1"], [], id="live plus new at the budget fits"),
        pytest.param({"a": 2}, ["a1"], ["zone=a: 3>2"], id="live group fills the domain"),
        pytest.param({"a": 2}, ["b1", "b2", "c1"], [], id="a full domain the new group avoids is fine"),
        pytest.param(
            {"a": 2, "b": 2},
            ["a1", "b1"],
            ["zone=a: 3>2", "zone=b: 3>2"],
            id="every violating domain listed, sorted",
        ),
        pytest.param({}, ["bare"], ["zone=<none>: 1>2"], id="a Node without the label always violates"),
        pytest.param(
            {"b": 5},
            ["a1"],
            [],
            id="a domain already over the budget does not block a group that adds nothing there",
        ),
    ],
)
def test_violations(usage: dict[str, int], new_group: list[str], expected: list[str]) -> None:
    assert violations(Counter(usage), [FLEET[n] for n in new_group], BUDGET) == expected


def test_violations_does_not_mutate_usage() -> None:
    usage = Counter({"a": 1})
    violations(usage, [FLEET["a1"], FLEET["a2"]], BUDGET)
    assert usage == Counter({"a": 1})
