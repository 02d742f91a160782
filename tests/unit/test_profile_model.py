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
        ProfileBuilder("p").edit_check(0, workload={"memory": "1e999999"}),
        "memory\n.*larger than 9223372036854775807",
        id="quantity-beyond-kubernetes",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(0, workload={"cpu": "1e1.5"}),
        "cpu\n.*not a Kubernetes quantity",
        id="fractional-exponent",
    ),
    pytest.param(
        ProfileBuilder("p").checks(
            [{"name": f"c{i}", "scriptKey": "a", "backend": "Pod", "backendActiveDeadline": "1m"} for i in range(33)]
        ),
        "checks",
        id="33-checks",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(
            0, workload={"tolerations": [{"key": "projectsignal.dev/reserved", "effect": "NoSchedule"}]}
        ),
        "Signal's own taints",
        id="tolerating-signals-own-cordon",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(
            0, workload={"tolerations": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}
        ),
        "Node lifecycle taints",
        id="tolerating-a-node-lifecycle-taint",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(0, workload={"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]}),
        "key",
        id="wildcard-toleration-without-key",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(0, workload={"tolerations": [{"key": "a.io/b", "effect": "NoSchedule"}] * 9}),
        "tolerations",
        id="nine-tolerations",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(
            0, workload={"tolerations": [{"key": "a.io/b", "operator": "Exists", "value": "x", "effect": "NoSchedule"}]}
        ),
        "Exists takes no value",
        id="exists-with-a-value",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(0, workload={"tolerations": [{"key": "a.io/b", "tolerationSeconds": 5}]}),
        "effect",
        id="toleration-without-effect",
    ),
    pytest.param(ProfileBuilder("p").edit_check(0, mpi={"scope": "perNode"}), "only for the MPIJob", id="mpi-on-pod"),
    pytest.param(
        ProfileBuilder("p").edit_check(0, backend="MPIJob", gpuCount=4, mpi={"slotsPerWorker": 8}),
        "exceeds gpuCount",
        id="more-slots-than-gpus",
    ),
    pytest.param(
        ProfileBuilder("p").edit_check(0, backend="MPIJob", mpi={"scope": "world"}), "scope", id="unknown-mpi-scope"
    ),
    pytest.param(
        ProfileBuilder("p").count(16).edit_check(0, backend="MPIJob", mpi={"scope": "crossNode", "slotsPerWorker": 8}),
        "at most 64",
        id="crossnode-world-over-64-ranks",
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


def test_tolerations_and_mpi_worlds_parse_with_defaults() -> None:
    builder = ProfileBuilder("p").edit_check(
        0,
        backend="MPIJob",
        workload={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    )
    builder.check("world", backend="MPIJob", gpuCount=8, mpi={"scope": "crossNode", "slotsPerWorker": 8})
    checks = CertificationProfile.model_validate(builder.build()).spec.checks
    assert (checks[0].mpi_scope, checks[0].slots_per_worker) == ("perNode", 1), "perNode, one rank by default"
    assert (checks[1].mpi_scope, checks[1].slots_per_worker) == ("crossNode", 8)
    assert checks[0].workload.tolerations[0].to_wire() == {
        **{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        "value": "",
    }
    # A perNode world of 8 ranks on each of 16 Nodes is 16 worlds of 8, not one of 128.
    many = ProfileBuilder("q").count(16).edit_check(0, backend="MPIJob", gpuCount=8, mpi={"slotsPerWorker": 8})
    assert CertificationProfile.model_validate(many.build()).spec.checks[0].slots_per_worker == 8
