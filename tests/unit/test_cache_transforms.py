"""Issue 47 goal 1: the controller's caches keep only what it reads (shared/cachetransform.py,
controller/rules/runview.py ``cached_form``). A field a transform drops cannot be read from the cache:
reading it raises, so a reader added later fails here or in its own tests instead of deciding
on a missing value; and what the controller builds from a cached Run is what it builds from the
whole object."""

import copy
import json
from typing import Any

import pytest

from controller.rules.manifests import (
    owner_reference,
    release_patch,
    reservation_patch,
    snapshot_manifest,
    workflow_manifest,
)
from controller.rules.nodes import node_view
from controller.rules.runview import PARTICIPANT_DROPPED, run_view
from shared import keys, quarantine
from shared.cachetransform import DroppedField, pruned, shared_mapping

Obj = dict[str, Any]
RESOURCES = {"cpu": "96", "memory": "1Ti", keys.GPU_RESOURCE: "8", "pods": "110"}
ADOPTED = {"cordon": True, "taints": [{"key": "maintenance", "value": "x", "effect": "NoSchedule"}]}


def run() -> Obj:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.RUN_KIND,
        "metadata": {"name": "r1", "namespace": "signal", "uid": "u-1", "resourceVersion": "7", "generation": 1},
        "spec": {
            "profile": {"name": "p", "uid": "p-1", "generation": 1},
            "participants": [
                {
                    "index": i,
                    "nodeName": f"n{i}",
                    "nodeUID": f"nu{i}",
                    "capacity": dict(RESOURCES),
                    "allocatable": dict(RESOURCES),
                    **({"adopted": copy.deepcopy(ADOPTED)} if i == 0 else {}),
                }
                for i in range(3)
            ],
            "checks": [{"name": "inventory", "scriptKey": "inventory.sh", "backend": "Pod"}],
            "source": {"digest": "sha256:" + "a" * 64, "snapshotConfigMap": "r1-scripts"},
            "suiteDeadlineSeconds": 600,
        },
        "status": {"phase": "Running"},
    }


def test_a_pruned_mapping_refuses_to_answer_for_what_it_dropped() -> None:
    entry = pruned({"index": 0, "capacity": {"cpu": "1"}}, ("capacity",), "spec.participants[]")
    assert entry == {"index": 0}
    assert json.dumps(entry) == '{"index": 0}'
    for read in (lambda: entry["capacity"], lambda: entry.get("capacity"), lambda: "capacity" in entry):
        with pytest.raises(DroppedField, match=r"spec\.participants\[\]\.capacity is not kept by the cache"):
            read()
    assert entry.get("missing", 1) == 1, "a key never there is absent, as in a dict"
    with pytest.raises(DroppedField):
        copy.deepcopy(entry).get("capacity")


def test_the_run_cache_drops_the_participants_resources_and_keeps_the_rest() -> None:
    body = run()
    original = copy.deepcopy(body)
    view = run_view(body)
    assert view.problem is None
    assert body == original, "the object it was parsed from is untouched"
    entries = view.raw["spec"]["participants"]
    assert [(p["index"], p["nodeName"], p["nodeUID"]) for p in entries] == [(i, f"n{i}", f"nu{i}") for i in range(3)]
    assert entries[0]["adopted"] == ADOPTED
    for entry in entries:
        assert dict(entry).keys().isdisjoint(PARTICIPANT_DROPPED)
        for field in PARTICIPANT_DROPPED:
            with pytest.raises(DroppedField):
                entry.get(field)
    assert "managedFields" not in view.raw["metadata"]
    # Parsing a cached Run again (the loop does, clearing a condition) keeps the guard.
    again = run_view({**view.raw, "status": {"phase": "Running", "conditions": []}})
    with pytest.raises(DroppedField):
        again.raw["spec"]["participants"][1]["capacity"]


def test_what_the_controller_builds_from_a_cached_run_is_what_it_builds_from_the_whole_run() -> None:
    body = run()
    cached = run_view(body).raw
    assert workflow_manifest(cached, "i") == workflow_manifest(body, "i")
    source = {"metadata": {"name": "scripts"}, "data": {"inventory.sh": "exit 0"}}
    assert snapshot_manifest(cached, source) == snapshot_manifest(body, source)
    assert owner_reference(cached) == owner_reference(body)
    node = {
        "metadata": {"name": "n0", "resourceVersion": "3", "labels": {keys.RESERVED_BY_LABEL: "u-1"}},
        "spec": {"taints": [{"key": keys.RESERVED_TAINT_KEY, "value": "u-1", "effect": "NoSchedule"}]},
    }
    assert reservation_patch(node, cached, 0) == reservation_patch(node, body, 0)
    lift_cached, lift_whole = cached["spec"]["participants"][0], body["spec"]["participants"][0]
    assert (
        quarantine.recorded(lift_cached)
        == quarantine.recorded(lift_whole)
        == (True, [("maintenance", "x", "NoSchedule")])
    )
    assert release_patch(node, "u-1", lift=lift_cached) == release_patch(node, "u-1", lift=lift_whole)


def test_shared_mappings_are_one_read_only_object_per_content() -> None:
    first = shared_mapping([("cpu", "4"), ("memory", "4")])
    assert first is shared_mapping([("cpu", "4"), ("memory", "4")])
    assert first == {"cpu": "4", "memory": "4"}
    with pytest.raises(TypeError):
        first["cpu"] = "0"  # type: ignore[index]


def test_a_node_whose_resources_are_not_text_is_still_read_and_they_cannot_satisfy_a_request() -> None:
    node = {
        "metadata": {"name": "odd", "uid": "u", "resourceVersion": "1"},
        "status": {"allocatable": {"cpu": {"not": "text"}, "memory": "4"}, "capacity": {"pods": ["x"]}},
    }
    view = node_view(node)
    assert dict(view.allocatable) == {"memory": 4}
    assert dict(view.allocatable_raw) == {"cpu": "{'not': 'text'}", "memory": "4"}
    assert dict(view.capacity_raw) == {"pods": "['x']"}
    usual = node_view({"metadata": {"name": "n"}, "status": {"allocatable": {"memory": "4"}}})
    assert (
        usual.allocatable_raw
        is node_view({"metadata": {"name": "m"}, "status": {"allocatable": {"memory": "4"}}}).allocatable_raw
    )
