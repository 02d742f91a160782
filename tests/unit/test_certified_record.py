"""The authoritative certified-nodes record (shared/certified.py) and the re-assertion of a
Node's copy from it (controller/rules/projection.reassert_patches): issue 12, item 6. Pure."""

import base64
import gzip
import json
from typing import Any

import pytest

from controller.rules.nodes import node_view
from controller.rules.projection import expected_copy, node_copy, reassert_patches
from shared import certified, keys
from tests.unit.node_builders import make_node

PROFILE = "gpu-basic"
KEY = keys.certified_label(PROFILE)
TRUSTED = certified.trusted_label(PROFILE)


def entry(
    verdict: str = "Fail", node_uid: str = "nu-1", run_uid: str = "r-1", created: str = "2026-11-30T00:00:00Z"
) -> dict[str, str]:
    return {
        "verdict": verdict,
        "run": "r",
        "namespace": "signal-system",
        "runUID": run_uid,
        "runCreated": created,
        "completionTime": "2026-11-30T01:00:00Z",
        "evidenceDigest": "sha256:" + "a" * 64,
        "sourceDigest": "sha256:" + "b" * 64,
        "profileGeneration": "1",
        "nodeUID": node_uid,
    }


# -- the record ----------------------------------------------------------------------------------


def test_record_round_trips_and_is_canonical() -> None:
    nodes = {"n1": entry(), "n0": entry("Pass", "nu-0")}
    text = certified.encode(nodes)
    assert certified.decode(text) == nodes
    assert certified.encode(dict(reversed(list(nodes.items())))) == text
    assert certified.decode(None) == {}
    assert certified.decode("") == {}


def _stored(document: object) -> str:
    return base64.b64encode(gzip.compress(json.dumps(document).encode())).decode()


@pytest.mark.parametrize(
    "text",
    [
        "not base64!",
        base64.b64encode(b"not gzip").decode(),
        _stored([]),
        _stored({"schema": "other/v1", "nodes": {}}),
        _stored({"schema": certified.RECORD_SCHEMA, "nodes": []}),
        _stored({"schema": certified.RECORD_SCHEMA, "nodes": {"n": {"verdict": "Pass"}}}),
        _stored({"schema": certified.RECORD_SCHEMA, "nodes": {"n": {**entry(), "verdict": "Certified"}}}),
        _stored({"schema": certified.RECORD_SCHEMA, "nodes": {"n": {**entry(), "extra": "x"}}}),
        _stored({"schema": certified.RECORD_SCHEMA, "nodes": {"n": {**entry(), "nodeUID": 7}}}),
    ],
    ids=["base64", "gzip", "array", "schema", "nodes-array", "short-entry", "verdict", "extra-field", "non-string"],
)
def test_a_malformed_record_is_refused(text: str) -> None:
    with pytest.raises(certified.RecordError):
        certified.decode(text)


def test_merging_a_run_is_monotonic_and_replaces_a_replaced_node() -> None:
    old = {"n0": entry("Pass", run_uid="r-2", created="2026-11-30T02:00:00Z")}
    older = {"n0": entry("Fail", run_uid="r-1", created="2026-11-30T00:00:00Z")}
    assert certified.with_run(old, older) is None  # an older Run never replaces a newer one
    newer = {"n0": entry("Fail", run_uid="r-3", created="2026-11-30T03:00:00Z")}
    assert certified.with_run(old, newer) == newer
    assert certified.with_run(old, old) is None  # repeating is a no-op
    replaced = {"n0": entry("Fail", node_uid="nu-other", run_uid="r-0", created="2026-11-29T00:00:00Z")}
    assert certified.with_run(old, replaced) == replaced  # a new Node with the old name
    both = certified.with_run(old, {"n1": entry()})
    assert both is not None
    assert set(both) == {"n0", "n1"}


def test_current_needs_the_same_node_uid() -> None:
    nodes = {"n0": entry(node_uid="nu-0")}
    assert certified.current(nodes, "n0", "nu-0") == nodes["n0"]
    assert certified.current(nodes, "n0", "nu-new") is None
    assert certified.current(nodes, "n1", "nu-0") is None


@pytest.mark.parametrize(
    ("profile", "name"),
    [
        ("gpu-basic", "signal-gpu-basic"),
        ("a" * 56, "signal-" + "a" * 56),
        ("a" * 57, None),
        ("b" * 63, None),
    ],
)
def test_trusted_label_fits_a_label_name(profile: str, name: str | None) -> None:
    label = certified.trusted_label(profile)
    assert label.startswith("node-restriction.kubernetes.io/")
    short = label.split("/", 1)[1]
    assert len(short) <= 63
    if name is not None:
        assert short == name
    else:
        assert short.startswith("signal-" + profile[:45] + "-")
        assert certified.trusted_label(profile) == label
        assert certified.trusted_label(profile[:-1] + "c") != label


# -- re-assertion ----------------------------------------------------------------------------------


def forged() -> dict[str, Any]:
    return (
        make_node("n0")
        .label(KEY, "Pass")
        .annotation(KEY, json.dumps({"verdict": "Pass", "completionTime": "2999-01-01T00:00:00Z"}))
        .build()
    )


def test_a_forged_pass_without_a_record_is_removed() -> None:
    node = forged()
    meta, status, differs = reassert_patches(PROFILE, None, node_copy(node), "7")
    assert differs == [f"annotation:{KEY}", f"label:{KEY}"]
    assert meta == {"metadata": {"resourceVersion": "7", "labels": {KEY: None}, "annotations": {KEY: None}}}
    assert status is None


def test_a_forged_pass_over_a_fail_record_is_rewritten_with_the_condition() -> None:
    node = forged()
    node["status"] = {"conditions": [{"type": KEY, "status": "True", "reason": "Pass", "message": "trust me"}]}
    record = entry("Fail")
    meta, status, differs = reassert_patches(PROFILE, record, node_copy(node), "9")
    failed = keys.failed_condition(PROFILE)
    assert set(differs) == {
        f"label:{KEY}",
        f"label:{TRUSTED}",
        f"annotation:{KEY}",
        f"condition:{KEY}",
        f"condition:{failed}",  # the remediator's condition (issue 43, item 3), missing here
    }
    assert meta is not None
    assert meta["metadata"]["labels"] == {KEY: "Fail", TRUSTED: "Fail"}
    assert json.loads(meta["metadata"]["annotations"][KEY])["completionTime"] == "2026-11-30T01:00:00Z"
    assert "nodeUID" not in json.loads(meta["metadata"]["annotations"][KEY])
    assert status is not None
    condition, failing = status["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (KEY, "False", "Fail")
    assert (failing["type"], failing["status"], failing["reason"]) == (failed, "True", "CertificationFailed")


def test_a_condition_without_a_record_is_deleted() -> None:
    node = make_node("n0").build()
    node["status"] = {"conditions": [{"type": KEY, "status": "True", "reason": "Pass", "message": "x"}]}
    meta, status, differs = reassert_patches(PROFILE, None, node_copy(node), "1")
    assert meta is None
    assert status == {"status": {"conditions": [{"type": KEY, "$patch": "delete"}]}}
    assert differs == [f"condition:{KEY}"]


def test_a_node_that_matches_its_record_is_left_alone() -> None:
    record = entry("Pass")
    copy = {k: v for k, v in expected_copy(PROFILE, record).items() if v is not None}
    assert reassert_patches(PROFILE, record, copy, "1") == (None, None, [])
    assert reassert_patches(PROFILE, None, {}, "1") == (None, None, [])
    # Other profiles' keys and unrelated labels are not this profile's business.
    other = {f"label:{keys.certified_label('other')}": "Pass", "label:pool": "gpu"}
    assert reassert_patches(PROFILE, None, other, "1") == (None, None, [])


def test_the_node_view_keeps_the_projection_keys_only() -> None:
    node = forged()
    node["metadata"]["labels"]["pool"] = "gpu"
    node["metadata"]["labels"][TRUSTED] = "Pass"
    view = node_view(node)
    assert dict(view.projection) == {
        f"label:{KEY}": "Pass",
        f"label:{TRUSTED}": "Pass",
        f"annotation:{KEY}": node["metadata"]["annotations"][KEY],
    }
