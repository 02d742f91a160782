"""controller/rules/ledger.py: the admission ledger ConfigMap. A malformed ledger is an error
(admission stops), never an empty ledger."""

import json
from typing import Any

import pytest

from controller.rules.ledger import LEDGER_NAME, Group, Ledger, LedgerError, ledger_data, ledger_object, parse_ledger

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
    parsed = parse_ledger(body)
    assert parsed.fence == ledger.fence
    assert parsed.holder == ledger.holder
    assert dict(parsed.groups) == dict(ledger.groups)
    assert parsed.resource_version == "12"


def test_ledger_data_is_canonical() -> None:
    data = ledger_data(FULL)
    assert data == {
        "fence": "7",
        "holder": "controller-a",
        "groups": '{"run-a":{"nodes":["n1","n2"],"profile":"gpu-basic"},"run-b":{"nodes":["n7"],"profile":"nccl"}}',
    }
    reordered = Ledger(7, "controller-a", {"run-a": G1, "run-b": G2})
    assert ledger_data(reordered) == data


def test_group_order_of_nodes_is_kept() -> None:
    ledger = Ledger(1, "c", {"r": Group("p", ("z", "a", "m"))})
    assert parse_ledger(_config_map(ledger_data(ledger))).groups["r"].nodes == ("z", "a", "m")


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
