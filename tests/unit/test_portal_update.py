"""A snapshot updated for the Runs that changed (portal/index.py ``Index.updated``) is the
snapshot built anew from the same results: every table the queries slice, after random
sequences of Runs added, replaced and removed; and the list edit it is made of."""

import random

import pytest

from portal import index as index_module
from portal.entries import Entry, edited
from portal.index import Index, RegisteredCheck
from shared.envelope import State

STATES = [s.value for s in State]


def _run(rng: random.Random, uid: str) -> list[Entry]:
    """One Run's results: some Nodes x some checks, in a workspace, one state each."""
    workspace = rng.choice("abc")
    created = f"2026-11-{rng.randrange(1, 6):02d}T00:00:00+00:00"
    nodes = rng.sample([f"n{i:02d}" for i in range(25)], rng.randrange(1, 5))
    checks = rng.sample(["c1", "c2", "c3"], rng.randrange(1, 4))
    return [
        Entry(
            (workspace, node, rng.choice("pq"), check, uid),
            rng.choice(STATES),
            created,
            (f'{{"id":"{workspace}~{node}~{check}~{uid}"}}'.encode(),),
            None,
            None,
        )
        for node in nodes
        for check in checks
    ]


def _tables(index: Index) -> dict[str, object]:
    return {
        "entries": index.entries,
        "by_node": index._by_node,
        "types": index._types,
        "totals": index._totals,
        "workspaces": index.workspaces,
        "newest": index._newest,
        "everything": index._everything,
        "len": len(index),
    }


@pytest.mark.parametrize("seed", range(40))
def test_an_updated_snapshot_is_the_snapshot_built_anew(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "REBUILD_ABOVE", 100.0)  # every update edits, none builds anew
    rng = random.Random(seed)
    runs = {f"u{i}": _run(rng, f"u{i}") for i in range(rng.randrange(1, 30))}
    checks = [RegisteredCheck("p", "c1", 0, "Pod", 1, "sha256:" + "0" * 64, 60)]
    index = Index([e for entries in runs.values() for e in entries])
    for step in range(12):
        removed, added = [], []
        for uid in rng.sample(sorted(runs), min(len(runs), rng.randrange(0, 3))):
            removed += runs.pop(uid)
            if rng.random() < 0.6:  # the same Run, classified again
                runs[uid] = _run(rng, uid)
                added += runs[uid]
        for i in range(rng.randrange(0, 3)):
            uid = f"s{step}-{i}"
            runs[uid] = _run(rng, uid)
            added += runs[uid]
        before = _tables(index)
        updated = index.updated(removed, added, checks=checks, node_uids={}, built_at=None, nodes={})
        assert _tables(index) == before, "the old snapshot is left as it was"
        anew = Index([e for entries in runs.values() for e in entries], checks=checks)
        assert _tables(updated) == _tables(anew), f"step {step}"
        assert updated.checks == checks
        index = updated


def test_an_update_removing_what_the_snapshot_does_not_hold_builds_anew() -> None:
    rng = random.Random(7)
    held, stranger = _run(rng, "u1"), _run(rng, "u2")
    index = Index(list(held))
    updated = index.updated(stranger, [], checks=[], node_uids={}, built_at=None, nodes={})
    assert updated.entries == index.entries


@pytest.mark.parametrize("seed", range(50))
def test_edited_is_drop_then_insert(seed: int) -> None:
    rng = random.Random(seed)
    old = [f"o{i}" for i in range(rng.randrange(0, 20))]
    drops = rng.sample(range(len(old)), rng.randrange(0, len(old) + 1)) if old else []
    inserts = sorted((rng.randrange(0, len(old) + 1), f"n{i}") for i in range(rng.randrange(0, 6)))
    expected: list[str] = []
    for position in range(len(old) + 1):
        expected += [item for at, item in inserts if at == position]
        if position < len(old) and position not in drops:
            expected.append(old[position])
    assert edited(old, drops, inserts) == expected
