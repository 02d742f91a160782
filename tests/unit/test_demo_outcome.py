"""signalctl/demo_outcome.py: the demo waits for everything it reports and exits non-zero
whenever its end is not the expected one (issue 11)."""

import copy
from typing import Any

import pytest

from shared import keys
from signalctl import demo_outcome as outcome

Obj = dict[str, Any]
TERMINAL = {"Succeeded", "Failed", "Inconclusive", "Canceled"}
PROFILE = "demo-gpu"


def run(name: str, nodes: tuple[str, ...], phase: str, reason: str, released: bool = False) -> Obj:
    conditions = [{"type": "Released", "status": "True" if released else "False"}]
    return {
        "metadata": {"name": name},
        "spec": {
            "profile": {"name": PROFILE},
            "participants": [{"index": i, "nodeName": n} for i, n in enumerate(nodes)],
        },
        "status": {"phase": phase, "reason": reason, "message": "m", "conditions": conditions},
    }


def node(name: str, result: str | None, reserved: bool) -> Obj:
    labels = {}
    if result is not None:
        labels[keys.certified_label(PROFILE)] = result
    if reserved:
        labels[keys.RESERVED_BY_LABEL] = "uid"
    return {"metadata": {"name": name, "labels": labels}}


def expected() -> tuple[list[Obj], list[Obj], dict[str, int]]:
    runs = [
        run("a", ("gpu-001", "gpu-002"), "Succeeded", "AllChecksPassed", released=True),
        run("b", ("gpu-003", "gpu-004"), "Failed", "CheckFailed"),
    ]
    nodes = [
        node("gpu-001", "Pass", False),
        node("gpu-002", "Pass", False),
        node("gpu-003", "Fail", True),
        node("gpu-004", "Pass", True),
    ]
    return runs, nodes, {"a": 0, "b": 0}


def test_the_expected_end_has_no_problem_and_is_settled() -> None:
    runs, nodes, codes = expected()
    assert outcome.problems(runs, nodes, codes) == []
    assert outcome.settled(runs, nodes, TERMINAL)


def test_every_node_unknown_is_a_problem() -> None:
    """The /tmp checkout failure: every Argo step failed, both Runs Inconclusive, no projection."""
    runs = [
        run("a", ("gpu-001", "gpu-002"), "Inconclusive", "CheckInconclusive"),
        run("b", ("gpu-003", "gpu-004"), "Inconclusive", "CheckInconclusive"),
    ]
    nodes = [node(f"gpu-00{i}", None, True) for i in range(1, 5)]
    found = outcome.problems(runs, nodes, {"a": 0, "b": 0})
    assert len([p for p in found if p.endswith("is Unknown, expected Pass") or "is Unknown" in p]) == 4
    assert any("ended Inconclusive" in p for p in found)
    assert not any("Succeeded but is not released" in p for p in found)


def test_the_report_waits_for_the_release_of_the_succeeded_run() -> None:
    runs, nodes, _ = expected()
    not_yet = copy.deepcopy(runs)
    not_yet[0]["status"]["conditions"] = [{"type": "Released", "status": "False"}]
    assert not outcome.settled(not_yet, nodes, TERMINAL)
    still_labelled = copy.deepcopy(nodes)
    still_labelled[0]["metadata"]["labels"][keys.RESERVED_BY_LABEL] = "uid"
    assert not outcome.settled(runs, still_labelled, TERMINAL)
    assert outcome.problems(runs, still_labelled, {"a": 0, "b": 0}) == [
        "Node gpu-001 is still reserved, expected released"
    ]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda r, n, c: r[1]["status"].update(phase="Succeeded", reason="AllChecksPassed"), "expected Failed"),
        (lambda r, n, c: n[2]["metadata"]["labels"].update({keys.certified_label(PROFILE): "Pass"}), "gpu-003 is Pass"),
        (lambda r, n, c: c.update(b=1), "verify b` exited 1"),
        (lambda r, n, c: r.pop(), "no Run of exactly gpu-003, gpu-004"),
        (lambda r, n, c: n[3]["metadata"]["labels"].pop(keys.RESERVED_BY_LABEL), "gpu-004 was released"),
    ],
)
def test_each_difference_is_named(change: Any, problem: str) -> None:
    runs, nodes, codes = expected()
    change(runs, nodes, codes)
    found = outcome.problems(runs, nodes, codes)
    assert any(problem in p for p in found), found


def test_unfinished_runs_are_not_settled() -> None:
    runs, nodes, _ = expected()
    runs[1]["status"]["phase"] = "Running"
    assert not outcome.settled(runs, nodes, TERMINAL)
    assert not outcome.settled(runs[:1], nodes, TERMINAL)
    nodes[3]["metadata"]["labels"].pop(keys.certified_label(PROFILE))
    runs[1]["status"]["phase"] = "Failed"
    assert not outcome.settled(runs, nodes, TERMINAL)


def test_the_portal_must_show_the_failed_burn_in_and_nothing_else_failing() -> None:
    burn_in = f"{PROFILE}/burn-in"
    good = {("gpu-003", burn_in): "Failed", ("gpu-001", burn_in): "Passed", ("gpu-003", "x"): "Passed"}
    assert outcome.portal_problems(good, burn_in) == []
    assert outcome.portal_problems({}, burn_in) == ["the portal showed no results"]
    bad = {**good, ("gpu-001", burn_in): "Unknown"}
    assert outcome.portal_problems(bad, burn_in) == [f"the portal shows gpu-001 {burn_in} Unknown, expected Passed"]
