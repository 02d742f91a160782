"""The observability pack against the real tools (issue 45 part 2): ``promtool`` checks the
PrometheusRule's rules and runs the unit tests of every alert
(deploy/monitoring/tests/rules-test.yaml); a real Prometheus (localcluster/prometheus/build.sh),
scraping the real controller on loopback while it runs a Run that fails, answers queries for
the controller's metrics, and evaluates every rule without error. The same metrics are read
from the controller's own /metrics."""

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from localcluster.cluster import LocalCluster
from localcluster.controlplane import free_port
from localcluster.kube import KubeClient, Obj
from shared.digests import bundle_digest
from tests.controller_support import ControllerProcess, World, eventually, install_rbac, profile_body
from tests.prometheus_support import RULE, Prometheus, promtool, rules_file
from tests.realnode_support import install_workflow_template

REPO = Path(__file__).resolve().parents[2]
RULE_TESTS = REPO / "deploy" / "monitoring" / "tests" / "rules-test.yaml"
SCRIPTS = {
    # Participant 1 fails the first check: the Run ends Failed and holds both Nodes.
    # The check runs for 8 s, so that Prometheus scrapes the controller several times while the
    # Run is Running (it ended within 2.3 s of its creation otherwise: between two scrapes).
    "flaky.sh": "#!/bin/sh\nsleep 8\nif [ \"$SIGNAL_PARTICIPANT_INDEX\" = 1 ]; then echo 'XID 79' >&2; exit 1; fi\n",
    "nccl.sh": "#!/bin/sh\necho ok\n",
}


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool()), *args], capture_output=True, text=True, check=False)


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    result = _promtool("check", "rules", str(rules_file(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_promtool_unit_tests_every_alert(tmp_path: Path) -> None:
    rules_file(tmp_path)
    (tmp_path / "rules-test.yaml").write_text(RULE_TESTS.read_text())
    result = _promtool("test", "rules", str(tmp_path / "rules-test.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_alert_tests_fail_when_a_threshold_moves(tmp_path: Path) -> None:
    """The unit tests can fail: the same tests over a rule whose threshold was doubled."""
    spec = yaml.safe_load(RULE.read_text())["spec"]
    for group in spec["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "SignalNodeHeldAfterFailure":
                rule["expr"] = rule["expr"].replace("> 21600", "> 43200")
    rules_file(tmp_path, spec)
    (tmp_path / "rules-test.yaml").write_text(RULE_TESTS.read_text())
    result = _promtool("test", "rules", str(tmp_path / "rules-test.yaml"))
    assert result.returncode != 0, result.stdout
    assert "SignalNodeHeldAfterFailure" in result.stdout + result.stderr


@pytest.fixture
async def world(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[World]:
    w = World(cluster, admin, namespace)
    await w.setup(scripts=SCRIPTS)
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    await install_workflow_template(admin, namespace)
    yield w
    await w.cleanup()
    for name in w.node_names(2):
        await cluster.remove_node(name)


def _checks() -> list[dict[str, Any]]:
    return [
        {"name": "inventory", "scriptKey": "flaky.sh", "backend": "Pod", "gpuCount": 1, "backendActiveDeadline": "60s"},
        {"name": "nccl", "scriptKey": "nccl.sh", "backend": "Pod", "gpuCount": 1, "backendActiveDeadline": "90s"},
    ]


def _value(vector: list[dict[str, Any]]) -> float:
    assert len(vector) == 1, vector
    return float(vector[0]["value"][1])


async def test_prometheus_scrapes_the_controller_during_a_run(world: World, tmp_path: Path) -> None:
    profile = f"{world.namespace}-obs"
    names = world.node_names(2)
    await world.add_nodes(names, requested_for=profile)
    body = profile_body(profile, world.namespace, 2, digest=bundle_digest(SCRIPTS, {}), checks=_checks())
    await world.add_profile(body)
    controller = ControllerProcess(
        world.cluster,
        world.namespace,
        tmp_path / "controller",
        resync=2.0,
        workflow_instance_id=world.cluster.workflow_instance_id,
        metrics_port=free_port(),
    )
    controller.workdir.mkdir()
    (tmp_path / "prometheus").mkdir()
    prometheus = Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{controller.metrics_port}"])
    prometheus.start()
    try:
        await prometheus.ready()
        await controller.start()

        async def running() -> bool:  # at any scrape so far: the Run may end between two of them
            seen = 'max(max_over_time(signal_runs{phase="Running"}[10m])) or vector(0)'
            return _value(await prometheus.query(seen)) == 1

        await eventually(
            running, timeout=180, interval=1.0, what=f"a Running Run seen by Prometheus\n{controller.logs()}"
        )

        async def finished() -> Obj | None:
            runs = await world.runs()
            return next((r for r in runs if (r.get("status") or {}).get("phase") == "Failed"), None)

        run = await eventually(finished, timeout=240, interval=1.0, what=f"a Failed Run\n{controller.logs()}")

        async def held() -> bool:
            found = await prometheus.query(f'signal_nodes{{profile="{profile}",result="Fail"}} == 1')
            held = await prometheus.query('signal_nodes_held{phase="Failed"} == 2')
            return bool(found and held)

        await eventually(held, timeout=60, interval=1.0, what="the Failed Run's Nodes counted by Prometheus")
        expectations = {
            "signal_build_info": lambda v: v == 1,
            "signal_leader": lambda v: v == 1,
            'min(signal_informer_synced{resource=~"nodes|profiles|runs|workflows"})': lambda v: v == 1,
            'count(signal_informer_synced{resource=~"nodes|profiles|runs|workflows"})': lambda v: v == 4,
            'signal_reconcile_duration_seconds_count{kind="Run"}': lambda v: v > 0,
            'signal_reconcile_duration_seconds_count{kind="Profile"}': lambda v: v > 0,
            'signal_workqueue_queue_duration_seconds_count{kind="Run"}': lambda v: v > 0,
            "count(signal_workqueue_depth)": lambda v: v == 3,
            "count(signal_workqueue_retries_total)": lambda v: v == 3,
            'sum(signal_api_requests_total{verb="LIST",code="200"})': lambda v: v >= 4,
            'sum(signal_api_requests_total{verb="WATCH",code="200"})': lambda v: v >= 4,
            'sum(signal_api_requests_total{verb="PATCH",code="200"})': lambda v: v > 0,
            'sum(signal_api_requests_total{verb="PUT",code="200"})': lambda v: v > 0,  # the Lease
            'sum(signal_api_request_duration_seconds_count{verb="POST"})': lambda v: v > 0,
            'signal_check_duration_seconds_count{check="inventory",verdict="Fail"}': lambda v: v == 1,
            f'signal_check_duration_seconds_sum{{profile="{profile}",check="inventory"}}': lambda v: 0 < v < 120,
            'signal_run_duration_seconds_count{phase="Failed"}': lambda v: v == 1,
            'signal_runs_finished_total{phase="Failed"}': lambda v: v == 1,
            f'signal_nodes{{profile="{profile}",result="Inconclusive"}}': lambda v: v == 1,
            f'signal_nodes{{profile="{profile}",result="Pass"}}': lambda v: v == 0,
            'signal_held_reservation_oldest_age_seconds{phase="Failed"}': lambda v: 0 <= v < 600,
            'signal_held_reservation_oldest_age_seconds{phase="Canceled"}': lambda v: v == 0,
            "signal_runs_past_deadline": lambda v: v == 0,
            "signal_admission_seconds_count": lambda v: v == 1,
            "signal_evidence_rejected_total": lambda v: v == 0,
            f'signal_projection_tampered_total{{profile="{profile}"}}': lambda v: v == 0,
        }
        wrong = {}
        for expr, expected in expectations.items():
            value = _value(await prometheus.query(expr))
            if not expected(value):
                wrong[expr] = value
        assert wrong == {}, (wrong, run["status"].get("phase"))
        # The Run was seen while it ran, not only once it ended.
        assert _value(await prometheus.query('max_over_time(signal_runs{phase="Running"}[10m])')) == 1

        # Every rule evaluates against the real series without error, and none fires.
        async with httpx.AsyncClient(timeout=10.0) as http:
            rules = (await http.get(f"{prometheus.url}/api/v1/rules")).json()["data"]["groups"]
        evaluated = [(r["name"], r["health"], r.get("lastError", "")) for g in rules for r in g["rules"]]
        assert len(evaluated) == 7
        assert {h for _, h, _ in evaluated} == {"ok"}, evaluated
        assert await prometheus.query('ALERTS{alertstate="firing"}') == []

        # The controller's own /metrics says the same.
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://127.0.0.1:{controller.metrics_port}/metrics")).text
        for line in (
            f'signal_nodes{{profile="{profile}",result="Fail"}} 1.0',
            'signal_nodes_held{phase="Failed"} 2.0',
            'signal_check_duration_seconds_count{check="inventory",profile="' + profile + '",verdict="Fail"} 1.0',
            "signal_leader 1.0",
        ):
            assert line in text, line
    finally:
        controller.stop()
        prometheus.stop()
