"""controller/rules/requested.py ``RequestIndex``: fed every change of a Node cache, it lists, for
each profile, exactly the cached Nodes requested for it (the free ones by name then uid, then the
reserved ones), and counts the free ones, whatever the order of the changes (adds, label changes, replacements, deletions, re-list diffs). Pure."""

import random

import pytest

from controller.rules.nodes import NodeView
from controller.rules.requested import RequestIndex
from shared import keys
from tests.unit.node_builders import make_node

PROFILES = ("p", "q", "r")


def _view(rng: random.Random, name: str) -> NodeView:
    node = make_node(name).uid(f"u-{rng.randint(0, 9)}")
    profile = rng.choice((*PROFILES, None))
    if profile is not None:
        node.requested(profile)
    if rng.random() < 0.2:
        node.reserved_by("ru")
    return node.view()


def _expected(cache: dict[str, NodeView], profile: str) -> list[tuple[str, str]]:
    """The free ones by name then uid, then the reserved ones by name then uid."""
    wanted = [v for v in cache.values() if v.labels.get(keys.CERTIFY_LABEL) == profile]
    free = sorted((v.name, v.uid) for v in wanted if v.reservation is None)
    return free + sorted((v.name, v.uid) for v in wanted if v.reservation is not None)


@pytest.mark.parametrize("seed", range(30))
def test_the_index_lists_exactly_the_requested_nodes_in_order(seed: int) -> None:
    rng = random.Random(seed)
    cache: dict[str, NodeView] = {}
    index = RequestIndex()
    for _ in range(rng.randint(1, 300)):
        key = f"/n-{rng.randint(0, 40):02d}"
        old = cache.get(key)
        new = None if old is not None and rng.random() < 0.25 else _view(rng, key[1:])
        if new is None:
            cache.pop(key)
        else:
            cache[key] = new
        index.on_node(key, old, new)
    for profile in PROFILES:
        listed = [(v.name, v.uid) for v in index.in_order(profile, cache)]
        assert listed == _expected(cache, profile)
        assert index.count(profile) == len(listed)
        assert index.free_count(profile) == sum(1 for v in index.in_order(profile, cache) if v.reservation is None)


def test_a_view_changed_in_the_cache_after_the_index_is_read_as_it_is_now() -> None:
    index = RequestIndex()
    before = make_node("n-1").requested("p").view()
    cache = {"/n-1": before}
    index.on_node("/n-1", None, before)
    cache["/n-1"] = make_node("n-1").requested("q").view()  # the event not delivered yet
    assert list(index.in_order("p", cache)) == []
