"""controller/rules/requirements.py: the per-Node requirement is the element-wise maximum over
checks (checks run one after another, so requests are never summed)."""

import time
from typing import Any

import pytest
from pydantic import ValidationError

from controller.rules.requirements import check_request, per_node_requirement, shortfalls
from shared import keys
from shared.profile import Check

GPU = keys.GPU_RESOURCE


def _check(name: str = "c", **fields: Any) -> Check:
    return Check.model_validate(
        {"name": name, "scriptKey": "s.sh", "backend": "Pod", "backendActiveDeadline": "1m", **fields}
    )


@pytest.mark.parametrize(
    ("fields", "request_"),
    [
        pytest.param({}, {}, id="a check with nothing requested requests nothing"),
        pytest.param({"gpuCount": 0}, {}, id="gpuCount 0 is not a GPU request"),
        pytest.param({"gpuCount": 8}, {GPU: 8}, id="gpus"),
        pytest.param({"workload": {"cpu": "2"}}, {"cpu": 2000}, id="cpu cores in millicores"),
        pytest.param({"workload": {"cpu": "250m"}}, {"cpu": 250}, id="cpu millicores"),
        pytest.param({"workload": {"memory": "1Gi"}}, {"memory": 2**30}, id="memory in bytes"),
        pytest.param({"workload": {"extendedResources": {"rdma/ib": 2}}}, {"rdma/ib": 2}, id="extended resource"),
        pytest.param(
            {
                "gpuCount": 4,
                "workload": {
                    "cpu": "1.5",
                    "memory": "512Mi",
                    "extendedResources": {"rdma/ib": 1, "example.com/fpga": 3},
                },
            },
            {GPU: 4, "cpu": 1500, "memory": 512 * 2**20, "rdma/ib": 1, "example.com/fpga": 3},
            id="everything at once",
        ),
    ],
)
def test_check_request(fields: dict[str, Any], request_: dict[str, int]) -> None:
    assert check_request(_check(**fields)) == request_


@pytest.mark.parametrize(
    ("checks", "requirement"),
    [
        pytest.param([], {}, id="no checks: no requirement"),
        pytest.param([{"gpuCount": 8}], {GPU: 8}, id="a single check is its own requirement"),
        pytest.param([{"gpuCount": 1}, {"gpuCount": 8}, {"gpuCount": 2}], {GPU: 8}, id="gpus: maximum, not the sum"),
        pytest.param(
            [{"gpuCount": 8, "workload": {"cpu": "1"}}, {"gpuCount": 1, "workload": {"cpu": "16"}}],
            {GPU: 8, "cpu": 16000},
            id="each resource at its own maximum, from different checks",
        ),
        pytest.param(
            [{"workload": {"memory": "1Gi"}}, {"workload": {"memory": "1500Mi"}}, {"workload": {"memory": "1G"}}],
            {"memory": 1500 * 2**20},
            id="memory maximum across binary and decimal suffixes",
        ),
        pytest.param(
            [
                {"workload": {"extendedResources": {"rdma/ib": 1}}},
                {"workload": {"extendedResources": {"rdma/ib": 4, "example.com/fpga": 1}}},
                {"workload": {"extendedResources": {"rdma/ib": 2}}},
            ],
            {"rdma/ib": 4, "example.com/fpga": 1},
            id="extended resources: union of names, maximum of counts",
        ),
        pytest.param(
            [{"gpuCount": 0}, {"workload": {"cpu": "100m"}}],
            {"cpu": 100},
            id="a check without gpus does not add a zero gpu requirement",
        ),
    ],
)
def test_per_node_requirement(checks: list[dict[str, Any]], requirement: dict[str, int]) -> None:
    parsed = [_check(f"c{i}", **fields) for i, fields in enumerate(checks)]
    assert per_node_requirement(parsed) == requirement


def test_per_node_requirement_ignores_check_order() -> None:
    checks = [
        _check("a", gpuCount=2, workload={"cpu": "8"}),
        _check("b", gpuCount=8, workload={"memory": "2Gi"}),
        _check("c", workload={"extendedResources": {"rdma/ib": 1}, "cpu": "500m"}),
    ]
    assert per_node_requirement(checks) == per_node_requirement(list(reversed(checks)))


@pytest.mark.parametrize(
    ("requirement", "allocatable", "expected"),
    [
        pytest.param({}, {}, [], id="nothing required fits an empty Node"),
        pytest.param({GPU: 8}, {GPU: 8}, [], id="exactly enough fits"),
        pytest.param({GPU: 8}, {GPU: 16}, [], id="more than enough fits"),
        pytest.param({GPU: 8}, {GPU: 7}, [f"{GPU} 7<8"], id="one short"),
        pytest.param({GPU: 1}, {}, [f"{GPU} 0<1"], id="a resource the Node lacks counts as zero"),
        pytest.param({"cpu": 4000}, {"cpu": 3999}, ["cpu 3999<4000"], id="cpu compared in millicores"),
        pytest.param(
            {"rdma/ib": 1, GPU: 8, "cpu": 1000, "memory": 10},
            {GPU: 4, "cpu": 1000},
            ["memory 0<10", f"{GPU} 4<8", "rdma/ib 0<1"],
            id="several shortfalls, sorted by resource name, fitting ones omitted",
        ),
        pytest.param({}, {GPU: 8}, [], id="allocatable with nothing required fits"),
    ],
)
def test_shortfalls(requirement: dict[str, int], allocatable: dict[str, int], expected: list[str]) -> None:
    assert shortfalls(requirement, allocatable) == expected


@pytest.mark.parametrize(
    ("workload", "fragment"),
    [
        pytest.param(
            {"memory": "1e999999"}, "workload.memory\n  Value error, '1e999999' is larger than", id="1e999999"
        ),
        pytest.param(
            {"memory": "1e1000000"}, "workload.memory\n  Value error, '1e1000000' is larger than", id="past decimal"
        ),
        pytest.param(
            {"cpu": "9223372036854775808"}, "workload.cpu\n  Value error, '9223372036854775808'", id="cpu past 2^63-1"
        ),
        pytest.param({"memory": "1e1.5"}, "'1e1.5' is not a Kubernetes quantity", id="the CRD's e1.5"),
    ],
)
def test_an_absurd_quantity_never_reaches_the_requirement(workload: dict[str, str], fragment: str) -> None:
    """A quantity the CRD's pattern admits but no Node can have ("1e999999" was 28 s of the
    controller's CPU in per_node_requirement; "1e1000000" a decimal.Overflow) is refused at
    once by the profile's model, naming the field: the profile is InvalidSpec, and no check
    that reaches the requirement holds one."""
    start = time.monotonic()
    with pytest.raises(ValidationError) as caught:
        _check(workload=workload)
    assert time.monotonic() - start < 0.1
    assert fragment in str(caught.value)
