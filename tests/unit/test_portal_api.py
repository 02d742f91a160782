"""The portal's pure parts and its HTTP handlers without a cluster: continuation tokens,
the index (filters, visibility, key-based pages under concurrent writes, Node summaries) and
the aiohttp application over a fixed index with a stand-in authorizer."""

import json
import random
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from portal.api import make_app
from portal.auth import ALL, Caller, OpenAccess, Unauthenticated
from portal.health import node_health
from portal.index import Entry, Filters, Index, RegisteredCheck, entry_of
from portal.openapi import document
from portal.pagination import Key, TokenError, decode_token, encode_token
from portal.sight import EVERYTHING, Sight
from shared.classify import classified
from shared.envelope import State, derive
from tests.unit.test_envelope_builders import NOW, accepted, evidence, make_run, read

Obj = dict[str, Any]


def test_tokens_round_trip_and_reject_garbage() -> None:
    key: Key = ("team-a", "gpu-000", "p", "c", "uid")
    assert decode_token(encode_token(key)) == key
    for bad in ["", "%%%", "e30", encode_token(key)[:-3], "x" * 3000, "é", "eyJ2IjoyLCJrIjpbXX0"]:
        with pytest.raises(TokenError):
            decode_token(bad)


def _entry(
    workspace: str,
    node: str,
    check: str = "c",
    run: str = "u",
    state: str = "Passed",
    created: str = "2026-11-30T00:00:00+00:00",
) -> Entry:
    summary = json.dumps({"id": f"{workspace}~{node}~p~{check}~{run}", "state": state}).encode()
    return Entry((workspace, node, "p", check, run), state, created, (summary,), None, None)


def _walk(index_of: Any, filters: Filters, limit: int) -> list[Key]:
    seen: list[Key] = []
    after = None
    while True:
        page, more = index_of().page(filters, lambda _: True, after=after, limit=limit)
        seen += [e.key for e in page]
        if not more:
            return seen
        after = decode_token(encode_token(page[-1].key))


def test_pages_have_no_duplicates_or_omissions_under_concurrent_writes() -> None:
    rng = random.Random(7)
    entries = [_entry(f"ns{w}", f"n{n:02d}", f"c{c}") for w in range(3) for n in range(10) for c in range(3)]
    original = {e.key for e in entries}
    current = list(entries)
    calls = [0]

    def index_of() -> Index:
        # Each page (of the first 60) is served from a newer snapshot with more results written anywhere.
        calls[0] += 1
        for _ in range(5 if calls[0] < 60 else 0):
            current.append(_entry(f"ns{rng.randrange(4)}", f"n{rng.randrange(12):02d}", "c9", str(rng.random())))
        return Index(current)

    for limit in (1, 2, 7, 100):
        calls[0] = 0
        walked = _walk(index_of, Filters(), limit)
        assert len(walked) == len(set(walked))
        assert original <= set(walked)
        assert walked == sorted(walked)


def test_filters_and_visibility() -> None:
    index = Index(
        [
            _entry("a", "n1", "c1", state="Passed"),
            _entry("a", "n2", "c1", state="Failed"),
            _entry("b", "n1", "c2", state="Unknown"),
        ]
    )
    everyone = lambda _: True  # noqa: E731
    only_a = {"a"}.__contains__
    assert [e.key[1] for e in index.page(Filters(node="n1"), everyone, after=None, limit=10)[0]] == ["n1", "n1"]
    assert len(index.page(Filters(node="n1"), only_a, after=None, limit=10)[0]) == 1
    assert index.page(Filters(workspace="b"), only_a, after=None, limit=10) == ([], False)
    assert len(index.page(Filters(state=State.FAILED), everyone, after=None, limit=10)[0]) == 1
    assert len(index.page(Filters(check="p/c2"), everyone, after=None, limit=10)[0]) == 1
    assert len(index.page(Filters(check="c1"), everyone, after=None, limit=10)[0]) == 2
    page, more = index.page(Filters(), everyone, after=None, limit=2)
    assert more
    assert len(page) == 2
    assert index.page(Filters(), everyone, after=page[-1].key, limit=2) == ([index.entries[2]], False)


@dataclass
class Users:
    """Stand-in authorizer (the real one is tested against the API server in
    tests/integration/test_portal_security.py): token -> what that user may see."""

    grants: dict[str, Sight]

    async def caller(self, authorization: str | None, remote: str = "") -> Caller:
        token = (authorization or "").removeprefix("Bearer ")
        if token not in self.grants:
            raise Unauthenticated("the token was not accepted")
        return Caller(token)

    async def sight(self, caller: Caller, workspaces: Iterable[str]) -> Sight:
        return self.grants[caller.user]


def _sight(*workspaces: str, nodes: bool = False, profiles: bool = False) -> Sight:
    return Sight(frozenset(workspaces), nodes=nodes, profiles=profiles)


@dataclass
class Fixed:
    index: Index

    def ready(self) -> bool:
        return True


def _results(name: str, namespace: str, **kw: Any) -> list[Entry]:
    run = make_run(name, namespace=namespace)
    done, cm, _, digest = accepted(run, [evidence(run, **kw)])
    derived = derive(done, read(done, cm, digest), cluster="c", observed_at=NOW)
    uids = {p["nodeName"]: p["nodeUID"] for p in run["spec"]["participants"]}
    return [
        entry_of(classified(r, current_node_uid=uids[r.target.name], now=NOW, window=timedelta(days=7)))
        for r in derived
    ]


def _node(name: str, uid: str, **status: Any) -> Obj:
    return {"metadata": {"name": name, "uid": uid}, "status": status}


READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": "2026-11-29T00:00:00Z"}


def _index() -> Index:
    entries = _results("r1", "team-a") + _results("r2", "team-b", verdicts={0: "Fail"})
    check = RegisteredCheck("gpu-basic", "inventory", 0, "Pod", 1, "sha256:" + "0" * 64, 604800)
    extra = RegisteredCheck("gpu-burn", "burn", 0, "Pod", 1, "sha256:" + "0" * 64, 3600)
    nodes = {
        "gpu-000": node_health(_node("gpu-000", "uid-0", conditions=[READY], allocatable={"nvidia.com/gpu": "8"})),
        "gpu-001": node_health(_node("gpu-001", "uid-1")),
        "gpu-002": node_health(_node("gpu-002", "uid-2")),
    }
    uids = {name: health.uid for name, health in nodes.items()}
    return Index(entries, checks=[check, extra], node_uids=uids, built_at=NOW, nodes=nodes)


GRANTS = {
    "alice": _sight("team-a"),
    "root": EVERYTHING,
    "nobody": _sight(),
    "ops": _sight(nodes=True, profiles=True),
}


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    app = make_app(Fixed(_index()), Users(GRANTS))
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


def _auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {user}"}


async def test_listing_is_limited_to_visible_workspaces(client: TestClient[Any, Any]) -> None:
    answer = await client.get("/api/v1/results", headers=_auth("alice"))
    assert answer.status == 200
    body = await answer.json()
    assert {item["scope"]["workspace"] for item in body["items"]} == {"team-a"}
    assert body["continue"] is None
    assert all("details" not in item for item in body["items"])
    root = await (await client.get("/api/v1/results", headers=_auth("root"))).json()
    assert len(root["items"]) == 4
    assert ALL in GRANTS["root"].workspaces
    none = await (await client.get("/api/v1/results?workspace=team-b", headers=_auth("alice"))).json()
    assert none["items"] == []


async def test_invisible_result_is_indistinguishable_from_nonexistent(client: TestClient[Any, Any]) -> None:
    root = await (await client.get("/api/v1/results?workspace=team-b", headers=_auth("root"))).json()
    hidden = root["items"][0]["id"]
    mine = await client.get(f"/api/v1/results/{hidden}", headers=_auth("alice"))
    made_up = await client.get("/api/v1/results/team-b~gpu-000~p~c~nope", headers=_auth("alice"))
    assert mine.status == made_up.status == 404
    assert await mine.json() == await made_up.json()
    detail = await (await client.get(f"/api/v1/results/{hidden}", headers=_auth("root"))).json()
    assert detail["state"] in {"Failed", "Passed"}
    assert detail["detailsSchema"] == "projectsignal.dev/check-evidence/v1"
    assert detail["details"]["schema"] == "projectsignal.dev/check-evidence/v1"


async def test_node_summary_and_checks(client: TestClient[Any, Any]) -> None:
    summary = await (await client.get("/api/v1/nodes/gpu-000", headers=_auth("root"))).json()
    assert summary["uid"] == "uid-0"
    assert summary["health"]["ready"]["status"] == "True"
    assert summary["health"]["allocatable"] == {"gpu": "8", "rdma": {}}
    rows = {row["check"]: row for row in summary["checks"]}
    assert set(rows) == {"gpu-basic/inventory", "gpu-burn/burn"}
    assert rows["gpu-basic/inventory"]["state"] == "Failed"  # the newest result: r2 (team-b) failed gpu-000
    assert rows["gpu-burn/burn"]["state"] == "Unknown"
    assert rows["gpu-burn/burn"]["reason"] == "NoResult"
    # alice sees her own result, but neither the Node's health nor checks she has no result of.
    alice = await (await client.get("/api/v1/nodes/gpu-000", headers=_auth("alice"))).json()
    assert [(r["check"], r["state"]) for r in alice["checks"]] == [("gpu-basic/inventory", "Passed")]
    assert alice["uid"] is None
    assert alice["health"] is None
    # A Node of which the caller sees no result, and may not list Nodes: as if it did not exist.
    for user, node in (("nobody", "gpu-001"), ("alice", "gpu-002"), ("root", "no-such-node")):
        answer = await client.get(f"/api/v1/nodes/{node}", headers=_auth(user))
        assert answer.status == 404, (user, node)
    ops = await (await client.get("/api/v1/nodes/gpu-002", headers=_auth("ops"))).json()
    assert ops["uid"] == "uid-2"
    assert ops["health"]["ready"] == {"status": "Unknown", "reason": "NoReadyCondition", "since": None}
    assert {r["check"]: r["state"] for r in ops["checks"]} == {
        "gpu-basic/inventory": "Unknown",
        "gpu-burn/burn": "Unknown",
    }
    checks = await (await client.get("/api/v1/checks", headers=_auth("nobody"))).json()
    assert checks["items"] == [], "a registered check is named only to who may list profiles or has its results"
    mine = await (await client.get("/api/v1/checks", headers=_auth("alice"))).json()
    assert [c["id"] for c in mine["items"]] == ["gpu-basic/inventory"]
    assert mine["items"][0]["registered"] is True
    everything = await (await client.get("/api/v1/checks", headers=_auth("ops"))).json()
    assert [c["id"] for c in everything["items"]] == ["gpu-basic/inventory", "gpu-burn/burn"]


async def test_errors(client: TestClient[Any, Any]) -> None:
    assert (await client.get("/api/v1/results")).status == 401
    assert (await client.get("/api/v1/results", headers=_auth("mallory"))).status == 401
    for query in ("limit=0", "limit=1001", "limit=x", "state=Healthy", "continue=zzz", "node="):
        answer = await client.get(f"/api/v1/results?{query}", headers=_auth("root"))
        assert answer.status == 400, query
        assert (await answer.json())["error"]["reason"] == "BadRequest"


async def test_pagination_over_http(client: TestClient[Any, Any]) -> None:
    ids: list[str] = []
    url = "/api/v1/results?limit=1"
    while True:
        body = await (await client.get(url, headers=_auth("root"))).json()
        ids += [item["id"] for item in body["items"]]
        if body["continue"] is None:
            break
        url = f"/api/v1/results?limit=1&continue={body['continue']}"
    assert len(ids) == len(set(ids)) == 4


async def test_service_endpoints() -> None:
    app = make_app(Fixed(_index()), OpenAccess())
    async with TestClient(TestServer(app)) as test_client:
        assert (await test_client.get("/healthz")).status == 200
        assert (await test_client.get("/readyz")).status == 200
        assert (await test_client.get("/api/v1/results")).status == 200
        spec = await (await test_client.get("/api/v1/openapi.json")).json()
        assert spec == json.loads(json.dumps(document()))
        assert set(spec["paths"]) == {
            "/api/v1/checks",
            "/api/v1/fleet",
            "/api/v1/results",
            "/api/v1/results/{id}",
            "/api/v1/nodes/{name}",
        }
        metrics = await (await test_client.get("/metrics")).text()
        assert "signal_portal_requests_total" in metrics
        assert "signal_portal_results" not in metrics


def test_fleet_counts_the_newest_visible_result_per_node_worst_first() -> None:
    day = "2026-11-{:02d}T00:00:00+00:00".format
    index = Index(
        [
            # n1: an old Pass in a, a newer Fail in b: the newest visible one counts.
            _entry("a", "n1", "c1", "r1", "Passed", day(1)),
            _entry("b", "n1", "c1", "r2", "Failed", day(2)),
            # n2: same creation time, the Run uid breaks the tie (as the Node summary does).
            _entry("a", "n2", "c1", "r3", "Running", day(3)),
            _entry("a", "n2", "c1", "r4", "Stale", day(3)),
            _entry("a", "n3", "c1", "r5", "Unknown", day(4)),
            _entry("b", "n4", "c2", "r6", "Passed", day(5)),
        ],
        checks=[RegisteredCheck("p", "c1", 0, "Pod", 1, "sha256:" + "0" * 64, 60)],
    )
    everyone = _fleet(index, EVERYTHING, rows=10)
    assert [item["check"]["id"] for item in everyone] == ["p/c1", "p/c2"]
    c1, c2 = everyone
    assert c1["check"]["registered"] is True
    assert c2["check"]["registered"] is False
    assert (c1["nodes"], c1["results"], c2["nodes"], c2["results"]) == (3, 5, 1, 1)
    assert c1["counts"] == {"Passed": 0, "Failed": 1, "Running": 0, "Unknown": 1, "Stale": 1}
    assert [(r["id"].split("~")[1], r["state"]) for r in c1["rows"]] == [
        ("n1", "Failed"),
        ("n3", "Unknown"),
        ("n2", "Stale"),
    ]
    only_a = _fleet(index, _sight("a"), rows=2)
    assert [item["check"]["id"] for item in only_a] == ["p/c1"], "a check type seen only in b is not hinted"
    (a1,) = only_a
    assert (a1["nodes"], a1["results"]) == (3, 4)
    assert a1["counts"] == {"Passed": 1, "Failed": 0, "Running": 0, "Unknown": 1, "Stale": 1}
    assert [r["state"] for r in a1["rows"]] == ["Unknown", "Stale"], "rows are capped, worst first"
    assert _fleet(index, _sight(), rows=10) == [], "no result and may not list profiles: nothing"
    nobody = _fleet(index, _sight(profiles=True), rows=10)
    assert nobody == [
        {
            "check": index.checks[0].to_json(),
            "nodes": 0,
            "results": 0,
            "counts": {s.value: 0 for s in State},
            "rows": [],
        }
    ]
    assert index.fleet(_sight("a"), rows=2) is index.fleet(_sight("a"), rows=2), "cached"


@pytest.mark.parametrize("seed", range(20))
def test_the_precomputed_fleet_of_every_workspace_is_the_fleet_of_them_all(seed: int) -> None:
    """The fleet of every workspace comes from the snapshot (worst first, computed once); it
    must be exactly the one computed, per request, for a sight of some workspaces that happens
    to hold them all: the same Nodes, counts and rows, and row order."""
    rng = random.Random(seed)
    states = [s.value for s in State]
    entries = [
        _entry(
            rng.choice("abc"),
            f"n{rng.randrange(40):02d}",
            rng.choice(["c1", "c2", "c3"]),
            f"r{i}",
            rng.choice(states),
            f"2026-11-{rng.randrange(1, 29):02d}T00:00:00+00:00",
        )
        for i in range(rng.randrange(1, 300))
    ]
    index = Index(entries)
    rows = rng.choice([1, 5, 200])
    everyone = {item["check"]["id"]: item for item in _fleet(index, EVERYTHING, rows)}
    assert set(everyone) == {e.check_type for e in entries}
    for check_type, item in everyone.items():
        nodes, counts, worst = index._fleet_of(check_type, index.workspaces, rows)
        assert (item["nodes"], item["counts"]) == (nodes, counts)
        assert [r["id"] for r in item["rows"]] == [json.loads(e.summary)["id"] for e in worst]


def _fleet(index: Index, sight: Sight, rows: int) -> list[Obj]:
    items: list[Obj] = json.loads(b"{" + index.fleet(sight, rows) + b"}")["items"]
    return items


async def test_fleet_over_http(client: TestClient[Any, Any]) -> None:
    root = await (await client.get("/api/v1/fleet", headers=_auth("root"))).json()
    item, idle = root["items"]
    assert (idle["check"]["id"], idle["nodes"], idle["rows"]) == ("gpu-burn/burn", 0, [])
    assert item["check"]["id"] == "gpu-basic/inventory"
    assert item["results"] == 4
    assert item["nodes"] == 2
    assert item["counts"]["Failed"] == 1, "r2 (team-b) failed gpu-000, its newest result"
    assert item["rows"][0]["target"]["name"] == "gpu-000"
    assert item["rows"][0]["state"] == "Failed"
    assert all("details" not in row for row in item["rows"])
    assert set(root["nodes"]) == {"gpu-000", "gpu-001"}, "the health of the Nodes in the rows"
    assert root["nodes"]["gpu-000"]["allocatable"]["gpu"] == "8"
    alice = await (await client.get("/api/v1/fleet?rows=0", headers=_auth("alice"))).json()
    assert alice["nodes"] == {}, "alice may not list Nodes"
    assert len(alice["items"]) == 1
    assert alice["items"][0]["counts"]["Failed"] == 0
    assert alice["items"][0]["results"] == 2
    assert alice["items"][0]["rows"] == []
    for query in ("rows=-1", "rows=1001", "rows=x", "rows="):
        answer = await client.get(f"/api/v1/fleet?{query}", headers=_auth("root"))
        assert answer.status == 400, query
    assert (await client.get("/api/v1/fleet")).status == 401


@pytest.mark.parametrize("path", ["/api/v1/fleet", "/api/v1/results?limit=5"])
async def test_large_answers_are_gzipped_for_clients_that_accept_it(client: TestClient[Any, Any], path: str) -> None:
    plain = await client.get(path, headers={**_auth("root"), "Accept-Encoding": "identity"})
    assert plain.status == 200
    assert "Content-Encoding" not in plain.headers
    expected = await plain.json()
    packed = await client.get(path, headers={**_auth("root"), "Accept-Encoding": "gzip"})
    assert packed.status == 200
    assert packed.headers["Content-Encoding"] == "gzip"
    assert packed.headers["Vary"] == "Accept-Encoding"
    assert await packed.json() == expected, "the same answer, decompressed"
    again = await client.get(path, headers={**_auth("root"), "Accept-Encoding": "gzip"})
    assert await again.json() == expected, "the cached compressed copy is the same answer"
