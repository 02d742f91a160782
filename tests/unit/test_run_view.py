"""Issue 13: a Run is parsed once into a typed view (controller/rules/runview.py); a Run the
controller cannot read is marked with the problem, never left out or half read."""

from datetime import UTC, datetime
from typing import Any

import pytest

from controller.rules.runview import ParticipantRef, WorkflowRef, lean, run_view

Obj = dict[str, Any]


def full() -> Obj:
    return {
        "metadata": {
            "name": "r1",
            "namespace": "signal",
            "uid": "u-1",
            "resourceVersion": "42",
            "generation": 2,
            "labels": {"projectsignal.dev/group-hash": "abc"},
        },
        "spec": {
            "profile": {"name": "p", "uid": "p-1", "generation": 3},
            "participants": [
                {"index": 1, "nodeName": "n-b", "nodeUID": "ub"},
                {"index": 0, "nodeName": "n-a", "nodeUID": "ua"},
            ],
            "checks": [{"name": "inventory"}, {"name": "burn-in"}],
            "source": {"digest": "sha256:abc", "snapshotConfigMap": "r1-scripts"},
            "attempt": 2,
            "cancel": True,
            "release": False,
            "suiteDeadlineSeconds": 600,
        },
        "status": {
            "phase": "Running",
            "startTime": "2026-11-30T12:00:00Z",
            "completionTime": "2026-11-30T12:05:00Z",
            "conditions": [{"type": "Admitted", "status": "True"}, {"type": "Released", "status": "False"}],
            "workflow": {"name": "r1", "uid": "wf-1"},
            "workflowResubmits": 2,
        },
    }


def test_every_field_is_read_once() -> None:
    view = run_view(full())
    assert view.problem is None
    assert (view.name, view.namespace, view.uid, view.resource_version, view.generation) == (
        "r1",
        "signal",
        "u-1",
        "42",
        2,
    )
    assert view.labels == {"projectsignal.dev/group-hash": "abc"}
    assert view.participants == (ParticipantRef(0, "n-a", "ua"), ParticipantRef(1, "n-b", "ub")), "in index order"
    assert view.check_names == ("inventory", "burn-in")
    assert (view.source_digest, view.snapshot) == ("sha256:abc", "r1-scripts")
    assert (view.profile_name, view.profile_uid, view.attempt) == ("p", "p-1", 2)
    assert (view.cancel, view.release, view.suite_deadline_seconds) == (True, False, 600)
    assert view.phase == "Running"
    assert not view.terminal
    assert view.start_time == datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert view.workflow == WorkflowRef("r1", "wf-1")
    assert view.workflow_resubmits == 2
    assert view.is_true("Admitted")
    assert not view.is_true("Released")
    assert not view.is_true("Missing")
    assert view.raw["metadata"]["uid"] == "u-1", "the object itself is kept for writes"


def test_a_new_run_has_defaults() -> None:
    view = run_view({"metadata": {"name": "r1", "uid": "u"}, "spec": {"profile": {"name": "p", "uid": "x"}}})
    assert view.problem is None
    assert (view.phase, view.attempt, view.workflow, view.start_time, view.conditions) == ("Pending", 1, None, None, ())
    assert (view.cancel, view.release, view.workflow_resubmits) == (False, False, 0)


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        pytest.param(("status",), "garbage", "status is a str", id="status-not-an-object"),
        pytest.param(("status", "conditions"), {"type": "x"}, "status.conditions", id="conditions-not-a-list"),
        pytest.param(("status", "conditions"), ["x"], "status.conditions", id="condition-not-an-object"),
        pytest.param(("status", "startTime"), "yesterday", "status.startTime", id="start-time-not-a-time"),
        pytest.param(("status", "workflow"), {"name": 7, "uid": "wf"}, "status.workflow", id="workflow-name-not-text"),
        pytest.param(("status", "workflow"), ["wf"], "status.workflow", id="workflow-not-an-object"),
        pytest.param(("status", "workflowResubmits"), "2", "status.workflowResubmits", id="resubmits-not-int"),
        pytest.param(("spec", "attempt"), True, "spec.attempt", id="attempt-a-bool"),
        pytest.param(("spec", "suiteDeadlineSeconds"), None, "suiteDeadlineSeconds", id="running-without-deadline"),
        pytest.param(("spec",), [], "spec is a list", id="spec-not-an-object"),
        pytest.param(("metadata", "labels"), "x", "metadata.labels", id="labels-not-an-object"),
        pytest.param(("spec", "participants"), [{"index": "0"}], "spec.participants", id="participant-index-text"),
        pytest.param(("spec", "participants"), {"n": 1}, "spec.participants", id="participants-not-a-list"),
        pytest.param(("spec", "checks"), [{"script": "x"}], "spec.checks", id="check-without-name"),
    ],
)
def test_a_malformed_run_names_its_problem_and_is_still_viewable(path: tuple[str, ...], value: Any, named: str) -> None:
    obj = full()
    target = obj
    for part in path[:-1]:
        target = target[part]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    view = run_view(obj)
    assert view.problem is not None
    assert named in view.problem
    assert (view.name, view.uid) == ("r1", "u-1"), "still keyed and identifiable, so the loop can end it"


def test_the_kept_object_has_no_managed_fields_and_the_original_is_untouched() -> None:
    body = full()
    managed = [{"manager": "signal-controller", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    body["metadata"]["managedFields"] = managed
    view = run_view(body)
    assert "managedFields" not in view.raw["metadata"]
    assert view.raw["metadata"] == {k: v for k, v in body["metadata"].items() if k != "managedFields"}
    assert view.raw["spec"] == body["spec"], "the same content (a copy: participants are pruned, issue 47)"
    assert body["metadata"]["managedFields"] is managed
    assert lean({"metadata": None}) == {"metadata": None}
    assert lean({"kind": "X"}) == {"kind": "X"}
