"""What ``signalctl demo`` must end with, and every way an end differs from it. Pure.

The demo requests gpu-001..gpu-004 (groups of two, in name order) with the example profile,
whose burn-in gpu-003 is made to fail. So the expected end is: the Run of gpu-001 and gpu-002
Succeeded (AllChecksPassed) and released; the Run of gpu-003 and gpu-004 Failed (CheckFailed)
and still reserved and cordoned; gpu-003 projected Fail, the others Pass; every Run's evidence
verifies. Anything else (a Node Unknown, a Run Inconclusive, a release that did not land) is a
problem, and the demo exits non-zero."""

from collections.abc import Mapping, Sequence
from typing import Any

from shared import keys

Obj = dict[str, Any]
PASSING = ("gpu-001", "gpu-002")
FAILING = ("gpu-003", "gpu-004")
FAILING_NODE = "gpu-003"
EXPECTED_RESULT = {"gpu-001": "Pass", "gpu-002": "Pass", "gpu-003": "Fail", "gpu-004": "Pass"}


def is_released(run: Obj) -> bool:
    conditions = (run.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Released" and c.get("status") == "True" for c in conditions)


def participants(run: Obj) -> tuple[str, ...]:
    return tuple(sorted(p["nodeName"] for p in run["spec"].get("participants") or []))


def settled(runs: Sequence[Obj], nodes: Sequence[Obj], terminal: set[str], expected_runs: int = 2) -> bool:
    """Whether the demo has seen everything it reports: every Run ended, every requested Node
    projected, and every Succeeded Run released (condition and Nodes)."""
    if len(runs) < expected_runs:
        return False
    if any((r.get("status") or {}).get("phase") not in terminal for r in runs):
        return False
    profile = runs[0]["spec"]["profile"]["name"]
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    if any(keys.certified_label(profile) not in node_labels for node_labels in labels.values()):
        return False
    for run in runs:
        if (run.get("status") or {}).get("phase") == "Succeeded":
            if not is_released(run):
                return False
            if any(keys.RESERVED_BY_LABEL in labels.get(name, {}) for name in participants(run)):
                return False
    return True


def problems(runs: Sequence[Obj], nodes: Sequence[Obj], verify_codes: Mapping[str, int]) -> list[str]:
    """Every difference between this end and the expected one (empty: as expected)."""
    found = []
    by_group = {participants(r): r for r in runs}
    for group, phase, reason in ((PASSING, "Succeeded", "AllChecksPassed"), (FAILING, "Failed", "CheckFailed")):
        run = by_group.get(group)
        if run is None:
            found.append(f"no Run of exactly {', '.join(group)} (Runs: {sorted(by_group)})")
            continue
        status = run.get("status") or {}
        name = run["metadata"]["name"]
        if (status.get("phase"), status.get("reason")) != (phase, reason):
            found.append(
                f"Run {name} [{', '.join(group)}] ended {status.get('phase')} ({status.get('reason')}: "
                f"{status.get('message')}), expected {phase} ({reason})"
            )
        if status.get("phase") == phase == "Succeeded" and not is_released(run):
            found.append(f"Run {name} Succeeded but is not released")
    if len(runs) != len(by_group) or len(runs) != 2:
        found.append(f"expected 2 Runs, found {len(runs)}")
    profile = runs[0]["spec"]["profile"]["name"] if runs else ""
    for node in nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        result = labels.get(keys.certified_label(profile), "Unknown")
        if name in EXPECTED_RESULT and result != EXPECTED_RESULT[name]:
            found.append(f"Node {name} is {result}, expected {EXPECTED_RESULT[name]}")
        reserved = keys.RESERVED_BY_LABEL in labels
        if name in PASSING and reserved:
            found.append(f"Node {name} is still reserved, expected released")
        if name in FAILING and not reserved:
            found.append(f"Node {name} was released, expected reserved and cordoned (its Run failed)")
    for run_name, code in sorted(verify_codes.items()):
        if code != 0:
            found.append(f"`signalctl evidence verify {run_name}` exited {code}, expected 0")
    return found


def portal_problems(states: Mapping[tuple[str, str], str], burn_in: str) -> list[str]:
    """The portal must show the failing Node's burn-in Failed and every other result Passed."""
    found = []
    if not states:
        found.append("the portal showed no results")
    for (node, check), state in sorted(states.items()):
        expected = "Failed" if (node, check) == (FAILING_NODE, burn_in) else "Passed"
        if state != expected:
            found.append(f"the portal shows {node} {check} {state}, expected {expected}")
    return found
