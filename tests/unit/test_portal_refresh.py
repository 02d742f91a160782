"""How the portal's refresh (portal/sources.py) survives what the cluster throws at it, with
a stand-in API server: one Run whose evidence cannot be read or understood becomes Unknown
while every other Run is re-classified; an evidence read that failed is tried again; the
results of a deleted profile never turn healthy; and /readyz fails once the served snapshot
is older than its bound."""

import copy
from datetime import datetime, timedelta
from typing import Any

import pytest

from kubeio.errors import ApiError, Forbidden, NotFound, ServerError, TooManyRequests, TransportError
from portal import sources as portal_sources
from portal.health import node_health
from portal.sight import EVERYTHING
from portal.sources import Sources, reduce_profile
from shared.envelope import RunEvidence, ValidationResult, Verification
from tests.unit.test_envelope_builders import CHECK_CONFIG_MAPS, NOW, accepted, evidence, make_run

Obj = dict[str, Any]


def _cm_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps/{name}"


class _Kube:
    """GETs only: the objects it holds, or the error set for a path."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.fail: dict[str, ApiError] = {}

    async def get(self, path: str, **_: str) -> Obj:
        if path in self.fail:
            raise self.fail[path]
        if path not in self.objects:
            raise NotFound(404, "NotFound", "not found", "GET", path)
        return copy.deepcopy(self.objects[path])


class _Portal:
    """Sources over a stand-in API server, its caches filled by hand, its clock settable."""

    def __init__(self, now: datetime = NOW) -> None:
        self.kube = _Kube()
        self.now = now
        self.sources = Sources(self.kube, namespaces=["team-a"], cluster="test", clock=lambda: self.now)  # type: ignore[arg-type]
        for informer in self.sources.informers:
            informer.synced.set()
        self.add_profile("gpu-basic", "168h")  # the profile of tests/builders.py's Runs

    def add_run(self, run: Obj, config_map: Obj) -> None:
        meta, cm_meta = run["metadata"], config_map["metadata"]
        self.sources.runs[0].items[f"{meta['namespace']}/{meta['name']}"] = copy.deepcopy(run)
        self.sources.evidence[0].items[f"{meta['namespace']}/{cm_meta['name']}"] = cm_meta["uid"]
        self.kube.objects[_cm_path(meta["namespace"], cm_meta["name"])] = copy.deepcopy(config_map)
        digest = config_map["metadata"]["annotations"]["projectsignal.dev/evidence-digest"]
        for check in CHECK_CONFIG_MAPS.get(digest, {}).values():  # what the v2 document names
            if check is not None:
                name = check["metadata"]["name"]
                self.sources.evidence[0].items[f"{meta['namespace']}/{name}"] = check["metadata"]["uid"]
                self.kube.objects[_cm_path(meta["namespace"], name)] = copy.deepcopy(check)

    def add_node(self, name: str, uid: str) -> None:
        node = {"metadata": {"name": name, "uid": uid}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        self.sources.nodes.items[f"/{name}"] = node_health(node)

    def add_profile(self, name: str, freshness: str) -> None:
        profile = {
            "metadata": {"name": name, "generation": 1},
            "spec": {"freshness": freshness, "checks": [{"name": "inventory", "backend": "Pod"}]},
        }
        self.sources.profiles.items[f"/{name}"] = reduce_profile(profile)

    def row(self, node: str) -> Obj:
        summary = self.sources.index.node_summary(node, EVERYTHING)
        assert summary is not None, f"no summary for {node}"
        rows: list[Obj] = summary["checks"]
        assert len(rows) == 1, rows
        return rows[0]


def _run_on(name: str, node: str, node_uid: str, created: datetime = NOW - timedelta(hours=1)) -> Obj:
    run = make_run(name, participants=1)
    run["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    run["spec"]["participants"][0].update(nodeName=node, nodeUID=node_uid)
    return run


def _passed(portal: _Portal, name: str = "r1", node: str = "gpu-000", uid: str = "uid-0") -> tuple[Obj, Obj]:
    run, config_map, _, _ = accepted(_run_on(name, node, uid))
    portal.add_run(run, config_map)
    portal.add_node(node, uid)
    return run, config_map


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(ServerError(500, "InternalError", "etcdserver: request timed out"), id="server error"),
        pytest.param(TooManyRequests(429, "TooManyRequests", "slow down", retry_after=1), id="throttled"),
        pytest.param(TransportError("timed out"), id="no answer"),
    ],
)
async def test_a_failing_evidence_read_makes_only_its_run_unknown_and_is_tried_again(error: ApiError) -> None:
    portal = _Portal()
    _passed(portal, "r1", "gpu-000", "uid-0")
    await portal.sources.refresh()
    assert portal.row("gpu-000")["state"] == "Passed"
    _, other_cm = _passed(portal, "r2", "gpu-900", "uid-900")
    portal.kube.fail[_cm_path("team-a", other_cm["metadata"]["name"])] = error
    portal.add_node("gpu-000", "uid-0-replaced")
    await portal.sources.refresh()
    assert portal.row("gpu-000")["state"] == "Unknown", "the other Runs are re-classified (Node replaced)"
    failed = portal.row("gpu-900")
    assert (failed["state"], failed["reason"]) == ("Unknown", "Missing"), failed
    message = failed["result"]["verification"]["message"]
    assert other_cm["metadata"]["name"] in message, message
    assert "next refresh" in message, message
    portal.kube.fail.clear()
    await portal.sources.refresh()
    assert portal.row("gpu-900")["state"] == "Passed", "a failed read is not remembered: it is tried again"


async def test_readiness_fails_once_the_snapshot_is_older_than_its_bound() -> None:
    portal = _Portal()
    _passed(portal)
    assert not portal.sources.ready(), "not ready before the first snapshot"
    await portal.sources.refresh()
    assert portal.sources.ready()
    portal.now = NOW + timedelta(seconds=portal.sources.resync)
    assert portal.sources.ready(), "one resync period without a refresh is normal"
    portal.now = NOW + timedelta(seconds=3 * portal.sources.resync)
    assert not portal.sources.ready(), "refreshes have kept failing: /readyz must say so"
    await portal.sources.refresh()
    assert portal.sources.ready(), "a refresh that succeeds makes the portal ready again"


@pytest.mark.parametrize("shape", ["gone", ["gone"]], ids=["string", "list"])
async def test_malformed_check_evidence_is_unknown_and_stops_nothing(shape: object) -> None:
    portal = _Portal()
    _passed(portal, "r1", "gpu-000", "uid-0")
    await portal.sources.refresh()
    bad = _run_on("r3", "gpu-500", "uid-500")
    document = evidence(bad)
    document["cleanup"] = shape  # the controller records it as MalformedEvidence
    bad_run, bad_cm, _, _ = accepted(bad, [document])
    portal.add_run(bad_run, bad_cm)
    portal.add_node("gpu-500", "uid-500")
    portal.add_node("gpu-000", "uid-0-replaced")
    await portal.sources.refresh()
    assert (portal.row("gpu-500")["state"], portal.row("gpu-500")["reason"]) == ("Unknown", "Malformed")
    assert portal.row("gpu-000")["state"] == "Unknown", "the other Runs are re-classified (Node replaced)"


async def test_an_unexpected_error_in_one_run_gives_unknown_rows_not_an_older_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    portal = _Portal()
    _passed(portal, "old", "gpu-000", "uid-0")
    newer, newer_cm, _, _ = accepted(_run_on("new", "gpu-000", "uid-0", created=NOW - timedelta(minutes=30)))
    portal.add_run(newer, newer_cm)
    real_derive = portal_sources.derive

    def derive(run: Obj, found: RunEvidence, **kwargs: Any) -> list[ValidationResult]:
        if run["metadata"]["name"] == "new" and found.verification == Verification.VERIFIED:
            raise AttributeError("'str' object has no attribute 'get'")
        return real_derive(run, found, **kwargs)

    monkeypatch.setattr(portal_sources, "derive", derive)
    await portal.sources.refresh()
    row = portal.row("gpu-000")
    assert row["result"]["run"]["name"] == "new", "the newest Run's result is shown, not an older Pass"
    assert row["state"] == "Unknown", row
    assert "could not interpret" in row["result"]["verification"]["message"], row


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(Forbidden(403, "Forbidden", "configmaps is forbidden"), id="forbidden"),
        pytest.param(NotFound(404, "NotFound", "not found"), id="not found"),
    ],
)
async def test_an_evidence_read_refused_is_read_again_once_allowed(error: ApiError) -> None:
    portal = _Portal()
    _, config_map = _passed(portal)
    portal.kube.fail[_cm_path("team-a", config_map["metadata"]["name"])] = error
    await portal.sources.refresh()
    assert portal.row("gpu-000")["state"] == "Unknown"
    portal.kube.fail.clear()  # RBAC fixed; the ConfigMap readable
    portal.sources.runs[0].items["team-a/r1"]["metadata"]["resourceVersion"] = "2"
    await portal.sources.refresh()
    assert portal.row("gpu-000")["state"] == "Passed", "a refused read was cached for the life of the ConfigMap"


async def test_results_of_a_deleted_profile_never_turn_healthy() -> None:
    portal = _Portal(now=NOW + timedelta(hours=3))
    _passed(portal)
    portal.add_profile("gpu-basic", "1h")
    await portal.sources.refresh()
    assert portal.row("gpu-000")["state"] == "Stale"
    del portal.sources.profiles.items["/gpu-basic"]
    await portal.sources.refresh()
    row = portal.row("gpu-000")
    assert (row["state"], row["reason"]) == ("Unknown", "ProfileMissing"), "a Stale result turned back into Passed"
    assert "gpu-basic" in row["result"]["message"], row
    portal.now = NOW + timedelta(minutes=5)
    await portal.sources.refresh()
    assert portal.row("gpu-000")["state"] == "Unknown", "without its profile, even a recent Pass cannot be judged fresh"
    portal.add_profile("gpu-basic", "1h")
    await portal.sources.refresh()
    assert portal.row("gpu-000")["state"] == "Passed", "the profile back, its window applies again"
