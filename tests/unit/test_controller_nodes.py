"""controller/rules/nodes.py: parsing raw Node JSON into a NodeView, and the reservation."""

import json
from typing import Any

import pytest

from controller.rules.nodes import (
    RESERVED_TAINT_KEY,
    UNSCHEDULABLE_TAINT_KEY,
    Reservation,
    node_view,
    parse_reservation,
)
from shared import keys
from tests.unit.node_builders import NodeBuilder, make_node

# -- Ready ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "ready"),
    [
        pytest.param(make_node("n"), True, id="fresh node from the builder is Ready"),
        pytest.param(make_node("n").ready(False), False, id="Ready=False is not ready"),
        pytest.param(make_node("n").ready("Unknown"), False, id="Ready=Unknown (kubelet silent) is not ready"),
        pytest.param(make_node("n").conditions(None), False, id="conditions null is not ready"),
        pytest.param(make_node("n").conditions([]), False, id="no conditions at all is not ready"),
        pytest.param(
            make_node("n").conditions([{"type": "MemoryPressure", "status": "True"}]),
            False,
            id="only another condition True is not ready",
        ),
        pytest.param(
            make_node("n").conditions(
                [{"type": "DiskPressure", "status": "False"}, {"type": "Ready", "status": "True"}]
            ),
            True,
            id="Ready=True among other conditions",
        ),
        pytest.param(
            make_node("n").conditions([{"type": "Ready", "status": "true"}]),
            False,
            id="status is case-sensitive: lower-case true is not ready",
        ),
        pytest.param(make_node("n").conditions([{"type": "Ready"}]), False, id="Ready without status"),
    ],
)
def test_ready(node: NodeBuilder, ready: bool) -> None:
    assert node.view().ready is ready


def test_missing_status_and_spec_parse_as_not_ready_and_empty() -> None:
    view = node_view({"metadata": {"name": "bare"}})
    assert view.name == "bare"
    assert view.uid == ""
    assert view.resource_version == ""
    assert view.ready is False
    assert view.unschedulable is False
    assert dict(view.allocatable) == {}
    assert dict(view.capacity_raw) == {}
    assert view.reservation is None
    assert view.signal_taint_uid is None


def test_null_spec_and_status_are_tolerated() -> None:
    view = node_view({"metadata": {"name": "n", "labels": None, "annotations": None}, "spec": None, "status": None})
    assert view.ready is False
    assert dict(view.labels) == {}
    assert view.reservation is None


def test_identity_fields() -> None:
    view = make_node("gpu-7").uid("u-7").resource_version("42").label("a", "b").view()
    assert (view.name, view.uid, view.resource_version) == ("gpu-7", "u-7", "42")
    assert dict(view.labels) == {"a": "b"}


# -- cordons: someone else's vs Signal's own ------------------------------------------


@pytest.mark.parametrize(
    ("node", "unschedulable", "signal_taint_uid"),
    [
        pytest.param(make_node("n"), False, None, id="no cordon, no taint"),
        pytest.param(make_node("n").unschedulable(), True, None, id="spec.unschedulable is a foreign cordon"),
        pytest.param(make_node("n").unschedulable(False), False, None, id="spec.unschedulable false is no cordon"),
        pytest.param(make_node("n").cordon_taint(), True, None, id="unschedulable taint alone is a foreign cordon"),
        pytest.param(
            make_node("n").taint(UNSCHEDULABLE_TAINT_KEY, effect="NoExecute"),
            True,
            None,
            id="unschedulable taint with any effect is a foreign cordon",
        ),
        pytest.param(
            make_node("n").signal_taint("run-uid-1"),
            False,
            "run-uid-1",
            id="Signal's reserved taint is not a foreign cordon and names the Run uid",
        ),
        pytest.param(
            make_node("n").taint(RESERVED_TAINT_KEY),
            False,
            "",
            id="Signal's taint without a value still counts as tainted",
        ),
        pytest.param(
            make_node("n").signal_taint("run-uid-1").unschedulable(),
            True,
            "run-uid-1",
            id="operator cordon on top of Signal's taint is seen as both",
        ),
        pytest.param(
            make_node("n").taint("gpu.example/maintenance", "true"),
            False,
            None,
            id="an unrelated operator taint is neither",
        ),
        pytest.param(
            make_node("n").taint("projectsignal.dev/other", "x"),
            False,
            None,
            id="another projectsignal.dev taint is not the reserved taint",
        ),
    ],
)
def test_cordons(node: NodeBuilder, unschedulable: bool, signal_taint_uid: str | None) -> None:
    view = node.view()
    assert view.unschedulable is unschedulable
    assert view.signal_taint_uid == signal_taint_uid
    assert view.signal_tainted is (signal_taint_uid is not None)


def test_first_signal_taint_wins_when_there_are_two() -> None:
    view = make_node("n").signal_taint("first").signal_taint("second").view()
    assert view.signal_taint_uid == "first"


# -- allocatable --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "allocatable"),
    [
        pytest.param({"cpu": "4"}, {"cpu": 4000}, id="cpu whole cores become millicores"),
        pytest.param({"cpu": "3500m"}, {"cpu": 3500}, id="cpu millicores stay millicores"),
        pytest.param({"cpu": "0.25"}, {"cpu": 250}, id="cpu fraction becomes millicores"),
        pytest.param({"memory": "64Gi"}, {"memory": 64 * 2**30}, id="memory in bytes"),
        pytest.param({"memory": "1500M"}, {"memory": 1_500_000_000}, id="memory decimal suffix"),
        pytest.param({keys.GPU_RESOURCE: "8"}, {keys.GPU_RESOURCE: 8}, id="gpus in whole units"),
        pytest.param({"rdma/ib": "1"}, {"rdma/ib": 1}, id="extended resource in whole units"),
        pytest.param({"pods": 110}, {"pods": 110}, id="a JSON number is accepted"),
        pytest.param({"memory": "lots"}, {}, id="an unparseable quantity is ignored"),
        pytest.param(
            {"cpu": "??", keys.GPU_RESOURCE: "8", "memory": "1Gi"},
            {keys.GPU_RESOURCE: 8, "memory": 2**30},
            id="an unparseable quantity does not hide the others",
        ),
        pytest.param({"ephemeral-storage": "10 Gi"}, {}, id="a quantity with a space is ignored"),
        pytest.param({"memory": "1Ei"}, {"memory": 2**60}, id="exbibytes (was a ValueError)"),
        pytest.param({"memory": "2E"}, {"memory": 2 * 10**18}, id="exabytes (was a ValueError)"),
        # What a hostile kubelet may claim (the API server keeps "1e999999" as it is): refused
        # at once, so the Node simply cannot satisfy a request for it.
        pytest.param({"memory": "1e999999", "cpu": "4"}, {"cpu": 4000}, id="a million-digit quantity is ignored"),
        pytest.param({"memory": "1e1000000"}, {}, id="a quantity past Decimal's range is ignored"),
        pytest.param({"memory": "8Ei"}, {}, id="a quantity past 2^63-1 is ignored"),
    ],
)
def test_allocatable(resources: dict[str, Any], allocatable: dict[str, int]) -> None:
    node = make_node("n")
    for name, value in resources.items():
        node.resource(name, value)
    view = node.view()
    assert dict(view.allocatable) == allocatable
    assert dict(view.allocatable_raw) == {k: str(v) for k, v in resources.items()}


def test_capacity_and_allocatable_raw_are_kept_as_strings() -> None:
    view = make_node("n").resource("cpu", "64", capacity="72").resource("pods", 110).view()
    assert dict(view.capacity_raw) == {"cpu": "72", "pods": "110"}
    assert dict(view.allocatable_raw) == {"cpu": "64", "pods": "110"}
    assert dict(view.allocatable) == {"cpu": 64000, "pods": 110}


def test_nodes_sharing_their_resources_text_share_one_read_only_mapping() -> None:
    # Parsing is cached by the resources' text, and views with the same resources share one
    # mapping (issue 47: about 1 KiB per cached Node), read-only so that no view can change
    # another's; the same number under another name is parsed by that name's unit (cpu in
    # millicores).
    first = make_node("a").resource("cpu", "4").resource("memory", "4").view()
    second = make_node("b").resource("cpu", "4").resource("memory", "4").view()
    swapped = make_node("c").resource("memory", "4").resource("cpu", "4").view()
    assert dict(first.allocatable) == dict(second.allocatable) == dict(swapped.allocatable)
    assert dict(first.allocatable) == {"cpu": 4000, "memory": 4}
    assert first.allocatable is second.allocatable
    assert first.allocatable_raw is second.allocatable_raw
    assert first.capacity_raw is second.capacity_raw
    for shared in (first.allocatable, first.allocatable_raw, first.capacity_raw, first.projection, first.completed):
        with pytest.raises(TypeError):
            shared["cpu"] = 0  # type: ignore[index]
    assert second.allocatable["cpu"] == 4000
    assert make_node("d").resource("cpu", "4").resource("memory", "4").view().allocatable["cpu"] == 4000


def test_allocatable_not_capacity_is_parsed() -> None:
    view = make_node("n").resource(keys.GPU_RESOURCE, "7", capacity="8").view()
    assert view.allocatable[keys.GPU_RESOURCE] == 7


# -- reservation --------------------------------------------------------------------------

_DETAIL = {"run": "p-abc-0", "namespace": "signal-system", "uid": "ru-1", "index": 3}


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        pytest.param({}, {}, None, id="no label: not reserved"),
        pytest.param(
            {},
            {keys.RESERVATION_ANNOTATION: json.dumps(_DETAIL)},
            None,
            id="annotation without label: not reserved",
        ),
        pytest.param({keys.RESERVED_BY_LABEL: ""}, {}, None, id="empty label value: not reserved"),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: json.dumps(_DETAIL)},
            Reservation("ru-1", "p-abc-0", "signal-system", 3),
            id="label and full annotation",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {},
            Reservation("ru-1"),
            id="label without annotation: uid only, index -1",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: "{not json"},
            Reservation("ru-1"),
            id="malformed annotation JSON does not crash",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: ""},
            Reservation("ru-1"),
            id="empty annotation does not crash",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: "[1, 2]"},
            Reservation("ru-1"),
            id="annotation that is a JSON list is ignored",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: '"a string"'},
            Reservation("ru-1"),
            id="annotation that is a JSON string is ignored",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: '{"index": "2"}'},
            Reservation("ru-1", index=2),
            id="index as a digit string is accepted",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: '{"index": -1}'},
            Reservation("ru-1", index=-1),
            id="negative index is kept",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: '{"index": "two"}'},
            Reservation("ru-1"),
            id="non-numeric index becomes -1",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: '{"index": 1.5}'},
            Reservation("ru-1"),
            id="fractional index becomes -1",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: '{"index": null}'},
            Reservation("ru-1"),
            id="null index becomes -1",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "ru-1"},
            {keys.RESERVATION_ANNOTATION: '{"index": {"a": 1}}'},
            Reservation("ru-1"),
            id="object index becomes -1",
        ),
        pytest.param(
            {keys.RESERVED_BY_LABEL: "label-uid"},
            {keys.RESERVATION_ANNOTATION: json.dumps({**_DETAIL, "uid": "annotation-uid"})},
            Reservation("label-uid", "p-abc-0", "signal-system", 3),
            id="the label, not the annotation, names the holder",
        ),
    ],
)
def test_parse_reservation(labels: dict[str, str], annotations: dict[str, str], expected: Reservation | None) -> None:
    assert parse_reservation(labels, annotations, labels.get(keys.RESERVED_BY_LABEL)) == expected


@pytest.mark.parametrize(
    "index",
    [pytest.param("--3", id="index with two minus signs"), pytest.param("²", id="index of a superscript digit")],
)
def test_malformed_index_does_not_crash(index: str) -> None:
    annotations = {keys.RESERVATION_ANNOTATION: json.dumps({"index": index})}
    assert parse_reservation({keys.RESERVED_BY_LABEL: "ru-1"}, annotations, "ru-1") == Reservation("ru-1")


@pytest.mark.parametrize(
    ("taint_uid", "expected"),
    [
        pytest.param(None, None, id="no Signal taint: the kubelet-writable label reserves nothing"),
        pytest.param("ru-2", None, id="the taint names another Run"),
        pytest.param("", None, id="an empty taint value"),
        pytest.param("ru-1", Reservation("ru-1", "r", "ns", 0), id="label and taint name the same Run"),
    ],
)
def test_a_reservation_needs_signals_taint(taint_uid: str | None, expected: Reservation | None) -> None:
    annotations = {keys.RESERVATION_ANNOTATION: json.dumps({"run": "r", "namespace": "ns", "index": 0})}
    assert parse_reservation({keys.RESERVED_BY_LABEL: "ru-1"}, annotations, taint_uid) == expected


def test_a_reservation_label_alone_is_stray() -> None:
    forged = make_node("n").reservation_label("ru-9", {"run": "r", "namespace": "elsewhere", "index": 0}).view()
    assert forged.reservation is None
    assert forged.stray_reservation == "ru-9"
    real = make_node("n").reserved_by("ru-9", {"run": "r", "namespace": "ns", "index": 0}).view()
    assert real.stray_reservation is None


def test_node_view_carries_the_reservation() -> None:
    view = make_node("n").reserved_by("ru-9", {"run": "r", "namespace": "ns", "index": 0}).view()
    assert view.reservation == Reservation("ru-9", "r", "ns", 0)


def test_node_view_with_malformed_annotation_does_not_crash() -> None:
    view = make_node("n").reserved_by("ru-9", "}}garbage{{").view()
    assert view.reservation == Reservation("ru-9")


@pytest.mark.parametrize(
    "text",
    ["[" * 2000, '{"index": ' + "9" * 5000 + "}", '{"a": ' * 2000],
    ids=["nested-2000-deep", "5000-digit-index", "nested-objects"],
)
def test_node_view_with_annotations_json_cannot_parse_does_not_crash(text: str) -> None:
    """A Node's kubelet may write any annotation on its own Node: what Python's json cannot
    parse (too deep, too many digits) is malformed like any other text, not an exception that
    keeps the Node out of the cache or stops a reservation pass."""
    key = keys.CERTIFIED_LABEL_PREFIX + "p"
    node = make_node("n").reserved_by("ru-9", text).annotation(key, text)
    view = node.annotation(keys.ATTEMPT_ANNOTATION, "p:" + "9" * 5000).view()
    assert view.reservation == Reservation("ru-9")
    assert dict(view.completed) == {}
    assert view.next_attempt is None


def test_node_view_is_frozen() -> None:
    view = make_node("n").view()
    with pytest.raises(AttributeError):
        view.ready = False  # type: ignore[misc]
