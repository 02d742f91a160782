"""Issue 44 §1: the CRD's own bounds on a check's workload settings, on the real API server (the
generated schema and CEL rules of crds/, not only the pydantic model): parameters, a check's
own image (by digest, Pod checks only), /dev/shm, runtime class and networks. Each bad value is
refused with a message naming it; the good ones are admitted."""

import uuid
from typing import Any

import pytest

from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from tests.controller_support import profile_body

DIGEST = "sha256:" + "ab" * 32


def body(namespace: str, **check: Any) -> Obj:
    doc: Obj = {"name": "c", "scriptKey": "c.sh", "backend": "Pod", "backendActiveDeadline": "5m", **check}
    profile = profile_body(f"w-{uuid.uuid4().hex[:8]}", namespace, 1, checks=[doc])
    return profile


async def create(admin: KubeClient, profile: Obj) -> Obj:
    path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL)
    return await admin.request("POST", path, body=profile, params={"dryRun": "All"})


async def test_good_workload_settings_are_admitted(admin: KubeClient, namespace: str) -> None:
    good = body(
        namespace,
        image=f"registry.example/gpu/diag@{DIGEST}",
        parameters={"expectedGpus": "8", "min_busbw": "380", "level": ""},
        workload={"shmSize": "64Gi", "runtimeClassName": "nvidia", "networks": ["sriov-ib0", "ns/ib1@net1"]},
    )
    admitted = await create(admin, good)
    check = admitted["spec"]["checks"][0]
    assert check["parameters"] == {"expectedGpus": "8", "min_busbw": "380", "level": ""}
    assert check["workload"]["shmSize"] == "64Gi"


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "parameter-case-clash": ({"parameters": {"level": "1", "LEVEL": "2"}}, "differ by more than case"),
    "parameter-name": ({"parameters": {"1st": "x"}}, "parameters"),
    "parameter-value-too-long": ({"parameters": {"v": "x" * 1025}}, "parameters"),
    "too-many-parameters": ({"parameters": {f"p{i}": "x" for i in range(33)}}, "parameters"),
    "image-by-tag": ({"image": "registry.example/gpu/diag:latest"}, "image"),
    "image-on-mpijob": ({"image": f"diag@{DIGEST}", "backend": "MPIJob"}, "image is only for the Pod backend"),
    "shm-too-large": ({"workload": {"shmSize": "65Gi"}}, "shmSize must be more than 0 and at most 64Gi"),
    "shm-zero": ({"workload": {"shmSize": "0"}}, "shmSize must be more than 0 and at most 64Gi"),
    "network-json": ({"workload": {"networks": ['[{"name":"x"}]']}}, "networks"),
    "too-many-networks": ({"workload": {"networks": [f"n{i}" for i in range(9)]}}, "networks"),
    "runtime-class-name": ({"workload": {"runtimeClassName": "Not_A_Name"}}, "runtimeClassName"),
}


@pytest.mark.parametrize("case", sorted(BAD))
async def test_bad_workload_settings_are_refused_by_the_api_server(
    admin: KubeClient, namespace: str, case: str
) -> None:
    change, message = BAD[case]
    with pytest.raises(ApiError) as refused:
        await create(admin, body(namespace, **change))
    assert refused.value.status == 422, refused.value
    assert message in refused.value.message, refused.value.message
