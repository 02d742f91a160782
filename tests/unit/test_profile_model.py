"""The pydantic models enforce every bound of SPEC §3 (the API server enforces the same
through the generated CRD; see tests/integration/test_crds_on_apiserver.py)."""

from typing import Any

import pytest
from pydantic import ValidationError

from shared.profile import CertificationProfile
from shared.run import CertificationRun
from tests.builders import ProfileBuilder, run_manifest


def test_a_valid_profile_parses_with_snake_case_and_defaults() -> None:
    profile = CertificationProfile.model_validate(ProfileBuilder("gpu-basic").build())
    assert profile.spec.participants.count == 2
    assert profile.spec.checks[0].gpu_count == 8
    assert profile.spec.evidence_reserve == "5m"
    assert profile.spec.retries.max_attempts == 1
    wire = profile.to_wire()
    assert wire["spec"]["checks"][0]["backendActiveDeadline"] == "5m"
    assert "backend_active_deadline" not in str(wire)


def test_unknown_fields_of_cluster_objects_are_tolerated() -> None:
    body = ProfileBuilder("p").build()
    body["spec"]["futureField"] = {"x": 1}
    assert CertificationProfile.model_validate(body).spec.participants.count == 2


BAD: list[Any] = [
    pytest.param(ProfileBuilder("p").count(65), "count", id="65-participants"),
    pytest.param(ProfileBuilder("p").count(0), "count", id="0-participants"),
    pytest.param(ProfileBuilder("p").checks([]), "checks", id="no-checks"),
    pytest.param(
        ProfileBuilder("p").check("inventory"),
        "duplicate check names: inventory",
        id="duplicate-check-name",
    ),
    pytest.param(ProfileBuilder("p").edit_check(0, backend="Slurm"), "backend", id="unknown-backend"),
    pytest.param(ProfileBuilder("p").edit_check(0, gpuCount=-1), "gpuCount", id="negative-gpu-count"),
    pytest.param(ProfileBuilder("p").edit_check(0, gpuCount=9), "gpuCount", id="nine-gpus"),
    pytest.param(ProfileBuilder("p").selector({}), "selector must not be empty", id="empty-selector"),
    pytest.param(ProfileBuilder("p").source(digest="sha256:abc"), "digest", id="short-digest"),
    pytest.param(ProfileBuilder("p").source(digest="md5:" + "0" * 64), "digest", id="wrong-algorithm"),
    pytest.param(
        ProfileBuilder("p").edit_check(0, backendActiveDeadline="ten minutes"),
        "backendActiveDeadline",
        id="bad-duration",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(0, workload={"capabilities": ["SYS_ADMIN"]}),
        "capabilities",
        id="capability-not-allowed",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(0, workload={"extendedResources": {"nvidia.com/gpu": 1}}),
        "gpuCount",
        id="gpu-as-extended-resource",
    ),
    pytest.param(ProfileBuilder("p").edit_check(0, workload={"cpu": "lots"}), "cpu", id="bad-quantity"),
    pytest.param(
        ProfileBuilder("p").checks(
            [{"name": f"c{i}", "scriptKey": "a", "backend": "Pod", "backendActiveDeadline": "1m"} for i in range(33)]
        ),
        "checks",
        id="33-checks",
    ),
    pytest.param(ProfileBuilder("Not_A_Label"), "DNS label", id="profile-name-not-a-dns-label"),
    pytest.param(ProfileBuilder("x" * 64), "DNS label", id="profile-name-64-chars"),
]


@pytest.mark.parametrize(("builder", "message"), BAD)
def test_bad_profiles_are_rejected_naming_the_field(builder: ProfileBuilder, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        CertificationProfile.model_validate(builder.build())


def test_run_participants_carry_node_uids_on_the_wire() -> None:
    run = CertificationRun.model_validate(run_manifest("r1", participants=3))
    assert [p.node_uid for p in run.spec.participants] == ["uid-0", "uid-1", "uid-2"]
    assert run.to_wire()["spec"]["participants"][0]["nodeUID"] == "uid-0"
    assert run.status.phase == "Pending"
