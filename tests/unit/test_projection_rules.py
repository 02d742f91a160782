"""Projection rules (controller/rules/projection.py), pure: the detail recorded on a Node, reading
it back, the monotonic ordering (``supersedes``), the merge patch (idempotent, conditioned on
the resourceVersion) and the Node condition. No cluster, no API mocks."""

import copy
import json
from typing import Any

import pytest

from controller.rules.projection import detail, node_condition, projection_patch, recorded, supersedes
from shared import certified, keys
from tests.builders import SCRIPTS_DIGEST, run_manifest
from tests.unit.node_builders import make_node

Obj = dict[str, Any]
PROFILE = "gpu-basic"
KEY = keys.certified_label(PROFILE)
TRUSTED = certified.trusted_label(PROFILE)
DIGEST = "sha256:" + "e" * 64


def make_run(name: str = "r1", uid: str = "uid-r1", created: str = "2026-11-30T00:00:00Z") -> Obj:
    run = run_manifest(name)
    run["metadata"].update(namespace="signal", uid=uid, creationTimestamp=created)
    run["spec"]["profile"]["generation"] = 4
    return run


def new_detail(
    verdict: str = "Pass", *, uid: str = "uid-r1", created: str = "2026-11-30T00:00:00Z", completed: str = "c"
) -> dict[str, str]:
    return detail(make_run(uid=uid, created=created), verdict, DIGEST, completed)


def node_with(annotation: str | None = None, label: str | None = None, rv: str = "41") -> Obj:
    builder = make_node("gpu-000").resource_version(rv)
    if annotation is not None:
        builder.annotation(KEY, annotation)
    if label is not None:
        builder.label(KEY, label)
    return builder.build()


def encoded(value: dict[str, str]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def merge(target: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386), as the API server applies it."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


# -- detail / recorded ----------------------------------------------------------------------------


def test_detail_records_the_run_and_the_suite_identity() -> None:
    run = make_run()
    assert detail(run, "Fail", DIGEST, "2026-11-30T01:00:00Z") == {
        "verdict": "Fail",
        "run": "r1",
        "namespace": "signal",
        "runUID": "uid-r1",
        "runCreated": "2026-11-30T00:00:00Z",
        "completionTime": "2026-11-30T01:00:00Z",
        "evidenceDigest": DIGEST,
        "sourceDigest": SCRIPTS_DIGEST,
        "profileGeneration": "4",
    }


def test_detail_values_are_all_strings() -> None:
    assert all(isinstance(v, str) for v in new_detail().values())


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (None, None),
        ("", None),
        ("not json", None),
        ("[1, 2]", None),
        ('"a string"', None),
        ("null", None),
        ('{"runUID": "x"}', {"runUID": "x"}),
    ],
    ids=["absent", "empty", "garbled", "list", "string", "null", "object"],
)
def test_recorded(annotation: str | None, expected: Obj | None) -> None:
    assert recorded(node_with(annotation), PROFILE) == expected


def test_recorded_reads_only_its_profile() -> None:
    node = make_node("n").annotation(keys.certified_label("other"), encoded(new_detail())).build()
    assert recorded(node, PROFILE) is None
    assert recorded(node, "other") == new_detail()


def test_recorded_round_trips_the_projected_detail() -> None:
    new = new_detail()
    patch = projection_patch(node_with(), PROFILE, new)
    assert patch is not None
    assert recorded(merge(node_with(), patch), PROFILE) == new


# -- supersedes ------------------------------------------------------------------------------------

T0 = "2026-11-30T00:00:00Z"
T1 = "2026-11-30T00:00:01Z"
LATER_DAY = "2026-12-01T00:00:00Z"


@pytest.mark.parametrize(
    ("new", "old", "expected"),
    [
        pytest.param(new_detail(created=T1, uid="b"), None, True, id="nothing-recorded"),
        pytest.param(new_detail(created=T1, uid="b"), new_detail(created=T0, uid="a"), True, id="newer-replaces"),
        pytest.param(new_detail(created=LATER_DAY, uid="b"), new_detail(created=T1, uid="a"), True, id="newer-day"),
        pytest.param(new_detail(created=T0, uid="a"), new_detail(created=T1, uid="b"), False, id="older-never"),
        pytest.param(new_detail(created=T0, uid="b"), new_detail(created=T0, uid="a"), False, id="same-second"),
        pytest.param(
            new_detail("Fail", created=T0, uid="a"), new_detail("Pass", created=T0, uid="a"), True, id="same-run"
        ),
        pytest.param(
            new_detail(created=T0, uid="a"), new_detail(created=LATER_DAY, uid="a"), True, id="same-run-repairs"
        ),
        pytest.param(new_detail(created=T0, uid="b"), {"verdict": "Pass"}, True, id="old-without-fields"),
        pytest.param(new_detail(created=T0, uid="b"), {"runUID": "a", "runCreated": ""}, True, id="old-empty-time"),
        pytest.param(new_detail(created=T0, uid="b"), {}, True, id="old-empty-object"),
    ],
)
def test_supersedes(new: dict[str, str], old: dict[str, str] | None, expected: bool) -> None:
    assert supersedes(new, old) is expected


def test_supersedes_is_antisymmetric_between_different_runs() -> None:
    times = [T0, T1, LATER_DAY]
    for i, a in enumerate(times):
        for j, b in enumerate(times):
            x, y = new_detail(created=a, uid="x"), new_detail(created=b, uid="y")
            assert supersedes(x, y) == (i > j)
            assert not (supersedes(x, y) and supersedes(y, x))


@pytest.mark.parametrize("garbled", [None, 5, ["2026"]], ids=["null", "number", "list"])
def test_garbled_recorded_time_is_replaced(garbled: Any) -> None:
    old = {"runUID": "other", "runCreated": garbled}
    node = node_with(json.dumps(old), label="Pass")
    assert supersedes(new_detail(), old) is True
    assert projection_patch(node, PROFILE, new_detail()) is not None


# -- projection_patch ---------------------------------------------------------------------------


def test_patch_on_a_fresh_node() -> None:
    new = new_detail("Fail")
    assert projection_patch(node_with(rv="77"), PROFILE, new) == {
        "metadata": {
            "resourceVersion": "77",
            "labels": {KEY: "Fail", TRUSTED: "Fail"},
            "annotations": {KEY: encoded(new)},
        }
    }


@pytest.mark.parametrize("verdict", ["Pass", "Fail", "Inconclusive"])
def test_patch_is_idempotent(verdict: str) -> None:
    new = new_detail(verdict)
    node = node_with()
    patch = projection_patch(node, PROFILE, new)
    assert patch is not None
    applied = merge(node, patch)
    assert applied["metadata"]["labels"][KEY] == verdict
    assert projection_patch(applied, PROFILE, new) is None
    # Also after the server bumps the resourceVersion.
    applied["metadata"]["resourceVersion"] = "42"
    assert projection_patch(applied, PROFILE, new) is None


def test_patch_keeps_other_labels_and_profiles() -> None:
    node = make_node("n").label("pool", "gpu").label(keys.certified_label("other"), "Fail").build()
    patch = projection_patch(node, PROFILE, new_detail())
    assert patch is not None
    assert set(patch["metadata"]["labels"]) == {KEY, TRUSTED}
    assert set(patch["metadata"]["annotations"]) == {KEY}
    applied = merge(node, patch)
    assert applied["metadata"]["labels"]["pool"] == "gpu"
    assert applied["metadata"]["labels"][keys.certified_label("other")] == "Fail"


@pytest.mark.parametrize("rv", ["1", "12345", "999999999"])
def test_patch_carries_the_resource_version_precondition(rv: str) -> None:
    patch = projection_patch(node_with(rv=rv), PROFILE, new_detail())
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == rv


def test_older_run_never_overwrites_a_newer_one() -> None:
    newer = new_detail("Fail", uid="new", created=T1)
    node = node_with(encoded(newer), label="Fail")
    assert projection_patch(node, PROFILE, new_detail("Pass", uid="old", created=T0), on_record=newer) is None


def test_same_second_other_run_does_not_overwrite() -> None:
    recorded_run = new_detail("Fail", uid="a", created=T0)
    node = node_with(encoded(recorded_run), label="Fail")
    assert projection_patch(node, PROFILE, new_detail("Pass", uid="b", created=T0), on_record=recorded_run) is None


def test_the_nodes_own_claim_of_a_newer_result_holds_nothing_off() -> None:
    """Issue 42, Low: the order is the record's. A kubelet's far-future annotation (another Run,
    created in 2999) used to hold the real result off until the next re-assertion."""
    forged = new_detail("Pass", uid="forged", created="2999-01-01T00:00:00Z")
    real = new_detail("Fail", uid="real", created=T1)
    node = node_with(encoded(forged), label="Pass")
    no_record = projection_patch(node, PROFILE, real)
    assert no_record is not None, "the Node's own annotation held the real result off"
    assert no_record["metadata"]["labels"] == {KEY: "Fail", TRUSTED: "Fail"}
    assert projection_patch(node, PROFILE, real, on_record=real) == no_record


def test_newer_run_overwrites() -> None:
    node = node_with(encoded(new_detail("Fail", uid="a", created=T0)), label="Fail")
    new = new_detail("Pass", uid="b", created=T1)
    patch = projection_patch(node, PROFILE, new)
    assert patch is not None
    assert patch["metadata"]["labels"] == {KEY: "Pass", TRUSTED: "Pass"}
    assert json.loads(patch["metadata"]["annotations"][KEY]) == new


@pytest.mark.parametrize(
    ("label", "annotation_of"),
    [
        (None, "same"),  # the label was removed
        ("Pass", "same"),  # the label was edited (the annotation says Fail)
        ("Fail", None),  # the annotation was removed
        ("Fail", "edited"),  # the annotation was edited
    ],
)
def test_same_run_repairs_an_edited_projection(label: str | None, annotation_of: str | None) -> None:
    new = new_detail("Fail")
    annotation = None
    if annotation_of == "same":
        annotation = encoded(new)
    elif annotation_of == "edited":
        annotation = encoded({**new, "evidenceDigest": "sha256:" + "0" * 64})
    patch = projection_patch(node_with(annotation, label), PROFILE, new)
    assert patch == {
        "metadata": {
            "resourceVersion": "41",
            "labels": {KEY: "Fail", TRUSTED: "Fail"},
            "annotations": {KEY: encoded(new)},
        }
    }


def test_same_run_with_unsorted_annotation_is_rewritten_canonically() -> None:
    new = new_detail()
    loose = json.dumps(new, indent=1)
    patch = projection_patch(node_with(loose, "Pass"), PROFILE, new)
    assert patch is not None
    assert patch["metadata"]["annotations"][KEY] == encoded(new)


@pytest.mark.parametrize("garbled", ["not json", "", "[]", '"text"', "{", "null"])
def test_garbled_annotation_is_replaced(garbled: str) -> None:
    new = new_detail("Inconclusive")
    patch = projection_patch(node_with(garbled, label="Pass"), PROFILE, new)
    assert patch is not None
    assert patch["metadata"]["labels"] == {KEY: "Inconclusive", TRUSTED: "Inconclusive"}
    assert patch["metadata"]["annotations"] == {KEY: encoded(new)}


def test_label_without_annotation_is_replaced() -> None:
    """A result label nobody can attribute (no detail) is not a newer result."""
    patch = projection_patch(node_with(label="Pass"), PROFILE, new_detail("Fail"))
    assert patch is not None
    assert patch["metadata"]["labels"] == {KEY: "Fail", TRUSTED: "Fail"}


def test_monotonic_sequence_keeps_the_newest() -> None:
    """Applying results out of order leaves the newest Run's result."""
    results = [
        new_detail("Pass", uid="r3", created="2026-11-30T03:00:00Z"),
        new_detail("Fail", uid="r1", created="2026-11-30T01:00:00Z"),
        new_detail("Inconclusive", uid="r2", created="2026-11-30T02:00:00Z"),
        new_detail("Fail", uid="r3-twin", created="2026-11-30T03:00:00Z"),
    ]
    node = node_with()
    record: dict[str, dict[str, str]] = {}
    for new in results:  # as acceptance does: the record first, then the projection decided on it
        record = certified.with_run(record, {"n": new | {"nodeUID": "uid-n"}}) or record
        patch = projection_patch(node, PROFILE, new, on_record=record["n"])
        if patch is not None:
            node = merge(node, patch)
    assert node["metadata"]["labels"][KEY] == "Pass"
    assert recorded(node, PROFILE) == results[0]


# -- node_condition ----------------------------------------------------------------------------


@pytest.mark.parametrize(("verdict", "status"), [("Pass", "True"), ("Fail", "False"), ("Inconclusive", "False")])
def test_node_condition(verdict: str, status: str) -> None:
    new = new_detail(verdict, completed="2026-11-30T01:02:03Z")
    assert node_condition(PROFILE, new) == {
        "type": KEY,
        "status": status,
        "reason": verdict,
        "message": f"Run signal/r1 (uid-r1) completed 2026-11-30T01:02:03Z; evidence {DIGEST}",
        "lastTransitionTime": "2026-11-30T01:02:03Z",
        "lastHeartbeatTime": "2026-11-30T01:02:03Z",
    }


@pytest.mark.parametrize("verdict", ["pass", "PASS", "Passed", "", "True"])
def test_node_condition_is_true_only_for_the_exact_pass_verdict(verdict: str) -> None:
    assert node_condition(PROFILE, new_detail(verdict))["status"] == "False"
