"""The largest effective per-Node request over all checks of a suite. Pure.

A participant Node must be able to run any single check's workload for that Node: the GPU
count, cpu, memory and every extended resource, each taken at its maximum over the checks
(checks run one after another, so requests are not summed)."""

from collections.abc import Iterable, Mapping

from shared import keys
from shared.profile import Check
from shared.quantity import parse_quantity


def check_request(check: Check) -> dict[str, int]:
    """One participant's request of one check (cpu in millicores)."""
    request: dict[str, int] = {}
    if check.gpu_count:
        request[keys.GPU_RESOURCE] = check.gpu_count
    if check.workload.cpu:
        request["cpu"] = parse_quantity(check.workload.cpu, milli=True)
    if check.workload.memory:
        request["memory"] = parse_quantity(check.workload.memory)
    for name, count in check.workload.extended_resources.items():
        request[name] = count
    return request


def per_node_requirement(checks: Iterable[Check]) -> dict[str, int]:
    """Element-wise maximum of every check's per-participant request."""
    largest: dict[str, int] = {}
    for check in checks:
        for name, amount in check_request(check).items():
            largest[name] = max(largest.get(name, 0), amount)
    return largest


def shortfalls(requirement: Mapping[str, int], allocatable: Mapping[str, int]) -> list[str]:
    """Resources the Node cannot cover, as readable strings (empty when it fits)."""
    return [
        f"{name} {allocatable.get(name, 0)}<{amount}"
        for name, amount in sorted(requirement.items())
        if allocatable.get(name, 0) < amount
    ]
