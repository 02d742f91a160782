"""Acceptance 1 and 2 of the foundation: the generated CRDs on the real API server.
Printer columns, Run spec immutability (CEL), and profile bounds with field-naming errors."""

from typing import Any

import pytest

from localcluster.kube import ApiError, KubeClient, resource_path
from tests.builders import ProfileBuilder, run_manifest

API = "projectsignal.dev/v1alpha1"
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"


def profiles() -> str:
    return resource_path(API, "certificationprofiles")


def runs(namespace: str) -> str:
    return resource_path(API, "certificationruns", namespace)


async def test_listing_each_kind_shows_its_printer_columns(admin: KubeClient, namespace: str) -> None:
    name = f"cols-{namespace}"
    await admin.create(profiles(), ProfileBuilder(name).count(4).build())
    try:
        await admin.create(runs(namespace), run_manifest("r-cols"))
        await admin.merge_patch(
            f"{runs(namespace)}/r-cols/status",
            {"status": {"phase": "Running", "reason": "WorkflowRunning"}},
        )
        run_table = await admin.request("GET", runs(namespace), accept=TABLE)
        assert [c["name"] for c in run_table["columnDefinitions"]] == [
            "Name",
            "Profile",
            "Attempt",
            "Phase",
            "Reason",
            "Evidence",
            "Age",
        ]
        assert run_table["rows"][0]["cells"][:5] == [
            "r-cols",
            "gpu-basic",
            1,
            "Running",
            "WorkflowRunning",
        ]
        profile_table = await admin.request("GET", profiles(), accept=TABLE)
        assert [c["name"] for c in profile_table["columnDefinitions"]] == [
            "Name",
            "Count",
            "Ready",
            "Reason",
            "Eligible",
            "Age",
        ]
        row = next(r for r in profile_table["rows"] if r["cells"][0] == name)
        assert row["cells"][1] == 4
    finally:
        await admin.delete(f"{profiles()}/{name}")


SPEC_CHANGES: list[Any] = [
    pytest.param({"suiteDeadlineSeconds": 9999}, "suiteDeadlineSeconds", id="suite-deadline"),
    pytest.param({"attempt": 2}, "attempt", id="attempt"),
    pytest.param({"profile": {"name": "other", "uid": "x", "generation": 1}}, "profile", id="profile"),
    pytest.param(
        {"source": {"digest": "sha256:" + "1" * 64, "snapshotConfigMap": "other"}},
        "source",
        id="source",
    ),
    pytest.param(
        {"checks": [{"name": "other", "scriptKey": "x", "backend": "Pod", "backendActiveDeadline": "1m"}]},
        "checks",
        id="checks",
    ),
    pytest.param(
        {"participants": [{"index": 0, "nodeName": "elsewhere", "nodeUID": "u"}]},
        "participants",
        id="participants",
    ),
]


@pytest.mark.parametrize(("change", "field"), SPEC_CHANGES)
async def test_changing_a_run_spec_is_rejected(
    admin: KubeClient, namespace: str, change: dict[str, Any], field: str
) -> None:
    await admin.create(runs(namespace), run_manifest("r1"))
    with pytest.raises(ApiError) as caught:
        await admin.merge_patch(f"{runs(namespace)}/r1", {"spec": change})
    assert caught.value.status == 422
    assert f"spec.{field}" in caught.value.message
    assert "is immutable" in caught.value.message


@pytest.mark.parametrize("flag", ["cancel", "release"])
async def test_cancel_and_release_only_go_from_false_to_true(admin: KubeClient, namespace: str, flag: str) -> None:
    await admin.create(runs(namespace), run_manifest("r2"))
    updated = await admin.merge_patch(f"{runs(namespace)}/r2", {"spec": {flag: True}})
    assert updated["spec"][flag] is True
    for attempt in ({"spec": {flag: False}}, {"spec": {flag: None}}):
        with pytest.raises(ApiError) as caught:
            await admin.merge_patch(f"{runs(namespace)}/r2", attempt)
        assert caught.value.status == 422
        assert f"{flag} may only go from false to true" in caught.value.message
    current = await admin.get(f"{runs(namespace)}/r2")
    assert current["spec"][flag] is True


BAD_PROFILES: list[Any] = [
    pytest.param(ProfileBuilder("bad-count").count(65), "spec.participants.count", id="65-participants"),
    pytest.param(ProfileBuilder("bad-nochecks").checks([]), "spec.checks", id="no-checks"),
    pytest.param(ProfileBuilder("bad-dup").check("inventory"), "spec.checks[1]", id="duplicate-check-name"),
    pytest.param(
        ProfileBuilder("bad-backend").edit_check(0, backend="Slurm"),
        "spec.checks[0].backend",
        id="unknown-backend",
    ),
    pytest.param(
        ProfileBuilder("bad-gpus").edit_check(0, gpuCount=-1),
        "spec.checks[0].gpuCount",
        id="negative-gpu-count",
    ),
    pytest.param(
        ProfileBuilder("bad-selector").selector({}),
        "spec.participants.selector",
        id="empty-selector",
    ),
    pytest.param(
        ProfileBuilder("bad-selector2").selector({"matchLabels": {}}),
        "spec.participants.selector",
        id="empty-match-labels",
    ),
    pytest.param(
        ProfileBuilder("bad-digest").source(digest="sha256:abc"),
        "spec.source.digest",
        id="malformed-digest",
    ),
    pytest.param(
        ProfileBuilder("bad-deadline").edit_check(0, backendActiveDeadline="0s"),
        "spec.checks[0].backendActiveDeadline",
        id="zero-deadline",
    ),
    pytest.param(
        ProfileBuilder("bad-cap").edit_check(0, workload={"capabilities": ["SYS_ADMIN"]}),
        "spec.checks[0].workload.capabilities",
        id="capability",
    ),
    pytest.param(
        ProfileBuilder("bad-ext").edit_check(0, workload={"extendedResources": {"nvidia.com/gpu": 1}}),
        "spec.checks[0].workload.extendedResources",
        id="gpu-as-extended-resource",
    ),
    pytest.param(
        ProfileBuilder("bad-tol").edit_check(
            0, workload={"tolerations": [{"key": "projectsignal.dev/reserved", "effect": "NoSchedule"}]}
        ),
        "spec.checks[0].workload.tolerations[0].key",
        id="tolerating-signals-own-cordon",
    ),
    pytest.param(
        ProfileBuilder("bad-tols").edit_check(
            0, workload={"tolerations": [{"key": "a.io/b", "effect": "NoSchedule"}] * 9}
        ),
        "spec.checks[0].workload.tolerations",
        id="nine-tolerations",
    ),
    pytest.param(
        ProfileBuilder("bad-mpi-pod").edit_check(0, mpi={"scope": "perNode"}),
        "mpi is only for the MPIJob backend",
        id="mpi-on-a-pod-check",
    ),
    pytest.param(
        ProfileBuilder("bad-slots").edit_check(0, backend="MPIJob", gpuCount=4, mpi={"slotsPerWorker": 8}),
        "slotsPerWorker may not exceed gpuCount",
        id="more-slots-than-gpus",
    ),
    pytest.param(
        ProfileBuilder("bad-world")
        .count(16)
        .edit_check(0, backend="MPIJob", mpi={"scope": "crossNode", "slotsPerWorker": 8}),
        "at most 64 ranks",
        id="crossnode-world-over-64-ranks",
    ),
    pytest.param(ProfileBuilder("x" * 64), "metadata.name", id="name-longer-than-a-dns-label"),
]


@pytest.mark.parametrize(("builder", "field"), BAD_PROFILES)
async def test_bad_profiles_are_rejected_naming_the_field(
    admin: KubeClient, builder: ProfileBuilder, field: str
) -> None:
    with pytest.raises(ApiError) as caught:
        await admin.create(profiles(), builder.build())
    assert caught.value.status == 422, caught.value
    assert field in caught.value.message, caught.value.message


async def test_a_valid_profile_is_accepted_with_defaults(admin: KubeClient) -> None:
    created = await admin.create(profiles(), ProfileBuilder("good-defaults").build())
    try:
        assert created["spec"]["evidenceReserve"] == "5m"
        assert created["spec"]["checks"][0]["gpuCount"] == 8
    finally:
        await admin.delete(f"{profiles()}/good-defaults")
