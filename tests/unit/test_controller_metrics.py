"""The controller's metrics (issue 45): the pure counts behind the fleet gauges
(controller/rules/fleetstats.py) as tables, the work queue's observation hooks, and the series the
metrics module exposes once they are set."""

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest

from controller.reconcile import metrics
from controller.rules import fleetstats
from controller.rules.nodes import NodeView, node_view
from controller.rules.runview import RunView, run_view
from controller.rules.workqueue import Backoff, TokenBucket, WorkQueue
from shared import certified, keys
from shared.run import Phase

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, *, results: Mapping[str, str] | None = None, held_by: str = "") -> NodeView:
    labels = {certified.trusted_label(p): r for p, r in (results or {}).items()}
    annotations: dict[str, str] = {}
    taints = []
    if held_by:
        labels[keys.RESERVED_BY_LABEL] = held_by
        annotations[keys.RESERVATION_ANNOTATION] = json.dumps({"run": held_by, "namespace": "ns", "index": 0})
        taints.append({"key": keys.RESERVED_TAINT_KEY, "value": held_by, "effect": "NoSchedule"})
    return node_view(
        {
            "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels, "annotations": annotations},
            "spec": {"taints": taints},
        }
    )


def run(
    uid: str,
    phase: str,
    *,
    started: datetime | None = None,
    completed: datetime | None = None,
    deadline: int | None = 600,
    created: datetime | None = None,
) -> RunView:
    status: dict[str, Any] = {"phase": phase}
    if started is not None:
        status["startTime"] = iso(started)
    if completed is not None:
        status["completionTime"] = iso(completed)
    spec: dict[str, Any] = {"profile": {"name": "gpu"}}
    if deadline is not None:
        spec["suiteDeadlineSeconds"] = deadline
    meta: dict[str, Any] = {"name": uid, "namespace": "ns", "uid": uid}
    if created is not None:
        meta["creationTimestamp"] = iso(created)
    return run_view({"metadata": meta, "spec": spec, "status": status})


# -- Nodes by profile and result ------------------------------------------------------------


@pytest.mark.parametrize(
    ("profiles", "nodes", "expected"),
    [
        pytest.param(["gpu"], [], {("gpu", r): 0 for r in fleetstats.RESULTS}, id="every result present, 0"),
        pytest.param(
            ["gpu", "net"],
            [
                node("a", results={"gpu": "Pass", "net": "Fail"}),
                node("b", results={"gpu": "Pass"}),
                node("c", results={"gpu": "Stale", "net": "Inconclusive"}),
                node("d"),
            ],
            {("gpu", r): 0 for r in fleetstats.RESULTS}
            | {("net", r): 0 for r in fleetstats.RESULTS}
            | {("gpu", "Pass"): 2, ("gpu", "Stale"): 1, ("net", "Fail"): 1, ("net", "Inconclusive"): 1},
            id="counted per profile",
        ),
        pytest.param(
            ["gpu"],
            [node("a", results={"gpu": "Pass", "other": "Fail"})],
            {("gpu", r): 0 for r in fleetstats.RESULTS} | {("gpu", "Pass"): 1},
            id="a profile not served is not counted",
        ),
        pytest.param(
            ["gpu"],
            [node("a", results={"gpu": "Healthy"})],
            {("gpu", r): 0 for r in fleetstats.RESULTS} | {("gpu", fleetstats.UNKNOWN): 1},
            id="a value Signal never writes is Unknown, never Pass",
        ),
    ],
)
def test_nodes_by_result(profiles: list[str], nodes: list[NodeView], expected: dict[tuple[str, str], int]) -> None:
    assert fleetstats.nodes_by_result(profiles, nodes) == expected


def test_nodes_by_result_reads_only_the_label_kubelets_cannot_write() -> None:
    kubelet_written = node_view({"metadata": {"name": "a", "labels": {keys.certified_label("gpu"): "Pass"}}})
    assert fleetstats.nodes_by_result(["gpu"], [kubelet_written])[("gpu", "Pass")] == 0


# -- held reservations -------------------------------------------------------------------------


def held_table() -> list[Any]:
    zero = {p: fleetstats.Held(0, 0.0) for p in fleetstats.HOLDING_PHASES}
    return [
        pytest.param([], [], zero, id="nothing held"),
        pytest.param(
            [node("a", held_by="r1"), node("b", held_by="r1")],
            [run("r1", Phase.RUNNING, started=NOW - timedelta(hours=3))],
            zero,
            id="a running Run's reservation is no hold",
        ),
        pytest.param(
            [node("a", held_by="r1")],
            [run("r1", Phase.SUCCEEDED, completed=NOW - timedelta(hours=3))],
            zero,
            id="a Succeeded Run not yet released is no hold",
        ),
        pytest.param(
            [node("a", held_by="r1"), node("b", held_by="r1"), node("c", held_by="r2"), node("d", held_by="r3")],
            [
                run("r1", Phase.FAILED, completed=NOW - timedelta(hours=2)),
                run("r2", Phase.FAILED, completed=NOW - timedelta(minutes=5)),
                run("r3", Phase.CANCELED, completed=NOW - timedelta(minutes=1)),
            ],
            zero | {"Failed": fleetstats.Held(3, 7200.0), "Canceled": fleetstats.Held(1, 60.0)},
            id="counted by phase, the oldest since the Run ended",
        ),
        pytest.param(
            [node("a", held_by="r1")],
            [run("r1", Phase.INCONCLUSIVE, started=NOW - timedelta(minutes=10))],
            zero | {"Inconclusive": fleetstats.Held(1, 600.0)},
            id="no completion time: since the start",
        ),
        pytest.param(
            [node("a", held_by="r1")],
            [run("r1", Phase.FAILED)],
            zero | {"Failed": fleetstats.Held(1, 0.0)},
            id="no time at all: counted, age 0",
        ),
        pytest.param(
            [node("a", held_by="gone")],
            [],
            zero,
            id="an orphaned reservation is recovery's, not a hold",
        ),
    ]


@pytest.mark.parametrize(("nodes", "runs", "expected"), held_table())
def test_held(nodes: list[NodeView], runs: list[RunView], expected: dict[str, fleetstats.Held]) -> None:
    assert fleetstats.held(nodes, runs, NOW) == expected


# -- Runs past their suite deadline ------------------------------------------------------------


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        pytest.param([run("r", Phase.RUNNING, started=NOW - timedelta(seconds=599))], 0, id="within"),
        pytest.param([run("r", Phase.RUNNING, started=NOW - timedelta(seconds=601))], 1, id="past"),
        pytest.param([run("r", Phase.FAILED, started=NOW - timedelta(hours=5))], 0, id="an ended Run is never late"),
        pytest.param([run("r", Phase.PENDING)], 0, id="not started"),
        pytest.param([run("r", Phase.ADMITTED, started=NOW - timedelta(hours=1), deadline=None)], 0, id="no deadline"),
        pytest.param(
            [run(f"r{i}", Phase.RUNNING, started=NOW - timedelta(hours=i)) for i in range(3)], 2, id="counted"
        ),
    ],
)
def test_past_deadline(runs: list[RunView], expected: int) -> None:
    assert fleetstats.past_deadline(runs, NOW) == expected


# -- check and Run durations ---------------------------------------------------------------------


def evidence(started: str | None, collected: str | None) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if started is not None:
        results["startedAt"] = started
    if collected is not None:
        results["collectedAt"] = collected
    return {"results": results}


@pytest.mark.parametrize(
    ("checks", "expected"),
    [
        pytest.param(
            [("inv", "Pass", evidence("2026-12-07T10:00:00Z", "2026-12-07T10:01:30Z"))],
            [("inv", "Pass", 90.0)],
            id="start to collection",
        ),
        pytest.param(
            [("inv", "Fail", evidence("2026-12-07T10:00:00.250000+00:00", "2026-12-07T10:00:01+00:00"))],
            [("inv", "Fail", 0.75)],
            id="fractions and offsets",
        ),
        pytest.param([("inv", "Inconclusive", None)], [], id="no evidence: no duration"),
        pytest.param([("inv", "Pass", evidence("2026-12-07T10:00:00Z", None))], [], id="no collection time"),
        pytest.param([("inv", "Pass", evidence("yesterday", "2026-12-07T10:00:00Z"))], [], id="unreadable"),
        pytest.param([("inv", "Pass", evidence("2026-12-07T10:00:01Z", "2026-12-07T10:00:00Z"))], [], id="backwards"),
        pytest.param([("inv", "Pass", {"results": "x"})], [], id="results not an object"),
    ],
)
def test_check_durations(checks: list[Any], expected: list[tuple[str, str, float]]) -> None:
    assert fleetstats.check_durations(checks) == expected


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        pytest.param(iso(NOW - timedelta(minutes=3)), 180.0, id="creation to now"),
        pytest.param(None, None, id="no creation time"),
        pytest.param("soon", None, id="unreadable"),
        pytest.param(iso(NOW + timedelta(minutes=3)), 0.0, id="clock skew: never negative"),
    ],
)
def test_run_duration(created: str | None, expected: float | None) -> None:
    assert fleetstats.run_duration({"metadata": {"creationTimestamp": created}}, NOW) == expected


def test_depth_by_kind() -> None:
    assert fleetstats.depth_by_kind(["Run", "Profile"], ["Run", "Run", "NodeGroups"]) == {
        "Run": 2,
        "Profile": 0,
        "NodeGroups": 1,
    }


# -- the work queue's hooks ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_queue_reports_each_keys_wait_and_each_retry() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(
        backoff=Backoff(base=1.0, jitter=0.0), bucket=TokenBucket(rate=1000.0, burst=1000), clock=clock
    )
    waits: list[tuple[str, float]] = []
    retries: list[str] = []
    queue.on_wait = lambda key, seconds: waits.append((key, seconds))
    queue.on_retry = retries.append
    queue.add("a")
    clock.now += 2.0
    queue.add("b")
    assert queue.queued() == ("a", "b")
    clock.now += 1.0
    assert queue.pop_ready(clock.now) == "a"
    assert queue.pop_ready(clock.now) == "b"
    assert waits == [("a", 3.0), ("b", 1.0)]
    queue.done("a")
    assert queue.add_rate_limited("a") == 1.0
    assert retries == ["a"]
    clock.now += 5.0  # due at 104, taken at 108: it waited 4 s in the queue, not 5
    assert queue.pop_ready(clock.now) == "a"
    assert waits[-1] == ("a", 4.0)


# -- the series exposed -----------------------------------------------------------------------------


def test_the_fleet_gauges_follow_the_caches_and_drop_a_deleted_profile() -> None:
    nodes = [node("a", results={"gpu": "Fail"}, held_by="r1"), node("b", results={"old": "Pass"})]
    runs = [
        run("r1", Phase.FAILED, completed=NOW - timedelta(hours=2)),
        run("r2", Phase.RUNNING, started=NOW - timedelta(hours=1)),
    ]
    metrics.refresh_fleet(["gpu", "old"], nodes, runs, NOW)
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'signal_nodes{profile="gpu",result="Fail"} 1.0' in text
    assert 'signal_nodes{profile="old",result="Pass"} 1.0' in text
    assert 'signal_nodes_held{phase="Failed"} 1.0' in text
    assert 'signal_held_reservation_oldest_age_seconds{phase="Failed"} 7200.0' in text
    assert "signal_runs_past_deadline 1.0" in text
    # Runs by phase and reserved Nodes are counted at the scrape too, never left at the value
    # of the last fleet-wide pass (make test on 6dc7556: a Succeeded Run still counted Running).
    assert 'signal_runs{phase="Failed"} 1.0' in text
    assert 'signal_runs{phase="Running"} 1.0' in text
    assert 'signal_runs{phase="Succeeded"} 0.0' in text
    assert "signal_nodes_reserved 1.0" in text
    metrics.refresh_fleet(["gpu"], nodes, runs, NOW)
    assert 'signal_nodes{profile="old"' not in generate_latest(metrics.REGISTRY).decode()
    assert 'signal_projection_tampered_total{profile="gpu"} 0.0' in text


def test_requests_checks_and_runs_are_observed() -> None:
    metrics.observe_request("PATCH", "409", 0.02)
    metrics.observe_checks("gpu", [("burn", "Fail", evidence("2026-12-07T10:00:00Z", "2026-12-07T10:00:40Z"))])
    metrics.observe_terminal(
        {"metadata": {"creationTimestamp": iso(NOW - timedelta(seconds=45))}}, Phase.INCONCLUSIVE, NOW
    )
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'signal_api_requests_total{code="409",verb="PATCH"}' in text
    assert 'signal_api_request_duration_seconds_bucket{le="0.025",verb="PATCH"}' in text
    assert 'signal_check_duration_seconds_bucket{check="burn",le="60.0",profile="gpu",verdict="Fail"}' in text
    assert 'signal_run_duration_seconds_bucket{le="60.0",phase="Inconclusive"}' in text
