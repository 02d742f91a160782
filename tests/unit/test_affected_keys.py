"""controller/rules/affected.py: the keys a change of a cached object queues, table-tested (what
the loop's cache handlers add, controller/process/loop.py)."""

from typing import Any

import pytest

from controller.rules.affected import by_node, by_profile, by_run, by_workflow
from controller.rules.nodes import NodeView
from controller.rules.queuekeys import GROUPS, Key, Kind
from controller.rules.runview import RunView, run_view
from shared import keys
from tests.unit.node_builders import make_node

NS = "signal"


def run(name: str, phase: str, profile: str = "p") -> RunView:
    return run_view(
        {
            "metadata": {"name": name, "namespace": NS, "uid": f"u-{name}", "resourceVersion": "1"},
            "spec": {"profile": {"name": profile, "uid": "p-1", "generation": 1}, "participants": []},
            "status": {"phase": phase},
        }
    )


def profile(generation: int) -> dict[str, Any]:
    return {"metadata": {"name": "p", "generation": generation}}


def workflow(run_name: str | None) -> dict[str, Any]:
    labels = {keys.RUN_NAME_LABEL: run_name} if run_name else {}
    return {"metadata": {"name": "wf", "labels": labels}}


RUN = Key(Kind.RUN, "r1")
PROFILE = Key(Kind.PROFILE, "p")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, run("r1", "Pending"), [RUN, PROFILE, GROUPS], id="created"),
        pytest.param(run("r1", "Running"), None, [RUN, PROFILE, GROUPS], id="deleted"),
        pytest.param(run("r1", "Running"), run("r1", "Running"), [RUN], id="same-phase: itself only"),
        pytest.param(
            run("r1", "Running"),
            run("r1", "Succeeded", profile="q"),
            [RUN, PROFILE, Key(Kind.PROFILE, "q"), GROUPS],
            id="phase-changed: both profiles and the groups",
        ),
    ],
)
def test_a_run_change(old: RunView | None, new: RunView | None, expected: list[Key]) -> None:
    assert by_run(f"{NS}/r1", old, new) == expected


def test_a_profile_change_queues_its_runs_only_when_its_generation_changed() -> None:
    runs = [run("r1", "Running"), run("r2", "Running", profile="q"), run("r3", "Pending")]
    assert by_profile("/p", profile(1), profile(1), runs) == [PROFILE]
    assert by_profile("/p", profile(1), profile(2), runs) == [PROFILE, RUN, Key(Kind.RUN, "r3")]
    assert by_profile("/p", None, profile(1), []) == [PROFILE]


def node(*, requested: str = "", run_name: str = "", namespace: str = NS) -> NodeView:
    builder = make_node("n1")
    if requested:
        builder.requested(requested)
    if run_name:
        builder.reserved_by(f"u-{run_name}", {"run": run_name, "namespace": namespace, "index": 0})
    return builder.view()


PROFILES = {"/p": {}, "/q": {}}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(node(), node(), [], id="nothing of Signal's"),
        pytest.param(node(requested="p"), node(requested="p"), [PROFILE, PROFILE], id="requested, unchanged"),
        pytest.param(
            node(requested="p"),
            node(run_name="r1"),
            [PROFILE, RUN, PROFILE, Key(Kind.PROFILE, "q"), GROUPS],
            id="reserved: every profile and the groups",
        ),
        pytest.param(
            node(run_name="r1", namespace="other"),
            node(run_name="r1", namespace="other"),
            [],
            id="another namespace's Run is not ours",
        ),
        pytest.param(
            node(run_name="r1"), None, [RUN, PROFILE, Key(Kind.PROFILE, "q"), GROUPS], id="a reserved Node deleted"
        ),
    ],
)
def test_a_node_change(old: NodeView | None, new: NodeView | None, expected: list[Key]) -> None:
    assert by_node(old, new, namespace=NS, profiles=PROFILES) == expected


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, workflow("r1"), [RUN, GROUPS], id="created"),
        pytest.param(workflow("r1"), workflow("r1"), [RUN, RUN], id="changed"),
        pytest.param(workflow(None), workflow(None), [], id="not a Run's"),
        pytest.param(workflow("r1"), None, [RUN, GROUPS], id="deleted"),
    ],
)
def test_a_workflow_change(old: dict[str, Any] | None, new: dict[str, Any] | None, expected: list[Key]) -> None:
    assert by_workflow(old, new) == expected
