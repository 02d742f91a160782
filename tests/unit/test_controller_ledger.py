"""controller/rules/ledger.py: the admission ledger's head and segments. A malformed ledger is
an error (admission stops), never an empty ledger."""

import hashlib
import json
from typing import Any

import pytest

from controller.rules.ledger import (
    LEDGER_NAME,
    Group,
    Ledger,
    LedgerError,
    Segment,
    assemble,
    ledger_data,
    ledger_object,
    parse_head,
    parse_ledger,
    parse_segment,
    segment_name,
    segment_object,
    stored,
    unstored,
)
from shared import keys

G1 = Group("gpu-basic", ("n1", "n2"))
G2 = Group("nccl", ("n7",))
FULL = Ledger(fence=7, holder="controller-a", groups={"run-b": G2, "run-a": G1}, resource_version="991")


def _config_map(data: dict[str, Any] | None, rv: str | None = "5") -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": LEDGER_NAME}}
    if rv is not None:
        body["metadata"]["resourceVersion"] = rv
    if data is not None:
        body["data"] = data
    return body


# -- round trip ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ledger",
    [
        pytest.param(Ledger(), id="the empty initial ledger"),
        pytest.param(Ledger(fence=1, holder="c"), id="fenced, no groups"),
        pytest.param(FULL, id="two groups"),
        pytest.param(Ledger(3, "c", {"r": Group("p", ())}), id="a group without Nodes"),
    ],
)
def test_round_trip(ledger: Ledger) -> None:
    body = ledger_object(ledger, "signal-system")
    body["metadata"]["resourceVersion"] = "12"  # as the API server returns it
    segments = dict(parse_segment(segment_object(s, "signal-system")) for s in unstored(ledger))
    parsed = parse_ledger(body, segments)
    assert parsed.fence == ledger.fence
    assert parsed.holder == ledger.holder
    assert dict(parsed.groups) == dict(ledger.groups)
    assert parsed.resource_version == "12"
    assert dict(parsed.digests) == dict(stored(ledger).digests)
    assert unstored(parsed) == []


def _digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def test_the_head_names_each_group_by_the_digest_of_its_canonical_segment() -> None:
    a = '{"fence":7,"nodes":["n1","n2"],"profile":"gpu-basic","run":"run-a"}'
    b = '{"fence":7,"nodes":["n7"],"profile":"nccl","run":"run-b"}'
    assert [s.content() for s in unstored(FULL)] == [a, b]
    data = ledger_data(FULL)
    assert data == {
        "fence": "7",
        "holder": "controller-a",
        "segments": json.dumps({"run-a": _digest(a), "run-b": _digest(b)}, separators=(",", ":")),
    }
    assert "groups" not in data  # an earlier version refuses a head without groups: a downgrade fails closed
    reordered = Ledger(7, "controller-a", {"run-a": G1, "run-b": G2})
    assert ledger_data(reordered) == data


def test_a_segment_is_an_immutable_configmap_named_by_its_digest_and_labelled() -> None:
    segment = Segment("run-a", G1, 7)
    body = segment_object(segment, "ns")
    assert body["metadata"] == {
        "name": f"{LEDGER_NAME}-{_digest(segment.content())}",
        "namespace": "ns",
        "labels": {keys.COMPONENT_LABEL: "ledger-segment"},
    }
    assert body["immutable"] is True
    assert parse_segment(body) == (_digest(segment.content()), segment)


def test_group_order_of_nodes_is_kept() -> None:
    ledger = Ledger(1, "c", {"r": Group("p", ("z", "a", "m"))})
    segments = {s.digest(): s for s in unstored(ledger)}
    assert parse_ledger(_config_map(ledger_data(ledger)), segments).groups["r"].nodes == ("z", "a", "m")


def test_two_leaders_never_write_the_same_segment() -> None:
    assert Segment("r", G1, 1).digest() != Segment("r", G1, 2).digest()
    assert Segment("r", G1, 1).digest() != Segment("s", G1, 1).digest()


def test_inline_groups_of_an_earlier_version_are_stored_at_the_next_write() -> None:
    legacy = _config_map({"fence": "4", "holder": "h", "groups": json.dumps({"r": {"profile": "p", "nodes": ["n"]}})})
    ledger = parse_ledger(legacy).fenced(5, "me")
    assert [s.run for s in unstored(ledger)] == ["r"]
    assert unstored(ledger)[0].fence == 5
    head = parse_head(_config_map(ledger_data(ledger)))
    assert head.inline == {}
    assert set(head.segments) == {"r"}


def test_with_group_and_without_forget_the_runs_digest() -> None:
    ledger = stored(FULL)
    assert unstored(ledger) == []
    replaced = ledger.with_group("run-a", Group("gpu-basic", ("n3",)))
    assert [s.run for s in unstored(replaced)] == ["run-a"]
    assert set(ledger.without("run-b").digests) == {"run-a"}
    assert set(ledger.fenced(9, "x").digests) == {"run-a", "run-b"}


# -- segments: missing, forged or malformed is an error ----------------------------------


def _segment_map(content: str, name: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name or segment_name(_digest(content))}, "data": {"segment": content}}


@pytest.mark.parametrize(
    ("config_map", "problem"),
    [
        pytest.param(
            {**_segment_map('{"fence":1,"nodes":["n1"],"profile":"p","run":"r"}', segment_name("0" * 64))},
            "does not match the digest",
            id="content changed under its name",
        ),
        pytest.param(
            {"metadata": {"name": "other"}, "data": {"segment": "{}"}}, "not a segment's name", id="not a segment"
        ),
        pytest.param({"metadata": {"name": segment_name("0" * 64)}}, "does not match", id="no content"),
        pytest.param(_segment_map("{not json"), "malformed", id="content not JSON"),
        pytest.param(_segment_map("[]"), "not an object", id="content a list"),
        pytest.param(
            _segment_map('{"fence":"1","nodes":[],"profile":"p","run":"r"}'), "fence an integer", id="fence a string"
        ),
        pytest.param(
            _segment_map('{"fence":true,"nodes":[],"profile":"p","run":"r"}'), "fence an integer", id="fence a bool"
        ),
        pytest.param(
            _segment_map('{"fence":1,"nodes":[],"profile":"p","run":3}'), "run must be a string", id="run a number"
        ),
        pytest.param(
            _segment_map('{"fence":1,"nodes":"n","profile":"p","run":"r"}'), "list of Node names", id="nodes a string"
        ),
        pytest.param(_segment_map('{"fence":1,"profile":"p","run":"r"}'), "malformed", id="no nodes"),
    ],
)
def test_a_bad_segment_is_an_error(config_map: dict[str, Any], problem: str) -> None:
    with pytest.raises(LedgerError, match=problem):
        parse_segment(config_map)


def test_a_segment_the_head_names_must_be_there_and_be_its_runs() -> None:
    head = parse_head(_config_map(ledger_data(FULL)))
    segments = {s.digest(): s for s in unstored(FULL)}
    assert dict(assemble(head, segments).groups) == dict(FULL.groups)
    missing = {d: s for d, s in segments.items() if s.run != "run-b"}
    with pytest.raises(LedgerError, match=f"segment {LEDGER_NAME}-[0-9a-f]{{64}} of Run run-b is missing"):
        assemble(head, missing)
    swapped = {d: Segment("run-a" if s.run == "run-b" else s.run, s.group, s.fence) for d, s in segments.items()}
    with pytest.raises(LedgerError, match="is Run run-a's, not Run run-b's"):
        assemble(head, swapped)


@pytest.mark.parametrize(
    ("config_map", "expected"),
    [
        pytest.param(_config_map(None), Ledger(resource_version="5"), id="no data at all: fresh ledger"),
        pytest.param(_config_map({}), Ledger(resource_version="5"), id="empty data: fresh ledger"),
        pytest.param(
            _config_map({"fence": "2", "holder": "h", "groups": "{}"}, rv=None),
            Ledger(2, "h", {}, ""),
            id="no resourceVersion parses as unknown",
        ),
        pytest.param(
            _config_map({"fence": "4", "groups": json.dumps({"r": {"profile": "p", "nodes": ["n"]}})}),
            Ledger(4, "", {"r": Group("p", ("n",))}, "5"),
            id="holder is optional",
        ),
        pytest.param(
            _config_map({"fence": "4", "groups": json.dumps({"r": {"profile": "p", "nodes": ["n"], "runUID": ""}})}),
            Ledger(4, "", {"r": Group("p", ("n",))}, "5"),
            id="a runUID written by an earlier version is accepted and ignored",
        ),
        pytest.param({"data": None, "metadata": {}}, Ledger(), id="null data and bare metadata"),
    ],
)
def test_parse_tolerated(config_map: dict[str, Any], expected: Ledger) -> None:
    parsed = parse_ledger(config_map)
    assert parsed == expected


# -- malformed: LedgerError, never an empty ledger ----------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"fence": "seven", "groups": "{}"}, id="fence not a number"),
        pytest.param({"fence": "1.5", "groups": "{}"}, id="fence a fraction"),
        pytest.param({"fence": "", "groups": "{}"}, id="fence empty"),
        pytest.param({"fence": "1", "groups": "{not json"}, id="groups invalid JSON"),
        pytest.param({"fence": "1", "groups": ""}, id="groups empty string"),
        pytest.param({"fence": "1", "groups": "[]"}, id="groups a list"),
        pytest.param({"fence": "1", "groups": "null"}, id="groups null"),
        pytest.param({"fence": "1", "groups": '"x"'}, id="groups a string"),
        pytest.param({"fence": "1", "groups": '{"r": {"nodes": ["n"]}}'}, id="group without profile"),
        pytest.param({"fence": "1", "groups": '{"r": {"profile": "p"}}'}, id="group without nodes"),
        pytest.param({"fence": "1", "groups": '{"r": "p"}'}, id="group a string"),
        pytest.param({"fence": "1", "groups": '{"r": null}'}, id="group null"),
        pytest.param({"fence": "1", "groups": '{"r": {"profile": "p", "nodes": 3}}'}, id="nodes a number"),
        pytest.param({"fence": "1", "groups": '{"r": {"profile": "p", "nodes": null}}'}, id="nodes null"),
        pytest.param({"fence": "1", "segments": "[]"}, id="segments a list"),
        pytest.param({"fence": "1", "segments": '{"r": 3}'}, id="a segment digest a number"),
        pytest.param({"fence": "1", "segments": '{"r": "abc"}'}, id="a segment digest too short"),
        pytest.param({"fence": "1", "segments": json.dumps({"r": "A" * 64})}, id="a segment digest not lower hex"),
        pytest.param(
            {"fence": "1", "groups": '{"r": {"profile": "p", "nodes": []}}', "segments": json.dumps({"r": "0" * 64})},
            id="a Run both inline and in a segment",
        ),
    ],
)
def test_malformed_ledger_is_an_error(data: dict[str, str]) -> None:
    with pytest.raises(LedgerError, match=f"admission ledger {LEDGER_NAME} is malformed"):
        parse_ledger(_config_map(data))


def test_ledger_error_is_a_value_error() -> None:
    assert issubclass(LedgerError, ValueError)


@pytest.mark.parametrize(
    "nodes",
    [pytest.param('"node-1"', id="nodes a string"), pytest.param('{"node-1": true}', id="nodes an object")],
)
def test_nodes_must_be_a_list(nodes: str) -> None:
    data = {"fence": "1", "groups": f'{{"r": {{"profile": "p", "nodes": {nodes}}}}}'}
    with pytest.raises(LedgerError):
        parse_ledger(_config_map(data))


def test_fenced_ledger_without_groups_is_an_error() -> None:
    with pytest.raises(LedgerError):
        parse_ledger(_config_map({"fence": "3", "holder": "controller-a"}))


# -- operations ---------------------------------------------------------------------------


def test_with_group_adds_without_mutating() -> None:
    before = Ledger(1, "c", {"run-a": G1}, "9")
    after = before.with_group("run-b", G2)
    assert dict(after.groups) == {"run-a": G1, "run-b": G2}
    assert dict(before.groups) == {"run-a": G1}
    assert (after.fence, after.holder, after.resource_version) == (1, "c", "9")


def test_with_group_replaces_a_group_of_the_same_run() -> None:
    replaced = Group("gpu-basic", ("n3",))
    assert dict(FULL.with_group("run-a", replaced).groups) == {"run-a": replaced, "run-b": G2}


@pytest.mark.parametrize(
    ("run", "remaining"),
    [
        pytest.param("run-a", {"run-b": G2}, id="removes the named run"),
        pytest.param("run-z", {"run-a": G1, "run-b": G2}, id="an unknown run is a no-op"),
    ],
)
def test_without(run: str, remaining: dict[str, Group]) -> None:
    after = FULL.without(run)
    assert dict(after.groups) == remaining
    assert dict(FULL.groups) == {"run-a": G1, "run-b": G2}
    assert after.resource_version == FULL.resource_version


def test_fenced_keeps_groups_and_resource_version() -> None:
    after = FULL.fenced(8, "controller-b")
    assert (after.fence, after.holder) == (8, "controller-b")
    assert dict(after.groups) == dict(FULL.groups)
    assert after.resource_version == "991"
    assert (FULL.fence, FULL.holder) == (7, "controller-a")


@pytest.mark.parametrize(
    ("groups", "held", "all_nodes"),
    [
        pytest.param({}, set(), [], id="no groups hold nothing"),
        pytest.param({"run-a": G1, "run-b": G2}, {"n1", "n2", "n7"}, ["n1", "n2", "n7"], id="union of all groups"),
        pytest.param(
            {"r1": Group("p", ("n1", "n2")), "r2": Group("q", ("n2",))},
            {"n1", "n2"},
            ["n1", "n2", "n2"],
            id="a Node in two groups is held once but counted twice",
        ),
    ],
)
def test_held_and_all_group_nodes(groups: dict[str, Group], held: set[str], all_nodes: list[str]) -> None:
    ledger = Ledger(groups=groups)
    assert ledger.held_nodes() == held
    assert sorted(ledger.all_group_nodes()) == all_nodes


# -- the ConfigMap body -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource_version", "metadata"),
    [
        pytest.param("", {"name": LEDGER_NAME, "namespace": "ns"}, id="unknown resourceVersion: a create"),
        pytest.param(
            "41",
            {"name": LEDGER_NAME, "namespace": "ns", "resourceVersion": "41"},
            id="known resourceVersion: a compare-and-swap update",
        ),
    ],
)
def test_ledger_object(resource_version: str, metadata: dict[str, str]) -> None:
    ledger = Ledger(2, "c", {"run-a": G1}, resource_version)
    body = ledger_object(ledger, "ns")
    assert body == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": ledger_data(ledger)}
