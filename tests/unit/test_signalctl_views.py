"""The pure parts of signalctl's operator commands: table rows (signalctl/tables.py), the Run
description (signalctl/describe.py), request refusals and --wait progress
(signalctl/actions.py), error messages (signalctl/kubectx.py)."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from kubeio.errors import ApiError, Conflict, Forbidden, Invalid, NotFound, ServerError, TransportError
from shared import keys
from signalctl import actions, describe, tables
from signalctl.kubectx import explain

Obj = dict[str, Any]
NOW = datetime(2026, 11, 30, 1, 0, 0, tzinfo=UTC)


def run(
    name: str = "r1", *, nodes: int = 2, checks: int = 3, ns: str = "signal-system", uid: str = "u1", **status: Any
) -> Obj:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": "2026-11-30T00:55:00Z"},
        "spec": {
            "profile": {"name": "gpu", "uid": "p", "generation": 2},
            "checks": [{"name": f"c{i}", "backend": "Pod", "gpuCount": 8} for i in range(checks)],
            "participants": [{"index": i, "nodeName": f"n{i}", "nodeUID": f"nu{i}"} for i in range(nodes)],
        },
        "status": status,
    }


@pytest.mark.parametrize(
    ("verdicts", "cell"),
    [
        pytest.param([], "0/3 passed", id="nothing-decided-yet"),
        pytest.param(["Pass", "Pass"], "2/3 passed", id="two-of-three"),
        pytest.param(["Pass", "Fail", "Inconclusive"], "1/3 passed, 1 failed, 1 inconclusive", id="mixed"),
    ],
)
def test_checks_cell_counts_against_the_runs_checks(verdicts: list[str], cell: str) -> None:
    spec_checks = run()["spec"]["checks"]
    assert tables.checks_cell(spec_checks, [{"name": "x", "verdict": v} for v in verdicts]) == cell


def test_nodes_cell_shows_three_names_then_a_count() -> None:
    assert tables.nodes_cell(run(nodes=2)["spec"]["participants"]) == "n0,n1"
    assert tables.nodes_cell(run(nodes=5)["spec"]["participants"]) == "n0,n1,n2,+2"


def test_run_rows_sort_and_show_namespace_only_for_all_namespaces() -> None:
    runs = [run("b", phase="Succeeded", reason="AllChecksPassed"), run("a", ns="other"), run("a")]
    rows = tables.run_rows(runs, NOW)
    assert rows[0] == ["a", "gpu", "Pending", "", "n0,n1", "0/3 passed", "5m"]
    assert [r[0] for r in rows] == ["a", "a", "b"]
    assert rows[2][2:4] == ["Succeeded", "AllChecksPassed"]
    wide = tables.run_rows(runs, NOW, all_namespaces=True)
    assert [r[:2] for r in wide] == [["other", "a"], ["signal-system", "a"], ["signal-system", "b"]]
    text = tables.render(("NAMESPACE", *tables.RUN_HEADERS), wide)
    assert text.splitlines()[0].split() == ["NAMESPACE", "NAME", "PROFILE", "PHASE", "REASON", "NODES", "CHECKS", "AGE"]


def node(name: str, uid: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "uid": uid, "labels": labels}}


def test_describe_shows_status_verdicts_participants_and_events() -> None:
    r = run(
        phase="Failed",
        reason="CheckFailed",
        message="check 'c1' proved a failure",
        checkVerdicts=[{"name": "c0", "verdict": "Pass"}, {"name": "c1", "verdict": "Fail"}],
        evidence={"configMap": "r1-evidence", "digest": "sha256:abc", "bytes": 812},
        workflow={"name": "r1", "uid": "wf"},
        conditions=[{"type": "EvidencePersisted", "status": "True", "reason": "EvidenceVerified", "message": "ok"}],
    )
    label = keys.certified_label("gpu")
    nodes: dict[str, Obj | str | None] = {"n0": node("n0", "nu0", **{label: "Fail"}), "n1": node("n1", "other")}
    events = [
        {
            "metadata": {},
            "type": "Warning",
            "reason": "RunFailed",
            "message": "CheckFailed",
            "lastTimestamp": "2026-11-30T00:59:00Z",
        },
        {
            "metadata": {},
            "type": "Normal",
            "reason": "Admitted",
            "message": "ok",
            "lastTimestamp": "2026-11-30T00:55:00Z",
        },
    ]
    record = {"n0": {"verdict": "Fail", "nodeUID": "nu0"}, "n1": {"verdict": "Pass", "nodeUID": "nu1"}}
    text = describe.describe_run(r, nodes, events, NOW, record)
    assert "Phase:            Failed" in text
    assert "Message:          check 'c1' proved a failure" in text
    assert "Workflow:         r1 (uid wf)" in text
    assert "  Digest:           sha256:abc" in text
    checks = text.split("Checks:")[1].split("Participants:")[0].splitlines()[2:]
    assert [line.split()[1::3] for line in checks] == [["c0", "Pass"], ["c1", "Fail"], ["c2", "<pending>"]]
    participants = text.split("Participants:")[1].split("Events:")[0]
    assert "0       n0     nu0        Fail" in participants
    assert "<none> (Node replaced: uid now other)" in participants  # the record's entry is for nu1
    events_part = text.split("Events:")[1].splitlines()
    assert events_part[2].split()[:3] == ["Normal", "Admitted", "5m"]
    assert events_part[3].split()[:3] == ["Warning", "RunFailed", "1m"]


def test_describe_says_when_nodes_or_events_cannot_be_read() -> None:
    rows = describe.participant_rows(run(), {"n0": describe.UNREADABLE, "n1": None})
    assert [r[3] for r in rows] == ["<unreadable>", "<Node not found>"]
    assert "<could not read Events>" in describe.describe_run(run(), {}, None, NOW)


def test_describe_shows_signals_record_never_a_nodes_own_label() -> None:
    """A kubelet can label its own Node Pass (issue 12, item 6): describe shows the record."""
    label = keys.certified_label("gpu")
    forged = {"n0": node("n0", "nu0", **{label: "Pass"}), "n1": node("n1", "nu1", **{label: "Fail"})}
    rows = describe.participant_rows(run(), forged, {"n1": {"verdict": "Fail", "nodeUID": "nu1"}})
    assert [r[3] for r in rows] == ["<none> (Node label says Pass: not Signal's record)", "Fail"]
    assert describe.participant_rows(run(), forged, None)[0][3] == describe.UNREADABLE_RECORD


def reserved(name: str) -> Obj:
    detail = {"run": "holder", "namespace": "signal-system", "uid": "ru", "index": 0}
    return {
        "metadata": {
            "name": name,
            "labels": {keys.RESERVED_BY_LABEL: "ru"},
            "annotations": {keys.RESERVATION_ANNOTATION: json.dumps(detail)},
        }
    }


def test_request_refuses_missing_and_reserved_nodes_unless_forced() -> None:
    assert actions.request_problem("n0", node("n0", "u"), force=False) is None
    assert (
        actions.request_problem("gone", None, force=True) == "Node gone not found; list Nodes with `kubectl get nodes`"
    )
    problem = actions.request_problem("n1", reserved("n1"), force=False)
    assert problem is not None
    assert "Node n1 is reserved by Run signal-system/holder (uid ru)" in problem
    assert "--force" in problem
    assert actions.request_problem("n1", reserved("n1"), force=True) is None
    broken = reserved("n2")
    broken["metadata"]["annotations"] = {keys.RESERVATION_ANNOTATION: "not json"}
    assert actions.reservation_of(broken) == "the Run with uid ru"


def test_progress_prints_each_admission_and_phase_change_once() -> None:
    progress = actions.Progress(["n0", "n1"], known_runs={"old"}, profile="gpu")
    older = run("old-run", uid="old", phase="Succeeded")
    assert progress.observe([older]) == []
    fresh = run("r2", uid="new", phase="Admitted")
    lines = progress.observe([older, fresh])
    assert lines == [
        "Node n0: admitted into Run r2 as participant 0",
        "Node n1: admitted into Run r2 as participant 1",
        "Run signal-system/r2: Admitted",
    ]
    assert progress.observe([older, fresh]) == []
    assert not progress.done()
    fresh["status"] = {"phase": "Failed", "reason": "CheckFailed", "message": "c1 failed"}
    assert progress.observe([fresh]) == ["Run signal-system/r2: Failed (CheckFailed: c1 failed)"]
    assert progress.done()
    assert not progress.succeeded()


def test_progress_is_not_done_until_every_node_is_covered() -> None:
    progress = actions.Progress(["n0", "n9"], known_runs=set(), profile="gpu")
    progress.observe([run(uid="a", nodes=1, phase="Succeeded")])
    assert not progress.done()
    assert progress.observe([]) == ["Run with uid a was deleted"]


def test_one_run_wait_reports_changes_and_deletion() -> None:
    observe, done = actions.one_run("r1", actions.is_released)
    assert observe([run(phase="Canceled")]) == ["Run signal-system/r1: Canceled"]
    assert observe([run(phase="Canceled")]) == []
    assert not done()
    released = run(phase="Canceled", conditions=[{"type": "Released", "status": "True"}])
    assert observe([released]) == ["Run signal-system/r1: Canceled, released"]
    assert done()
    observe, done = actions.one_run("r1", actions.is_released)
    assert observe([]) == ["Run r1 was deleted"]
    assert done()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(
            NotFound(404, "NotFound", "gone"), "Run ns/x not found; list Runs with `signalctl get runs -A`", id="404"
        ),
        pytest.param(
            Forbidden(403, "Forbidden", "no"),
            "not allowed to get Run ns/x: no; use a kubeconfig whose user may get it",
            id="403",
        ),
        pytest.param(Invalid(422, "Invalid", "cel"), "the API server refused to get Run ns/x: cel", id="422"),
        pytest.param(Conflict(409, "Conflict", "rv"), "it changed meanwhile (rv); run the command again", id="409"),
        pytest.param(
            ServerError(500, "InternalError", "boom"), "the API server failed to get Run ns/x: boom; retry", id="500"
        ),
        pytest.param(
            ApiError(401, "Unauthorized", "token"), "could not get Run ns/x: HTTP 401 Unauthorized: token", id="401"
        ),
        pytest.param(
            TransportError("cannot connect to https://h:9: refused"),
            "could not get Run ns/x: no answer from the API server (cannot connect to https://h:9: refused); "
            "check the kubeconfig and the cluster",
            id="no answer",
        ),
    ],
)
def test_errors_say_what_failed_for_which_object_and_what_to_do(error: ApiError, expected: str) -> None:
    assert expected in explain(error, "get", "Run ns/x", "list Runs with `signalctl get runs -A`")
