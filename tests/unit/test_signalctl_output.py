"""The pure renderers of signalctl's get/describe (signalctl/output.py) and the views of
``get runs|profiles|nodes`` and ``request --dry-run`` (signalctl/fleet.py, signalctl/dryrun.py),
as tables of cases."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from shared import certified, keys
from shared.profile import CertificationProfile
from signalctl import dryrun, fleet, output
from signalctl.terminal import escape_controls
from tests.controller_support import profile_body

Obj = dict[str, Any]
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def obj(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Thing", "metadata": {"name": name}}


VIEW = output.View(
    "thing.example.dev",
    [obj("a"), obj("bb")],
    ("NAME", "X"),
    [["a", "1"], ["bb", "22"]],
    ("WIDE",),
    [["w1"], ["w2"]],
)


@pytest.mark.parametrize(
    ("form", "no_headers", "expected"),
    [
        (None, False, "NAME   X\na      1\nbb     22"),
        (None, True, "a      1\nbb     22"),
        ("wide", False, "NAME   X    WIDE\na      1    w1\nbb     22   w2"),
        ("wide", True, "a      1    w1\nbb     22   w2"),
        ("name", False, "thing.example.dev/a\nthing.example.dev/bb"),
        ("name", True, "thing.example.dev/a\nthing.example.dev/bb"),
    ],
)
def test_tables_and_names(form: str | None, no_headers: bool, expected: str) -> None:
    assert output.render(VIEW, form, no_headers=no_headers) == (expected, "")


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_json_and_yaml_print_a_list_or_the_single_object(form: str) -> None:
    load = json.loads if form == "json" else yaml.safe_load
    text, err = output.render(VIEW, form)
    assert err == ""
    assert load(text) == {
        "apiVersion": "v1",
        "kind": "List",
        "items": [obj("a"), obj("bb")],
        "metadata": {"resourceVersion": ""},
    }
    single = output.View("thing.example.dev", [obj("a")], text="described", single=True)
    assert load(output.render(single, form)[0]) == obj("a")
    assert output.render(single, None) == ("described", "")
    assert output.render(single, "wide") == ("described", "")


def test_json_is_indented_like_kubectl_and_keeps_unicode() -> None:
    assert output.json_text({"a": ["é"]}) == '{\n    "a": [\n        "é"\n    ]\n}'


def test_nothing_found_goes_to_stderr_and_machine_forms_stay_parseable() -> None:
    empty = output.View("thing.example.dev", [], ("NAME",), [], empty="No Things found.")
    assert output.render(empty, None) == ("", "No Things found.")
    assert output.render(empty, "wide", no_headers=True) == ("", "No Things found.")
    assert json.loads(output.render(empty, "json")[0])["items"] == []
    assert output.render(empty, "name") == ("", "")


def test_names_are_listed_once() -> None:
    assert output.names([obj("n1"), obj("n1"), obj("n2")], "node") == "node/n1\nnode/n2"


def profile(name: str = "gpu", *, record: dict[str, certified.Entry] | None = None, **status: Any) -> Obj:
    body = profile_body(name, "signal-scripts", 2)
    body["metadata"].update({"creationTimestamp": "2026-11-30T10:00:00Z", "resourceVersion": "1"})
    body["spec"]["freshness"] = "24h"
    body["status"] = {**status}
    if record is not None:
        body["status"]["certifiedNodes"] = certified.encode(record)
    return body


def entry(node_uid: str, verdict: str, completed: str, source: str) -> certified.Entry:
    return {
        "verdict": verdict,
        "run": "r1",
        "namespace": "signal-system",
        "runUID": "ru",
        "runCreated": "2026-11-29T00:00:00Z",
        "completionTime": completed,
        "evidenceDigest": "sha256:" + "e" * 64,
        "sourceDigest": source,
        "profileGeneration": "1",
        "nodeUID": node_uid,
    }


def node(
    name: str,
    uid: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    reserved_by: str | None = None,
) -> Obj:
    taint = [{"key": keys.RESERVED_TAINT_KEY, "value": reserved_by, "effect": "NoSchedule"}] if reserved_by else []
    return {
        "metadata": {"name": name, "uid": uid, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"taints": taint},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"nvidia.com/gpu": "8", "rdma/ib": "1", "cpu": "64", "memory": "512Gi"},
        },
    }


def test_get_profiles_view() -> None:
    source = profile()["spec"]["source"]["digest"]
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "SourceVerified"}], "eligibleNodes": 3}
    record = {"n1": entry("u1", "Pass", "2026-11-30T11:00:00Z", source), "n2": entry("u2", "Fail", "x", source)}
    view = fleet.profile_view([profile("zeta"), profile("gpu", record=record, **ready)], NOW)
    assert output.render(view, None)[0].splitlines() == [
        "NAME   NODES   CHECKS   READY     ADMISSIBLE   ELIGIBLE   CERTIFIED   AGE",
        "gpu    2       2        True      Unknown      3          1           2h",
        "zeta   2       2        Unknown   Unknown      <none>     0           2h",
    ]
    wide = output.render(view, "wide", no_headers=True)[0].splitlines()
    assert wide[0].split()[-4:] == ["signal-scripts/scripts", source, "24h", "SourceVerified"]
    broken = profile("broken")
    broken["status"]["certifiedNodes"] = "not a record"
    assert fleet.certified_count(broken) == "?"


def test_get_nodes_view_reads_signals_record_not_the_node_labels() -> None:
    source = profile()["spec"]["source"]["digest"]
    record = {
        "fresh": entry("u-fresh", "Pass", "2026-11-30T11:00:00Z", source),
        "old": entry("u-old", "Pass", "2026-11-28T11:00:00Z", source),
        "suite": entry("u-suite", "Fail", "2026-11-30T11:00:00Z", "sha256:" + "0" * 64),
        "replaced": entry("u-before", "Pass", "2026-11-30T11:00:00Z", source),
    }
    reservation = json.dumps({"run": "r9", "namespace": "signal-system"})
    nodes = [
        node("fresh", "u-fresh", labels={keys.certified_label("gpu"): "Pass", keys.CERTIFY_LABEL: "gpu"}),
        node("old", "u-old"),
        node(
            "suite",
            "u-suite",
            labels={keys.RESERVED_BY_LABEL: "ru9"},
            annotations={keys.RESERVATION_ANNOTATION: reservation},
            reserved_by="ru9",
        ),
        # The label alone (a kubelet can write it) holds nothing, as for the controller.
        node(
            "labelonly",
            "u-l",
            labels={keys.RESERVED_BY_LABEL: "ru9"},
            annotations={keys.RESERVATION_ANNOTATION: reservation},
        ),
        node("replaced", "u-now", labels={keys.certified_label("gpu"): "Pass"}),
        node("forged", "u-forged", labels={keys.certified_label("gpu"): "Pass"}),
    ]
    view = fleet.node_view(nodes, [profile(record=record)], NOW)
    assert output.render(view, None)[0].splitlines() == [
        "NODE        PROFILE   RESULT   FRESH   HELD               AGE",
        "forged      gpu       <none>   -       -                  -",
        "fresh       gpu       Pass     fresh   -                  60m",
        "labelonly   gpu       <none>   -       -                  -",
        "old         gpu       Pass     stale   -                  2d",
        "replaced    gpu       <none>   -       -                  -",
        "suite       gpu       Fail     stale   signal-system/r9   60m",
    ]
    wide = {line.split()[0]: line.split()[6:] for line in output.render(view, "wide", no_headers=True)[0].splitlines()}
    assert wide["fresh"] == ["signal-system/r1", "yes", "Pass", "sha256:" + "e" * 64]
    assert wide["forged"] == ["-", "no", "Pass", "-"]  # the Node's own label, beside no record
    items = {i["node"]: i for i in json.loads(output.render(view, "json")[0])["items"]}
    assert items["old"]["staleReasons"] == ["completed 2d ago, freshness 24h"]
    assert items["suite"]["staleReasons"][0].startswith("the suite changed since")
    assert items["fresh"]["fresh"] is True
    assert items["forged"]["fresh"] is None
    assert output.render(view, "name")[0].splitlines() == [
        "node/forged",
        "node/fresh",
        "node/labelonly",
        "node/old",
        "node/replaced",
        "node/suite",
    ]


def test_get_nodes_view_with_an_unreadable_record_and_with_no_profile() -> None:
    broken = profile()
    broken["status"]["certifiedNodes"] = "garbage"
    rows = output.render(fleet.node_view([node("n1", "u1")], [broken], NOW), None, no_headers=True)[0]
    assert rows.split() == ["n1", "gpu", "<unreadable>", "-", "-", "-"]
    rows = output.render(fleet.node_view([node("n1", "u1")], [], NOW), None, no_headers=True)[0]
    assert rows.split() == ["n1", "<none>", "<none>", "-", "-", "-"]


def test_dry_run_gives_the_controllers_own_reason_per_node() -> None:
    body = profile()
    parsed = CertificationProfile.model_validate(body)
    pool = {"pool": "gpu"}
    reservation = {keys.RESERVED_BY_LABEL: "ru9", **pool}
    nodes = {
        "ok": node("ok", "u1", labels=pool),
        "other": node("other", "u2", labels={"pool": "cpu"}),
        "held": node("held", "u3", labels=pool),
        "reserved": node("reserved", "u4", labels=reservation, reserved_by="ru9"),
        "absent": None,
    }
    results = dryrun.explain_nodes(parsed, nodes, {"held"}, force=False)
    by_node = {r["node"]: r for r in results}
    assert [r["node"] for r in results] == list(nodes)
    assert by_node["ok"] == {"node": "ok", "eligible": True, "reason": None, "requestRefused": None}
    assert by_node["other"]["reason"] == "selector does not match"
    assert by_node["held"]["reason"] == "held by an admission in progress"
    assert by_node["reserved"]["reason"] == "reserved by Run ru9"
    assert by_node["reserved"]["requestRefused"].startswith("Node reserved is reserved by the Run with uid ru9")
    assert by_node["absent"]["reason"] == dryrun.NOT_FOUND
    forced = {r["node"]: r for r in dryrun.explain_nodes(parsed, nodes, set(), force=True)}
    assert forced["reserved"]["requestRefused"] is None
    table = output.render(dryrun.view(results, "gpu", 2), None)[0].splitlines()
    assert table[0].split() == ["NODE", "ELIGIBLE", "REASON"]
    assert table[1].split() == ["ok", "yes", "-"]
    assert table[2].split()[:2] == ["other", "no"]


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_machine_forms_stay_valid_and_terminal_safe_with_what_a_kubelet_wrote(form: str) -> None:
    hostile = "ok\x1b]52;c;ZXZpbA==\x07 \x85 \u202e é"
    view = output.View("node", [{"metadata": {"name": "n"}, "note": hostile}], single=True)
    text, _ = output.render(view, form)
    assert escape_controls(text) == text  # nothing left for the terminal to act on
    load = json.loads if form == "json" else yaml.safe_load
    assert load(text)["note"] == hostile  # and the value is intact
