"""controller/profiles.py ``left_after_admission``: the profile status written once a group is
admitted is that of the Nodes still requested (the admitted Nodes and their ledger group
counted as taken), or None when another group can be admitted. Pure."""

from controller.ledger import Ledger
from controller.nodes import NodeView
from controller.profiles import left_after_admission
from controller.selection import Selection, Shortfall, select_participants
from shared.profile import CertificationProfile
from tests.builders import ProfileBuilder
from tests.unit.node_builders import make_node, make_profile

PROFILE = "p"
RUN = {"metadata": {"name": "p-run-1"}}


def profile(count: int, max_per_zone: int | None = None) -> CertificationProfile:
    builder = ProfileBuilder(PROFILE).count(count)
    if max_per_zone is not None:
        builder.spec(failureDomainBudget={"topologyKey": "zone", "maxNodesUnderTest": max_per_zone})
    return make_profile(builder)


def fleet(*names: str) -> list[NodeView]:
    # The zone is the name's first letter; the cache still shows every Node requested.
    return [make_node(n).candidate(PROFILE).label("zone", n[0]).view() for n in names]


def admitted(nodes: list[NodeView], wanted: CertificationProfile) -> Selection:
    result = select_participants(nodes, wanted, frozenset())
    assert isinstance(result, Selection), result
    return result


def test_nothing_left_is_a_shortfall_of_no_requested_node() -> None:
    nodes, wanted = fleet("a1", "b1"), profile(2)
    left = left_after_admission(nodes, wanted, Ledger(), RUN, admitted(nodes, wanted))
    assert isinstance(left, Shortfall)
    assert (left.requested, left.eligible, left.needed) == (0, 0, 2)


def test_the_remainder_is_counted_without_the_admitted_nodes() -> None:
    nodes, wanted = fleet("a1", "b1", "c1"), profile(2)
    left = left_after_admission(nodes, wanted, Ledger(), RUN, admitted(nodes, wanted))
    assert isinstance(left, Shortfall)
    assert (left.requested, left.eligible, left.needed) == (1, 1, 2)


def test_enough_left_for_another_group_is_none() -> None:
    nodes, wanted = fleet("a1", "b1", "c1", "d1"), profile(2)
    assert left_after_admission(nodes, wanted, Ledger(), RUN, admitted(nodes, wanted)) is None


def test_the_admitted_group_counts_against_the_budget() -> None:
    # a1 and b1 are admitted; with at most one Node per zone under test, a2 and b2 cannot go.
    nodes, wanted = fleet("a1", "a2", "b1", "b2"), profile(2, max_per_zone=1)
    group = admitted(nodes, wanted)
    assert [n.name for n in group.nodes] == ["a1", "b1"]
    left = left_after_admission(nodes, wanted, Ledger(), RUN, group)
    assert isinstance(left, Shortfall)
    assert (left.requested, left.eligible, left.needed) == (2, 2, 2)  # eligible, but over the budget
    assert "budget" in left.message
