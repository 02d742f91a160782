"""The portal's compact index entries (portal/compact.py), the snapshot's newest-result tables
built from them, and content-coding negotiation (portal/encoding.py) over HTTP."""

import gzip
import json
import random
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from portal.api import make_app
from portal.auth import Caller, OpenAccess
from portal.compact import CUTS, Packer, join, split
from portal.encoding import accepts_gzip
from portal.entries import candidates
from portal.index import Entry, Index, entry_of
from portal.sight import EVERYTHING, Sight
from shared.classify import classified
from shared.envelope import State, ValidationResult, derive
from tests.unit.test_envelope_builders import NOW, accepted, evidence, make_run, read


def _results(name: str = "r1", participants: int = 3, checks: int = 2, **kw: Any) -> list[ValidationResult]:
    run = make_run(name, participants=participants, checks=checks)
    done, cm, _, digest = accepted(run, [evidence(run, i, **kw) for i in range(checks)])
    derived = derive(done, read(done, cm, digest), cluster="c", observed_at=NOW)
    uids = {p["nodeName"]: p["nodeUID"] for p in run["spec"]["participants"]}
    return [classified(r, current_node_uid=uids[r.target.name], now=NOW, window=timedelta(days=7)) for r in derived]


def test_an_entry_serves_its_envelope_byte_for_byte_and_shares_a_runs_repeated_json() -> None:
    results = _results()
    packer = Packer()
    entries = [entry_of(r, packer) for r in results]
    for result, entry in zip(results, entries, strict=True):
        assert entry.summary == result.model_dump_json(by_alias=True, exclude={"details"}).encode()
        assert len(entry.segments) == len(CUTS) + 1, "every cut found in an envelope"
    first = entries[0]
    other = next(e for e in entries if e.key[3] == first.key[3] and e.key[1] != first.key[1])
    assert first.segments[0] is other.segments[0], "the schema: one object"
    assert first.segments[2] is other.segments[2], "a (Run, check)'s check, version, Run and scope: one object"
    same_node = next(e for e in entries if e.key[1] == first.key[1] and e.key[3] != first.key[3])
    assert first.segments[3] is same_node.segments[3], "a (Run, Node)'s target: one object"
    assert first.key[1] is same_node.key[1], "key strings interned"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{}",
        b'{"id":"x","message":"a,\\"check\\":b,\\"target\\":c"}',  # the cuts' text inside a string
        b'{"target":1,"check":2}',  # members in another order, none after a comma
        b'{"a":1,"evidence":{"x":1},"check":{"y":2}}',
        bytes(range(256)),
    ],
)
def test_any_body_joins_back_to_itself(body: bytes) -> None:
    assert join(tuple(split(body))) == body
    assert join(Packer().pack(body)) == body


def test_a_message_quoting_the_cuts_is_never_cut_inside() -> None:
    """A quote inside a JSON string is escaped, so text like ``,"check":`` in a message cannot
    start a segment: every segment after the first starts at a top-level member."""
    (result,) = _results(participants=1, checks=1)
    tricky = result.model_copy(update={"message": ',"id":,"check":,"target":,"startedAt":,"observedAt":,"evidence":'})
    entry = entry_of(tricky)
    assert entry.summary == tricky.model_dump_json(by_alias=True, exclude={"details"}).encode()
    for segment, cut in zip(entry.segments[1:], CUTS, strict=True):
        assert segment.startswith(cut)
    assert json.loads(entry.summary)["message"] == tricky.message


def _entry(workspace: str, node: str, check: str, run: str, state: str, created: str) -> Entry:
    body = json.dumps({"id": f"{workspace}~{node}~p~{check}~{run}", "state": state}).encode()
    return Entry((workspace, node, "p", check, run), state, created, (body,), None, None)


@pytest.mark.parametrize("seed", range(30))
def test_the_newest_results_table_is_the_naive_one(seed: int) -> None:
    """Per check type and Node: the newest result of each workspace, newest first (Run creation,
    then Run uid); per check type and workspace, how many results. Against a direct computation."""
    rng = random.Random(seed)
    states = [s.value for s in State]
    entries = []
    for _ in range(rng.randrange(1, 400)):
        workspace = rng.choice("abc")
        run = f"{workspace}-r{rng.randrange(60)}"  # a Run is in one workspace
        node, check = f"n{rng.randrange(30):02d}", rng.choice(["c1", "c2"])
        created = f"2026-11-{rng.randrange(1, 5):02d}T00:00:00+00:00"
        entries.append(_entry(workspace, node, check, run, rng.choice(states), created))
    entries = list({e.key: e for e in entries}.values())  # one result per key, as the portal has
    index = Index(list(entries))
    expected: dict[str, dict[str, list[Entry]]] = {}
    for check_type in {e.check_type for e in entries}:
        for node in {e.key[1] for e in entries}:
            mine = [e for e in entries if e.check_type == check_type and e.key[1] == node]
            per_workspace = {
                w: max((e for e in mine if e.key[0] == w), key=lambda e: (e.created, e.key[4]))
                for w in {e.key[0] for e in mine}
            }
            if per_workspace:
                ordered = sorted(per_workspace.values(), key=lambda e: (e.created, e.key[4]), reverse=True)
                expected.setdefault(check_type, {})[node] = ordered
    found = {
        t: {n: list(candidates(c)) for shard in shards for n, c in shard.items()} for t, shards in index._newest.items()
    }
    assert found == expected
    totals: dict[str, dict[str, int]] = {}
    for e in entries:
        totals.setdefault(e.check_type, {}).setdefault(e.key[0], 0)
        totals[e.check_type][e.key[0]] += 1
    assert index._totals == totals
    assert index.workspaces == {e.key[0] for e in entries}


@pytest.mark.parametrize(
    ("header", "gzipped"),
    [
        (None, False),
        ("", False),
        ("identity", False),
        ("gzip", True),
        ("GZip", True),
        ("x-gzip", True),
        ("br, gzip;q=0.5", True),
        ("gzip;q=0", False),
        ("gzip; q=0.000", False),
        ("gzip;q=0, *", False),
        ("*", True),
        ("*;q=0", False),
        ("deflate, br", False),
        ("gzip;q=nonsense", False),
        ("gzip;q=2", False),
        ("gzip;level=1", True),
    ],
)
def test_accept_encoding(header: str | None, gzipped: bool) -> None:
    assert accepts_gzip(header) is gzipped


class Everything(OpenAccess):
    async def caller(self, authorization: str | None, remote: str = "") -> Caller:
        return Caller("root")

    async def sight(self, caller: Caller, workspaces: Iterable[str]) -> Sight:
        return EVERYTHING


class Fixed:
    def __init__(self, index: Index) -> None:
        self.index = index

    def ready(self) -> bool:
        return True


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    packer = Packer()
    index = Index([entry_of(r, packer) for r in _results(participants=4, checks=3)])
    async with TestClient(TestServer(make_app(Fixed(index), Everything()))) as test_client:
        yield test_client


@pytest.mark.parametrize("path", ["/api/v1/fleet", "/api/v1/results"])
async def test_gzip_only_where_accepted_and_always_varying(client: TestClient[Any, Any], path: str) -> None:
    answers = {}
    for header in ["gzip", "gzip;q=0", "identity", "gzip", "*;q=0"]:
        answer = await client.get(path, headers={"Accept-Encoding": header}, auto_decompress=False)
        assert answer.status == 200
        assert answer.headers["Vary"] == "Accept-Encoding"
        raw = await answer.read()
        if accepts_gzip(header):
            assert answer.headers["Content-Encoding"] == "gzip", header
            raw = gzip.decompress(raw)
        else:
            assert "Content-Encoding" not in answer.headers, header
        answers[header] = json.loads(raw)
    assert len({json.dumps(a, sort_keys=True) for a in answers.values()}) == 1, "the same answer, however coded"
