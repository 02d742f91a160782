"""controller/rules/selection.py: deterministic selection of exactly ``count`` Nodes, the
failure-domain budget over whole live groups, and the bounded Shortfall explanation."""

import random
from collections import Counter

import pytest

from controller.rules.budgets import domain_usage, violations
from controller.rules.eligibility import ineligibility
from controller.rules.nodes import NodeView
from controller.rules.requested import RequestIndex
from controller.rules.requirements import per_node_requirement
from controller.rules.selection import MAX_REASONS, Selection, Shortfall, select_participants
from shared.profile import CertificationProfile
from tests.builders import ProfileBuilder
from tests.unit.node_builders import NodeBuilder, make_node, make_profile

PROFILE = "p"


def candidate(name: str, zone: str | None = None) -> NodeBuilder:
    node = make_node(name).candidate(PROFILE)
    return node.label("zone", zone) if zone is not None else node


def profile(count: int, max_per_zone: int | None = None) -> CertificationProfile:
    builder = ProfileBuilder(PROFILE).count(count)
    if max_per_zone is not None:
        builder.spec(failureDomainBudget={"topologyKey": "zone", "maxNodesUnderTest": max_per_zone})
    return make_profile(builder)


def names(result: Selection | Shortfall) -> list[str]:
    assert isinstance(result, Selection), result
    return [n.name for n in result.nodes]


def shortfall(result: Selection | Shortfall) -> Shortfall:
    assert isinstance(result, Shortfall), result
    return result


# -- determinism --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed {s}") for s in (0, 1, 20240607)])
def test_same_group_whatever_the_snapshot_order(seed: int) -> None:
    # Ten requested Nodes: eight eligible whose creation order is not their name order, and
    # two that are ineligible (they must not shift the group).
    fleet = [candidate(f"gpu-{i}").uid(f"uid-{(7 * i) % 10}").view() for i in (3, 10, 1, 7, 2, 9, 4, 8)]
    fleet.append(make_node("gpu-0").candidate(PROFILE).ready(False).view())
    fleet.append(make_node("gpu-00").candidate(PROFILE).unschedulable().view())
    assert len(fleet) == 10
    prof = profile(4)
    rng = random.Random(seed)
    groups = set()
    for _ in range(100):
        rng.shuffle(fleet)
        result = select_participants(fleet, prof, frozenset())
        assert isinstance(result, Selection)
        groups.add(tuple((n.name, n.uid) for n in result.nodes))
    assert groups == {(("gpu-1", "uid-7"), ("gpu-10", "uid-0"), ("gpu-2", "uid-4"), ("gpu-3", "uid-1"))}


def test_order_is_by_name_then_uid() -> None:
    # Names are unique in a cluster; the uid only breaks a tie in a (replaced-Node) snapshot.
    fleet = [candidate("b").uid("u-1").view(), candidate("a").uid("u-9").view(), candidate("a").uid("u-2").view()]
    for ordering in (fleet, fleet[::-1], [fleet[1], fleet[2], fleet[0]]):
        result = select_participants(ordering, profile(3), frozenset())
        assert isinstance(result, Selection)
        assert [(n.name, n.uid) for n in result.nodes] == [("a", "u-2"), ("a", "u-9"), ("b", "u-1")]


def test_accepts_any_iterable_once() -> None:
    fleet = [candidate(f"n{i}").view() for i in range(3)]
    assert names(select_participants(iter(fleet), profile(2), frozenset())) == ["n0", "n1"]


# -- exact count --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("available", "count", "expected"),
    [
        pytest.param(1, 1, ["n00"], id="one of one"),
        pytest.param(5, 1, ["n00"], id="one of five: the first by name"),
        pytest.param(5, 5, ["n00", "n01", "n02", "n03", "n04"], id="all five of five"),
        pytest.param(12, 3, ["n00", "n01", "n02"], id="three of twelve"),
    ],
)
def test_exact_count(available: int, count: int, expected: list[str]) -> None:
    fleet = [candidate(f"n{i:02d}").view() for i in range(available)]
    result = select_participants(fleet, profile(count), frozenset())
    assert names(result) == expected
    assert len(expected) == count


def test_ineligible_nodes_are_never_selected() -> None:
    fleet = [
        candidate("a-not-ready").ready(False).view(),
        candidate("b-held").view(),
        candidate("c-reserved").reserved_by("ru-x").view(),
        candidate("d-cordoned").cordon_taint().view(),
        candidate("e-small").gpus(1).view(),
        make_node("f-other-profile").candidate("q").view(),
        candidate("g-ok").view(),
        candidate("h-ok").view(),
    ]
    assert names(select_participants(fleet, profile(2), frozenset({"b-held"}))) == ["g-ok", "h-ok"]


def test_selection_returns_the_views_themselves() -> None:
    fleet = [candidate("n1").view(), candidate("n2").view()]
    result = select_participants(fleet, profile(2), frozenset())
    assert isinstance(result, Selection)
    assert result.nodes == (fleet[0], fleet[1])


# -- Shortfall ----------------------------------------------------------------------------


def test_shortfall_counts_requested_eligible_and_needed() -> None:
    fleet = [
        candidate("ok-1").view(),
        candidate("ok-2").view(),
        candidate("down").ready(False).view(),
        make_node("unrequested").pool("gpu").gpus(8).view(),
        make_node("other-profile").candidate("q").view(),
    ]
    result = shortfall(select_participants(fleet, profile(3), frozenset()))
    assert (result.requested, result.eligible, result.needed) == (3, 2, 3)
    assert result.reasons == ("1 not Ready (down)",)
    assert result.message == "2 of 3 requested Nodes eligible, 3 needed; 1 not Ready (down)"


def test_shortfall_without_any_requested_node() -> None:
    fleet = [make_node("n1").pool("gpu").gpus(8).view()]
    result = shortfall(select_participants(fleet, profile(1), frozenset()))
    assert result == Shortfall(requested=0, eligible=0, needed=1, reasons=())
    assert result.message == "0 of 0 requested Nodes eligible, 1 needed"


def test_shortfall_of_an_empty_fleet() -> None:
    result = shortfall(select_participants([], profile(2), frozenset()))
    assert result.message == "0 of 0 requested Nodes eligible, 2 needed"


@pytest.mark.parametrize(
    ("down", "expected"),
    [
        pytest.param(1, "1 not Ready (d0)", id="one example"),
        pytest.param(3, "3 not Ready (d0, d1, d2)", id="three examples: no ellipsis"),
        pytest.param(4, "4 not Ready (d0, d1, d2, ...)", id="four: three examples and an ellipsis"),
        pytest.param(25, "25 not Ready (d0, d1, d10, ...)", id="many: the first three by name"),
    ],
)
def test_reason_examples_are_bounded(down: int, expected: str) -> None:
    fleet = [candidate(f"d{i}").ready(False).view() for i in range(down)]
    random.Random(down).shuffle(fleet)
    result = shortfall(select_participants(fleet, profile(1), frozenset()))
    assert result.reasons == (expected,)


def test_reasons_are_ordered_by_frequency_then_text_and_bounded_to_five() -> None:
    fleet = [
        *(make_node(f"sel-{i}").requested(PROFILE).gpus(8).view() for i in range(2)),  # selector
        *(candidate(f"down-{i}").ready(False).view() for i in range(6)),
        candidate("res-x").reserved_by("ru-x", {"run": "run-x"}).view(),
        candidate("res-y").reserved_by("ru-y", {"run": "run-y"}).view(),
        *(candidate(f"held-{i}").view() for i in range(4)),
        *(candidate(f"cord-{i}").unschedulable().view() for i in range(2)),
        candidate("small").gpus(2).view(),
        candidate("fine").view(),
    ]
    held = frozenset(f"held-{i}" for i in range(4))
    result = shortfall(select_participants(fleet, profile(2), held))
    assert (result.requested, result.eligible, result.needed) == (18, 1, 2)
    assert len(result.reasons) == MAX_REASONS == 5
    assert result.reasons == (
        "6 not Ready (down-0, down-1, down-2, ...)",
        "4 held by an admission in progress (held-0, held-1, held-2, ...)",
        "2 cordoned by someone else (cord-0, cord-1)",
        "2 selector does not match (sel-0, sel-1)",
        "1 insufficient allocatable: nvidia.com/gpu 2<8 (small)",
    )
    assert "reserved by Run" not in result.message
    assert result.message.startswith("1 of 18 requested Nodes eligible, 2 needed; 6 not Ready (")


def test_not_requested_is_never_a_reason() -> None:
    fleet = [make_node(f"other-{i}").view() for i in range(10)] + [candidate("down").ready(False).view()]
    result = shortfall(select_participants(fleet, profile(1), frozenset()))
    assert result.requested == 1
    assert result.reasons == ("1 not Ready (down)",)


# -- failure-domain budget ------------------------------------------------------------------


def test_budget_limits_the_new_group_itself() -> None:
    fleet = [candidate(n, n[0]).view() for n in ("a1", "a2", "a3", "b1", "b2")]
    assert names(select_participants(fleet, profile(4, max_per_zone=2), frozenset())) == ["a1", "a2", "b1", "b2"]


def test_nodes_of_a_full_zone_are_skipped_counting_whole_live_groups() -> None:
    live = [candidate(n, "a").reserved_by("ru-live").view() for n in ("live-a1", "live-a2")]
    fleet = [*live, *(candidate(n, n[0]).view() for n in ("a1", "a2", "b1", "b2", "c1"))]
    result = select_participants(
        fleet,
        profile(3, max_per_zone=2),
        frozenset({"live-a1", "live-a2"}),
        live_group_nodes=["live-a1", "live-a2"],
    )
    assert names(result) == ["b1", "b2", "c1"]


def test_live_groups_of_any_profile_count() -> None:
    other = make_node("q-1").candidate("q").label("zone", "a").reserved_by("ru-q").view()
    fleet = [other, candidate("a1", "a").view(), candidate("b1", "b").view()]
    result = select_participants(fleet, profile(1, max_per_zone=1), frozenset({"q-1"}), live_group_nodes=["q-1"])
    assert names(result) == ["b1"]


def test_partly_used_zone_admits_only_the_remainder() -> None:
    fleet = [candidate("live-a", "a").reserved_by("ru").view(), *(candidate(f"a{i}", "a").view() for i in range(3))]
    fleet += [candidate("b1", "b").view()]
    result = select_participants(fleet, profile(2, max_per_zone=2), frozenset(), live_group_nodes=["live-a"])
    assert names(result) == ["a0", "b1"]


def test_budget_shortfall_names_the_skipped_nodes() -> None:
    fleet = [candidate("live-a", "a").reserved_by("ru").view(), *(candidate(f"a{i}", "a").view() for i in range(5))]
    result = shortfall(select_participants(fleet, profile(2, max_per_zone=1), frozenset(), live_group_nodes=["live-a"]))
    # Every requested Node but the live one is eligible; the budget is what stops them.
    assert (result.requested, result.eligible, result.needed) == (6, 5, 2)
    assert result.reasons == (
        "5 over the failure-domain budget (a0, a1, a2, ...)",
        "1 reserved by Run ru (live-a)",
    )


def test_a_live_node_no_longer_known_counts_nowhere() -> None:
    fleet = [candidate("a1", "a").view(), candidate("a2", "a").view()]
    result = select_participants(fleet, profile(2, max_per_zone=2), frozenset(), live_group_nodes=["deleted-node"])
    assert names(result) == ["a1", "a2"]


def test_a_node_of_a_domain_nobody_else_uses_is_selectable() -> None:
    fleet = [candidate("live", "a").reserved_by("ru").view(), candidate("a1", "a").view(), candidate("z1", "zz").view()]
    result = select_participants(fleet, profile(1, max_per_zone=1), frozenset(), live_group_nodes=["live"])
    assert names(result) == ["z1"]


def test_a_node_without_the_topology_label_is_not_eligible_under_a_budget() -> None:
    fleet = [candidate("bare").view(), candidate("a1", "a").view()]
    result = shortfall(select_participants(fleet, profile(2, max_per_zone=5), frozenset()))
    assert result.reasons == ("1 no zone label for the failure-domain budget (bare)",)


def test_a_domain_already_over_budget_does_not_block_other_domains() -> None:
    live = [candidate(f"live-b{i}", "b").reserved_by("ru").view() for i in range(3)]
    fleet = [*live, candidate("a1", "a").view()]
    result = select_participants(
        fleet,
        profile(1, max_per_zone=2),
        frozenset(),
        live_group_nodes=[n.name for n in live],
    )
    assert names(result) == ["a1"]


# -- scale --------------------------------------------------------------------------------


def test_64_of_10000_nodes() -> None:
    rng = random.Random(64)
    fleet: list[NodeView] = []
    for i in range(10_000):
        node = make_node(f"gpu-{i:05d}").candidate(PROFILE).label("zone", f"z{i % 10}")
        if i % 3 == 0:
            node.ready(False)
        fleet.append(node.view())
    rng.shuffle(fleet)
    live = [f"gpu-{i:05d}" for i in range(0, 30, 3)]  # not Ready anyway; they only use budget
    result = select_participants(fleet, profile(64, max_per_zone=8), frozenset(), live_group_nodes=live)
    chosen = names(result)
    assert len(chosen) == 64 == len(set(chosen))
    # Ready Nodes are those with i % 3 != 0, in name order; zones z0..z9 cap at 8 each
    # including the live Nodes (one each in z0, z3, z6, z9, z2, z5, z8, z1, z4, z7).
    expected: list[str] = []
    used = {f"z{z}": 1 for z in range(10)}
    for i in range(10_000):
        zone = f"z{i % 10}"
        if i % 3 and used[zone] < 8 and len(expected) < 64:
            expected.append(f"gpu-{i:05d}")
            used[zone] += 1
    assert chosen == expected
    assert all(used[z] <= 8 for z in used)


def _reference(
    fleet: list[NodeView], prof: CertificationProfile, live: list[str]
) -> tuple[list[tuple[str, str]], int, int]:
    """The selection rule stated plainly: sort every Node, keep the eligible, take them in
    order while the group fits the budget (the lazy selection must agree with it)."""
    ordered = sorted(fleet, key=lambda n: (n.name, n.uid))
    requirement = per_node_requirement(prof.spec.checks)
    reasons = [ineligibility(n, prof, requirement, frozenset()) for n in ordered]
    eligible = [n for n, r in zip(ordered, reasons, strict=True) if r is None]
    requested = sum(1 for r in reasons if r != "not requested")
    budget = prof.spec.failure_domain_budget
    assert budget is not None
    usage: Counter[str] = domain_usage(live, {n.name: n for n in ordered}, budget)
    chosen: list[NodeView] = []
    for node in eligible:
        if len(chosen) < prof.spec.participants.count and not violations(usage, [*chosen, node], budget):
            chosen.append(node)
    if len(chosen) < prof.spec.participants.count:
        return [], requested, len(eligible)
    return [(n.name, n.uid) for n in chosen], requested, len(eligible)


@pytest.mark.parametrize("seed", range(40))
def test_lazy_selection_agrees_with_sorting_the_whole_fleet(seed: int) -> None:
    rng = random.Random(seed)
    fleet: list[NodeView] = []
    for i in range(rng.randint(0, 120)):
        node = make_node(f"n-{rng.randint(0, 80):03d}").uid(f"u-{i}")
        if rng.random() < 0.8:
            node.candidate(PROFILE if rng.random() < 0.9 else "other")
        if rng.random() < 0.15:
            node.ready(False)
        if rng.random() < 0.2:
            node.reserved_by(f"ru-{rng.randint(0, 3)}")  # looked at only by a shortfall
        if rng.random() < 0.9:
            node.label("zone", f"z{rng.randint(0, 4)}")
        fleet.append(node.view())
    prof = profile(rng.randint(1, 12), max_per_zone=rng.randint(1, 6))
    live = [f"n-{rng.randint(0, 80):03d}" for _ in range(rng.randint(0, 6))]
    expected = _reference(fleet, prof, live)
    index, cache = RequestIndex(), {}
    for i, node in enumerate(fleet):  # as the controller's cache feeds it (a key per Node)
        cache[f"k{i}"] = node
        index.on_node(f"k{i}", None, node)
    scanned = select_participants(fleet, prof, frozenset(), live_group_nodes=live)
    indexed = select_participants(
        fleet, prof, frozenset(), live_group_nodes=live, in_order=index.in_order(PROFILE, cache)
    )
    assert indexed == scanned
    result = scanned
    if expected[0]:
        assert isinstance(result, Selection)
        assert [(n.name, n.uid) for n in result.nodes] == expected[0]
    else:
        assert isinstance(result, Shortfall)
        assert (result.requested, result.eligible) == expected[1:]
