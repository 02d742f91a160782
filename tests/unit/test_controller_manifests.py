"""controller/rules/manifests.py: the objects the controller writes (Run, snapshot, Workflow,
Node reservation and release patches), built from plain data."""

import json
import re
from typing import Any

import pytest

from controller.rules.manifests import (
    GROUP_HASH_LABEL,
    WORKFLOW_TEMPLATE,
    group_hash,
    next_ordinal,
    release_patch,
    reservation_patch,
    run_manifest,
    run_name,
    snapshot_manifest,
    snapshot_name,
    suite_deadline_seconds,
    workflow_manifest,
)
from controller.rules.nodes import RESERVED_TAINT_KEY, UNSCHEDULABLE_TAINT_KEY, Reservation, node_view
from shared import keys
from shared.profile import CertificationProfile
from shared.run import CertificationRun
from tests.builders import SCRIPTS_DIGEST, ProfileBuilder
from tests.unit.node_builders import NodeBuilder, make_node, make_profile

PROFILE_UID = "0b0c7f8e-1111-4c4c-9d9d-aaaaaaaaaaaa"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
GPU = keys.GPU_RESOURCE


def _profile(builder: ProfileBuilder | None = None, generation: int | None = 3) -> CertificationProfile:
    builder = builder or ProfileBuilder("gpu-basic").check("nccl", scriptKey="nccl.sh", backend="MPIJob", gpuCount=1)
    builder.obj["metadata"]["uid"] = PROFILE_UID
    if generation is not None:
        builder.obj["metadata"]["generation"] = generation
    return make_profile(builder)


NODES = [
    make_node("gpu-b").uid("uid-b").gpus(8).cpu("64").memory("512Gi").resource("cpu", "63500m", capacity="64").view(),
    make_node("gpu-a").uid("uid-a").gpus(8).view(),
    make_node("gpu-c").uid("uid-c").gpus(8).resource("rdma/ib", "1").view(),
]


def _run(nodes: list[Any] | None = None, attempt: int = 1, name: str = "gpu-basic-0123456789-0") -> dict[str, Any]:
    """A Run as the API server returns it: the manifest plus a uid."""
    run = run_manifest(
        profile=_profile(),
        nodes=nodes if nodes is not None else NODES,
        name=name,
        namespace="signal-system",
        ghash="0123456789",
        source_digest=SCRIPTS_DIGEST,
        attempt=attempt,
    )
    run["metadata"]["uid"] = "run-uid-1"
    return run


# -- group hash and names -------------------------------------------------------------------


def test_group_hash_is_independent_of_node_order() -> None:
    reference = group_hash(PROFILE_UID, 1, NODES)
    for order in (NODES[::-1], [NODES[1], NODES[2], NODES[0]]):
        assert group_hash(PROFILE_UID, 1, order) == reference
    assert re.fullmatch(r"[0-9a-f]{10}", reference)


@pytest.mark.parametrize(
    ("profile_uid", "attempt", "uids"),
    [
        pytest.param("other-profile-uid", 1, ["uid-a", "uid-b", "uid-c"], id="another profile uid"),
        pytest.param(PROFILE_UID, 2, ["uid-a", "uid-b", "uid-c"], id="the next attempt"),
        pytest.param(PROFILE_UID, 1, ["uid-a", "uid-b", "uid-d"], id="one Node replaced (new uid, same name)"),
        pytest.param(PROFILE_UID, 1, ["uid-a", "uid-b"], id="a smaller group"),
    ],
)
def test_group_hash_changes(profile_uid: str, attempt: int, uids: list[str]) -> None:
    nodes = [make_node(f"gpu-{u[-1]}").uid(u).view() for u in uids]
    assert group_hash(profile_uid, attempt, nodes) != group_hash(PROFILE_UID, 1, NODES)


def test_group_hash_depends_on_uids_not_names() -> None:
    renamed = [make_node(f"renamed-{i}").uid(n.uid).view() for i, n in enumerate(NODES)]
    assert group_hash(PROFILE_UID, 1, renamed) == group_hash(PROFILE_UID, 1, NODES)


@pytest.mark.parametrize(
    ("profile", "ordinal", "expected"),
    [
        pytest.param("gpu-basic", 0, "gpu-basic-0123456789-0", id="short profile name kept whole"),
        pytest.param("p" * 63, 0, "p" * 40 + "-0123456789-0", id="63-char profile name cut to 40"),
        pytest.param("p" * 63, 12345, "p" * 40 + "-0123456789-12345", id="large ordinal"),
    ],
)
def test_run_name(profile: str, ordinal: int, expected: str) -> None:
    assert run_name(profile, "0123456789", ordinal) == expected


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param("a" * 63, id="63 letters"),
        pytest.param("a" * 39 + "-" + "b" * 23, id="63 chars with a hyphen at the cut"),
        pytest.param("x", id="one char"),
    ],
)
@pytest.mark.parametrize("ordinal", [0, 9, 99, 999_999])
def test_run_name_is_a_label_value_for_any_profile_name(profile: str, ordinal: int) -> None:
    """The Run name is also a label value (projectsignal.dev/run): at most 63 characters."""
    name = run_name(profile, group_hash(PROFILE_UID, 1, NODES), ordinal)
    assert len(name) <= 63
    assert DNS_LABEL.fullmatch(name)


G = "0123456789"


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        pytest.param([], 1, id="the group's first Run"),
        pytest.param([f"gpu-{G}-1", f"gpu-{G}-2"], 3, id="after two"),
        pytest.param(
            [f"gpu-{G}-2", f"gpu-{G}-3"], 4, id="retention deleted Run 1: one past the highest, not the count"
        ),
        pytest.param([f"gpu-{G}-7"], 8, id="only the newest left"),
        pytest.param([f"gpu-{G}-10", f"gpu-{G}-9"], 11, id="numbers, not text"),
        pytest.param(["hand-made", f"gpu-{G}-x", f"gpu-{G}-", f"gpu-{G}-+3"], 1, id="names not of this group"),
        pytest.param([f"gpu-{G}-٣"], 1, id="non-ASCII digits"),
        pytest.param([f"gpu-{G}-1", f"gpu-{G}-" + "9" * 10], 2, id="an ordinal too long to continue"),
        pytest.param([f"other-{G}-5", "gpu-9876543210-5", f"gpu-{G}-5-x"], 1, id="another profile or group"),
    ],
)
def test_next_ordinal(names: list[str], expected: int) -> None:
    assert next_ordinal("gpu", G, names) == expected


def test_next_ordinal_of_a_long_profile_name_reads_its_cut_names() -> None:
    profile = "p" * 63
    assert next_ordinal(profile, G, [run_name(profile, G, 4)]) == 5
    assert len(run_name(profile, G, next_ordinal(profile, G, [run_name(profile, G, 999_999_999)]))) <= 63


def test_snapshot_name() -> None:
    assert snapshot_name("gpu-basic-0123456789-0") == "gpu-basic-0123456789-0-scripts"


# -- suite deadline ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deadlines", "reserve", "seconds"),
    [
        pytest.param(["5m"], None, 300 + 300, id="one check plus the default 5m reserve"),
        pytest.param(["5m", "1h30m", "45s"], "10m", 300 + 5400 + 45 + 600, id="sum of checks plus reserve"),
        pytest.param(["1m"], "1s", 61, id="short reserve"),
        pytest.param(["500ms", "500ms"], "1s", 2, id="milliseconds add up"),
        pytest.param(["1.5m"], "30s", 120, id="fractional minutes"),
    ],
)
def test_suite_deadline_seconds(deadlines: list[str], reserve: str | None, seconds: int) -> None:
    builder = ProfileBuilder("p").checks(
        [
            {"name": f"c{i}", "scriptKey": "inventory.sh", "backend": "Pod", "backendActiveDeadline": d}
            for i, d in enumerate(deadlines)
        ]
    )
    if reserve is not None:
        builder.spec(evidenceReserve=reserve)
    assert suite_deadline_seconds(make_profile(builder)) == seconds


def test_suite_deadline_is_never_below_one_second() -> None:
    builder = ProfileBuilder("p").edit_check(0, backendActiveDeadline="400ms").spec(evidenceReserve="500ms")
    assert suite_deadline_seconds(make_profile(builder)) >= 1


# -- Run --------------------------------------------------------------------------------------


def test_run_manifest() -> None:
    profile = _profile()
    run = run_manifest(
        profile=profile,
        nodes=NODES,
        name="gpu-basic-0123456789-0",
        namespace="signal-system",
        ghash="0123456789",
        source_digest=SCRIPTS_DIGEST,
        attempt=2,
    )
    assert run["apiVersion"] == keys.API_VERSION
    assert run["kind"] == keys.RUN_KIND
    assert run["metadata"] == {
        "name": "gpu-basic-0123456789-0",
        "namespace": "signal-system",
        "labels": {keys.PROFILE_LABEL: "gpu-basic", GROUP_HASH_LABEL: "0123456789"},
    }
    spec = run["spec"]
    assert spec["profile"] == {"name": "gpu-basic", "uid": PROFILE_UID, "generation": 3}
    assert spec["checks"] == [c.to_wire() for c in profile.spec.checks]
    assert [c["name"] for c in spec["checks"]] == ["inventory", "nccl"]
    assert spec["source"] == {"digest": SCRIPTS_DIGEST, "snapshotConfigMap": "gpu-basic-0123456789-0-scripts"}
    assert spec["suiteDeadlineSeconds"] == suite_deadline_seconds(profile) == 300 + 60 + 300
    assert spec["attempt"] == 2
    assert spec["participants"] == [
        {
            "index": 0,
            "nodeName": "gpu-b",
            "nodeUID": "uid-b",
            "capacity": {"cpu": "64", "memory": "512Gi", GPU: "8"},
            "allocatable": {"cpu": "63500m", "memory": "512Gi", GPU: "8"},
        },
        {
            "index": 1,
            "nodeName": "gpu-a",
            "nodeUID": "uid-a",
            "capacity": {GPU: "8"},
            "allocatable": {GPU: "8"},
        },
        {
            "index": 2,
            "nodeName": "gpu-c",
            "nodeUID": "uid-c",
            "capacity": {GPU: "8", "rdma/ib": "1"},
            "allocatable": {GPU: "8", "rdma/ib": "1"},
        },
    ]
    # The participants' resource maps are sorted by resource name.
    assert list(spec["participants"][0]["capacity"]) == ["cpu", "memory", GPU]


def test_run_manifest_is_a_valid_run() -> None:
    run = _run()
    parsed = CertificationRun.model_validate(run)
    assert [p.node_uid for p in parsed.spec.participants] == ["uid-b", "uid-a", "uid-c"]


@pytest.mark.parametrize(
    ("generation", "expected"),
    [pytest.param(None, 1, id="no generation yet defaults to 1"), pytest.param(7, 7, id="generation kept")],
)
def test_run_manifest_profile_generation(generation: int | None, expected: int) -> None:
    run = run_manifest(
        profile=_profile(ProfileBuilder("p"), generation=generation),
        nodes=NODES[:1],
        name="r",
        namespace="ns",
        ghash="h",
        source_digest=SCRIPTS_DIGEST,
    )
    assert run["spec"]["profile"]["generation"] == expected
    assert run["spec"]["attempt"] == 1


# -- snapshot ---------------------------------------------------------------------------------

OWNER = {
    "apiVersion": keys.API_VERSION,
    "kind": keys.RUN_KIND,
    "name": "gpu-basic-0123456789-0",
    "uid": "run-uid-1",
    "controller": True,
    "blockOwnerDeletion": True,
}


@pytest.mark.parametrize(
    ("source", "copied"),
    [
        pytest.param(
            {"data": {"a.sh": "#!/bin/sh\r\n\techo  é\n", "b.sh": ""}},
            {"data": {"a.sh": "#!/bin/sh\r\n\techo  é\n", "b.sh": ""}},
            id="data strings copied exactly, including an empty value",
        ),
        pytest.param(
            {"binaryData": {"tool.bin": "AAECAwT/"}},
            {"binaryData": {"tool.bin": "AAECAwT/"}},
            id="binaryData copied exactly (still base64)",
        ),
        pytest.param(
            {"data": {"a.sh": "x"}, "binaryData": {"b.bin": "AA=="}},
            {"data": {"a.sh": "x"}, "binaryData": {"b.bin": "AA=="}},
            id="both",
        ),
        pytest.param({"data": {}, "binaryData": None}, {}, id="empty source: no data fields"),
    ],
)
def test_snapshot_manifest(source: dict[str, Any], copied: dict[str, Any]) -> None:
    full_source = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "scripts", "namespace": "signal-scripts", "uid": "src", "labels": {"x": "y"}},
        "immutable": True,
        **source,
    }
    body = snapshot_manifest(_run(), full_source)
    assert body == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "gpu-basic-0123456789-0-scripts",
            "namespace": "signal-system",
            "labels": {
                keys.RUN_NAME_LABEL: "gpu-basic-0123456789-0",
                keys.RUN_UID_LABEL: "run-uid-1",
                keys.COMPONENT_LABEL: "scripts",
            },
            "ownerReferences": [OWNER],
        },
        "immutable": True,
        **copied,
    }


def test_snapshot_is_a_copy_not_an_alias() -> None:
    source = {"data": {"a.sh": "x"}, "binaryData": {"b.bin": "AA=="}}
    body = snapshot_manifest(_run(), source)
    body["data"]["a.sh"] = "changed"
    body["binaryData"]["c"] = "AA=="
    assert source == {"data": {"a.sh": "x"}, "binaryData": {"b.bin": "AA=="}}


# -- Workflow ---------------------------------------------------------------------------------


def _parameters(workflow: dict[str, Any]) -> dict[str, str]:
    params = workflow["spec"]["arguments"]["parameters"]
    assert all(set(p) == {"name", "value"} and isinstance(p["value"], str) for p in params)
    return {p["name"]: p["value"] for p in params}


def test_workflow_manifest() -> None:
    run = _run()
    workflow = workflow_manifest(run)
    assert workflow["apiVersion"] == "argoproj.io/v1alpha1"
    assert workflow["kind"] == "Workflow"
    assert workflow["metadata"] == {
        "name": "gpu-basic-0123456789-0",
        "namespace": "signal-system",
        "labels": {keys.RUN_NAME_LABEL: "gpu-basic-0123456789-0", keys.RUN_UID_LABEL: "run-uid-1"},
        "ownerReferences": [OWNER],
    }
    assert workflow["spec"]["workflowTemplateRef"] == {"name": WORKFLOW_TEMPLATE}
    assert workflow["spec"]["activeDeadlineSeconds"] == run["spec"]["suiteDeadlineSeconds"] == 660
    params = _parameters(workflow)
    assert list(params) == [
        "run-name",
        "run-namespace",
        "run-uid",
        "participants",
        "participants-json",
        "checks",
        "check-count",
        "snapshot",
    ]
    assert params["run-name"] == "gpu-basic-0123456789-0"
    assert params["run-namespace"] == "signal-system"
    assert params["run-uid"] == "run-uid-1"
    assert params["participants"] == "gpu-b,gpu-a,gpu-c"
    assert params["participants-json"] == (
        '[{"index":0,"nodeName":"gpu-b","nodeUID":"uid-b"},'
        '{"index":1,"nodeName":"gpu-a","nodeUID":"uid-a"},'
        '{"index":2,"nodeName":"gpu-c","nodeUID":"uid-c"}]'
    )
    assert json.loads(params["checks"]) == run["spec"]["checks"]
    assert params["checks"] == json.dumps(run["spec"]["checks"], sort_keys=True, separators=(",", ":"))
    assert params["check-count"] == "2"
    assert params["snapshot"] == "gpu-basic-0123456789-0-scripts"


def test_workflow_participants_follow_index_not_list_order() -> None:
    run = _run()
    run["spec"]["participants"] = list(reversed(run["spec"]["participants"]))
    params = _parameters(workflow_manifest(run))
    assert params["participants"] == "gpu-b,gpu-a,gpu-c"
    assert [p["index"] for p in json.loads(params["participants-json"])] == [0, 1, 2]


def test_workflow_of_a_single_participant() -> None:
    params = _parameters(workflow_manifest(_run(NODES[1:2])))
    assert params["participants"] == "gpu-a"
    assert json.loads(params["participants-json"]) == [{"index": 0, "nodeName": "gpu-a", "nodeUID": "uid-a"}]


# -- reservation patch ------------------------------------------------------------------------


def test_reservation_patch() -> None:
    node = (
        make_node("gpu-a")
        .resource_version("77")
        .taint("ops.example/maintenance", "soon", "PreferNoSchedule")
        .signal_taint("old-run-uid")
        .taint("nvidia.com/gpu", effect="NoSchedule")
        .build()
    )
    patch = reservation_patch(node, _run(), 2)
    # Only what this test owns is asserted field by field: the label and annotation maps may
    # carry more keys (e.g. bookkeeping of the operator's certify request).
    assert set(patch) == {"metadata", "spec"}
    assert patch["metadata"]["resourceVersion"] == "77"
    assert patch["metadata"]["labels"][keys.RESERVED_BY_LABEL] == "run-uid-1"
    assert patch["spec"] == {
        "taints": [
            {"key": "ops.example/maintenance", "value": "soon", "effect": "PreferNoSchedule"},
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"key": RESERVED_TAINT_KEY, "value": "run-uid-1", "effect": "NoSchedule"},
        ]
    }
    detail = json.loads(patch["metadata"]["annotations"][keys.RESERVATION_ANNOTATION])
    assert {k: detail[k] for k in ("run", "namespace", "uid", "index")} == {
        "run": "gpu-basic-0123456789-0",
        "namespace": "signal-system",
        "uid": "run-uid-1",
        "index": 2,
    }


@pytest.mark.parametrize(
    "node",
    [
        pytest.param(make_node("n").build(), id="no spec.taints"),
        pytest.param({**make_node("n").build(), "spec": {"taints": None}}, id="taints null"),
        pytest.param({**make_node("n").build(), "spec": {}}, id="empty spec"),
    ],
)
def test_reservation_patch_on_an_untainted_node(node: dict[str, Any]) -> None:
    patch = reservation_patch(node, _run(), 0)
    assert patch["spec"]["taints"] == [{"key": RESERVED_TAINT_KEY, "value": "run-uid-1", "effect": "NoSchedule"}]
    assert "unschedulable" not in patch["spec"]


def test_reservation_annotation_round_trips_through_node_view() -> None:
    node = make_node("gpu-a").build()
    patch = reservation_patch(node, _run(), 1)
    node["metadata"].setdefault("labels", {}).update(patch["metadata"]["labels"])
    node["metadata"]["annotations"] = patch["metadata"]["annotations"]
    node["spec"]["taints"] = patch["spec"]["taints"]
    parsed = node_view(node)
    assert parsed.reservation == Reservation("run-uid-1", "gpu-basic-0123456789-0", "signal-system", 1)
    assert parsed.signal_taint_uid == "run-uid-1"
    assert parsed.unschedulable is False


# -- release patch ----------------------------------------------------------------------------

OURS = "run-uid-1"


@pytest.mark.parametrize(
    "node",
    [
        pytest.param(make_node("n"), id="a Node nobody holds"),
        pytest.param(make_node("n").reservation_label("other-uid").signal_taint("other-uid"), id="held by another Run"),
        pytest.param(make_node("n").unschedulable().cordon_taint(), id="cordoned by an operator only"),
        pytest.param(make_node("n").taint(RESERVED_TAINT_KEY), id="Signal taint with no value"),
    ],
)
def test_release_patch_of_a_node_not_held_by_the_run(node: NodeBuilder) -> None:
    assert release_patch(node.build(), OURS) is None


@pytest.mark.parametrize(
    ("node", "taints", "clears_reservation"),
    [
        pytest.param(
            make_node("n").reservation_label(OURS, {"index": 0}).signal_taint(OURS),
            None,
            True,
            id="label and taint: both removed, no taints left",
        ),
        pytest.param(
            make_node("n")
            .reservation_label(OURS)
            .taint("ops.example/maintenance", "x")
            .signal_taint(OURS)
            .cordon_taint(),
            [
                {"key": "ops.example/maintenance", "value": "x", "effect": "NoSchedule"},
                {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
            ],
            True,
            id="an operator's taints (including the cordon taint) stay",
        ),
        pytest.param(
            make_node("n").reservation_label(OURS).unschedulable().signal_taint(OURS),
            None,
            True,
            id="an operator's spec.unschedulable is not touched",
        ),
        pytest.param(
            make_node("n").signal_taint(OURS).taint("a", "b"),
            [{"key": "a", "value": "b", "effect": "NoSchedule"}],
            False,
            id="taint only (label already gone): taint removed, label untouched",
        ),
        pytest.param(
            make_node("n").reservation_label(OURS),
            None,
            True,
            id="label only (taint already gone): reservation cleared",
        ),
        pytest.param(
            make_node("n").reservation_label(OURS).signal_taint("other-uid"),
            [{"key": RESERVED_TAINT_KEY, "value": "other-uid", "effect": "NoSchedule"}],
            True,
            id="another Run's Signal taint stays",
        ),
        pytest.param(
            make_node("n").reservation_label("other-uid").signal_taint(OURS),
            None,
            False,
            id="our stale taint on a Node another Run labelled: only our taint goes",
        ),
    ],
)
def test_release_patch(node: NodeBuilder, taints: list[dict[str, str]] | None, clears_reservation: bool) -> None:
    raw = node.resource_version("314").build()
    patch = release_patch(raw, OURS)
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == "314"
    assert patch["spec"] == {"taints": taints}
    if clears_reservation:
        assert patch["metadata"]["labels"] == {keys.RESERVED_BY_LABEL: None}
        assert patch["metadata"]["annotations"] == {keys.RESERVATION_ANNOTATION: None}
    else:
        assert set(patch["metadata"]) == {"resourceVersion"}
    assert set(patch) == {"metadata", "spec"}
    assert "unschedulable" not in patch["spec"]


def test_release_patch_does_not_mutate_the_node() -> None:
    raw = make_node("n").reservation_label(OURS).signal_taint(OURS).taint("a", "b").build()
    before = json.dumps(raw, sort_keys=True)
    release_patch(raw, OURS)
    assert json.dumps(raw, sort_keys=True) == before


def test_reserve_then_release_restores_the_operator_taints() -> None:
    operator_taints = [{"key": "ops.example/x", "value": "1", "effect": "NoExecute"}]
    node = make_node("n").resource_version("1").build()
    node["spec"]["taints"] = list(operator_taints)
    reserve = reservation_patch(node, _run(), 0)
    node["metadata"]["labels"] = reserve["metadata"]["labels"]
    node["metadata"]["annotations"] = reserve["metadata"]["annotations"]
    node["spec"]["taints"] = reserve["spec"]["taints"]
    release = release_patch(node, OURS)
    assert release is not None
    assert release["spec"]["taints"] == operator_taints


@pytest.mark.parametrize(
    "annotation",
    [
        pytest.param("[" * 2000, id="nested too deep for the parser"),
        pytest.param('{"request": ' + "9" * 5000 + "}", id="a number of 5000 digits"),
        pytest.param("not json", id="not JSON"),
    ],
)
def test_release_patch_of_a_node_whose_kubelet_rewrote_the_reservation(annotation: str) -> None:
    """The reservation annotation is on the Node, which its kubelet may write: whatever it holds,
    the release is made (no request to give back), never an exception that stops the group's."""
    raw = make_node("n").reservation_label(OURS).signal_taint(OURS).build()
    raw["metadata"].setdefault("annotations", {})[keys.RESERVATION_ANNOTATION] = annotation
    patch = release_patch(raw, OURS)
    assert patch is not None
    assert patch["metadata"]["labels"] == {keys.RESERVED_BY_LABEL: None}
    assert patch["spec"] == {"taints": None}
