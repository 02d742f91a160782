"""Acceptance against a corpus of adversarial evidence (issue 5, acceptance 2 and 4), on the
real API server: the controller's own acceptance code (controller/reconcile/accept.py) reads crafted
check evidence ConfigMaps and Nodes through the API, decides, persists the Run's evidence
and projects. A valid document is the control: it must give Succeeded and Pass."""

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.reconcile.accept import accept, check_evidence_name
from controller.reconcile.state import Context
from controller.rules.runview import run_view
from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import KubeClient, resource_path
from shared import certified, keys
from tests import evidence_builders as eb
from tests.controller_support import install_rbac
from tests.run_builders import running_run, store, stored_run_evidence, workflow_status

pytestmark = pytest.mark.asyncio(loop_scope="session")
API = keys.API_VERSION
PROFILE = "corpus"
STARTED = "2026-11-30T00:00:00Z"


@pytest.fixture
async def ctx(cluster: LocalCluster, namespace: str) -> AsyncIterator[Context]:
    kube = Kube(identities.admin(cluster.plane).endpoint(), field_manager="signal-controller")
    yield Context(kube, namespace, "corpus-test")
    await kube.close()


async def _nodes(cluster: LocalCluster, prefix: str, count: int = 2) -> list[dict[str, Any]]:
    return await cluster.add_nodes([SimNode(f"{prefix}-{i}") for i in range(count)])


async def _accept(ctx: Context, admin: KubeClient, run: dict[str, Any], workflow: dict[str, Any]) -> dict[str, Any]:
    await accept(ctx, run_view(run), workflow, deadline_passed=False)
    return await admin.get(resource_path(API, keys.RUN_PLURAL, ctx.namespace, run["metadata"]["name"]))


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return node["metadata"].get("labels") or {}


async def test_valid_evidence_is_the_control(ctx: Context, cluster: LocalCluster, admin: KubeClient) -> None:
    await install_rbac(admin, ctx.namespace)
    nodes = await _nodes(cluster, f"{ctx.namespace}-ok")
    run = await running_run(admin, ctx.namespace, nodes, PROFILE, started=STARTED)
    document = eb.check_evidence(run)
    await store(admin, ctx.namespace, check_evidence_name(run["metadata"]["name"], 0), eb.config_map("x", document))
    done = await _accept(ctx, admin, run, workflow_status(run, {0: eb.digest_of(document)}))
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["checkVerdicts"] == [{"name": "check-0", "verdict": "Pass"}]
    run_doc = await stored_run_evidence(admin, done)
    assert run_doc["checks"][0]["digest"] == eb.digest_of(document)
    assert run_doc["checks"][0]["evidence"] == document
    for node in nodes:
        live = await admin.get(resource_path("v1", "nodes", name=node["metadata"]["name"]))
        assert _labels(live)[keys.certified_label(PROFILE)] == "Pass"
        condition = next(c for c in live["status"]["conditions"] if c["type"] == keys.certified_label(PROFILE))
        assert condition["status"] == "True"
        assert any(c["type"] == "Ready" for c in live["status"]["conditions"])
    # Repeating the acceptance changes nothing (the recorded decision stands).
    again = await _accept(ctx, admin, done, workflow_status(run, {0: eb.digest_of(document)}))
    assert again["status"]["evidence"] == done["status"]["evidence"]


RAW_CASES = {
    "truncated-gzip": eb.truncated_gzip,
    "non-canonical-json": eb.non_canonical,
    "oversized-document": eb.oversized,
}


@pytest.mark.parametrize(
    "case",
    [
        *eb.DOCUMENT_MUTATIONS,
        *RAW_CASES,
        "missing-evidence",
        "not-owned-by-the-run",
        "mutable-config-map",
        "digest-of-a-different-document",
        "workflow-failed",
        "second-check-missing",
    ],
)
async def test_adversarial_evidence_never_passes(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, case: str
) -> None:
    await install_rbac(admin, ctx.namespace)
    nodes = await _nodes(cluster, f"{ctx.namespace}-{case[:20]}")
    run = await running_run(
        admin, ctx.namespace, nodes, PROFILE, 2 if case == "second-check-missing" else 1, started=STARTED
    )
    valid = eb.check_evidence(run)
    name = check_evidence_name(run["metadata"]["name"], 0)
    reported = {0: eb.digest_of(valid)}
    phase = "Succeeded"
    if case in eb.DOCUMENT_MUTATIONS:
        bad = eb.DOCUMENT_MUTATIONS[case](valid)
        await store(admin, ctx.namespace, name, eb.config_map(name, bad, owner=run))
        reported = {0: eb.digest_of(bad)}  # even when the adapter reported exactly this document
    elif case in RAW_CASES:
        await store(admin, ctx.namespace, name, eb.config_map(name, None, raw=RAW_CASES[case](valid), owner=run))
    elif case == "not-owned-by-the-run":
        stranger = {"metadata": {"name": "stranger", "uid": str(uuid.uuid4())}}
        await store(admin, ctx.namespace, name, eb.config_map(name, valid, owner=stranger))
    elif case == "mutable-config-map":
        await store(admin, ctx.namespace, name, eb.config_map(name, valid, immutable=False))
    elif case == "digest-of-a-different-document":
        await store(admin, ctx.namespace, name, eb.config_map(name, valid))
        other = eb.check_evidence(run, verdicts={1: "Fail"})
        reported = {0: eb.digest_of(other)}
    elif case == "workflow-failed":
        await store(admin, ctx.namespace, name, eb.config_map(name, valid))
        phase = "Failed"
    elif case == "second-check-missing":
        await store(admin, ctx.namespace, name, eb.config_map(name, valid))
    done = await _accept(ctx, admin, run, workflow_status(run, reported, phase))
    assert done["status"]["phase"] in {"Inconclusive", "Failed"}, done["status"]
    assert done["status"]["phase"] != "Succeeded"
    for node in nodes:
        live = await admin.get(resource_path("v1", "nodes", name=node["metadata"]["name"]))
        assert _labels(live).get(keys.certified_label(PROFILE)) != "Pass"
        assert _labels(live).get(keys.certified_label(PROFILE)) in {"Inconclusive", "Fail"}


async def test_replaced_node_gets_nothing_and_run_is_inconclusive(
    ctx: Context, cluster: LocalCluster, admin: KubeClient
) -> None:
    await install_rbac(admin, ctx.namespace)
    nodes = await _nodes(cluster, f"{ctx.namespace}-rep")
    run = await running_run(admin, ctx.namespace, nodes, PROFILE, started=STARTED)
    document = eb.check_evidence(run)
    await store(admin, ctx.namespace, check_evidence_name(run["metadata"]["name"], 0), eb.config_map("x", document))
    replaced = nodes[1]["metadata"]["name"]
    await cluster.remove_node(replaced)
    await cluster.add_nodes([SimNode(replaced)])
    done = await _accept(ctx, admin, run, workflow_status(run, {0: eb.digest_of(document)}))
    assert done["status"]["phase"] == "Inconclusive"
    assert done["status"]["reason"] == "NodeReplaced"
    fresh = await admin.get(resource_path("v1", "nodes", name=replaced))
    assert keys.certified_label(PROFILE) not in _labels(fresh)
    kept = await admin.get(resource_path("v1", "nodes", name=nodes[0]["metadata"]["name"]))
    assert _labels(kept)[keys.certified_label(PROFILE)] == "Inconclusive"


async def test_projection_is_monotonic(ctx: Context, cluster: LocalCluster, admin: KubeClient) -> None:
    """An older Run that finishes after a newer one leaves the newer result in place."""
    await install_rbac(admin, ctx.namespace)
    nodes = await _nodes(cluster, f"{ctx.namespace}-mono", 1)
    older = await running_run(admin, ctx.namespace, nodes, PROFILE, started=STARTED)
    await asyncio.sleep(1.1)  # creation timestamps have one-second resolution
    newer = await running_run(admin, ctx.namespace, nodes, PROFILE, started=STARTED)
    failing = eb.check_evidence(newer, verdicts={0: "Fail"})
    await store(admin, ctx.namespace, check_evidence_name(newer["metadata"]["name"], 0), eb.config_map("x", failing))
    assert (await _accept(ctx, admin, newer, workflow_status(newer, {0: eb.digest_of(failing)})))["status"][
        "phase"
    ] == "Failed"
    passing = eb.check_evidence(older)
    await store(admin, ctx.namespace, check_evidence_name(older["metadata"]["name"], 0), eb.config_map("x", passing))
    late = await _accept(ctx, admin, older, workflow_status(older, {0: eb.digest_of(passing)}))
    assert late["status"]["phase"] == "Succeeded"
    node = await admin.get(resource_path("v1", "nodes", name=nodes[0]["metadata"]["name"]))
    assert _labels(node)[keys.certified_label(PROFILE)] == "Fail"
    annotation = node["metadata"]["annotations"][keys.certified_label(PROFILE)]
    assert newer["metadata"]["uid"] in annotation


class ReplacingKube(Kube):
    """The controller's client, on the real API server; ``replace`` names a Node deleted and
    created again (a new uid) right after the acceptance has decided, when it reads the
    profile's record, which it does before projecting."""

    replace: tuple[LocalCluster, str] | None = None

    async def get_or_none(self, path: str) -> Any:
        if self.replace is not None and keys.PROFILE_PLURAL in path:
            cluster, name = self.replace
            self.replace = None
            await cluster.remove_node(name)
            await cluster.add_nodes([SimNode(name)])
        return await super().get_or_none(path)


async def test_a_node_replaced_after_the_decision_never_gets_the_result(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    """Between the decision and the projection a Node is replaced (same name, new uid): the new
    Node gets no label, no trusted label and no condition of the old one's Pass; the other
    participant does."""
    kube = ReplacingKube(identities.admin(cluster.plane).endpoint(), field_manager="signal-controller")
    ctx = Context(kube, namespace, "corpus-test")
    try:
        await install_rbac(admin, namespace)
        nodes = await _nodes(cluster, f"{namespace}-swap")
        run = await running_run(admin, namespace, nodes, PROFILE, started=STARTED)
        document = eb.check_evidence(run)
        await store(admin, namespace, check_evidence_name(run["metadata"]["name"], 0), eb.config_map("x", document))
        swapped, kept = (n["metadata"]["name"] for n in nodes)
        kube.replace = (cluster, swapped)
        done = await _accept(ctx, admin, run, workflow_status(run, {0: eb.digest_of(document)}))
        assert kube.replace is None, "the Node was not replaced"
        assert done["status"]["phase"] == "Succeeded", done["status"]
        new = await admin.get(resource_path("v1", "nodes", name=swapped))
        assert new["metadata"]["uid"] != nodes[0]["metadata"]["uid"]
        assert keys.certified_label(PROFILE) not in _labels(new), _labels(new)
        assert certified.trusted_label(PROFILE) not in _labels(new), _labels(new)
        assert keys.certified_label(PROFILE) not in (new["metadata"].get("annotations") or {})
        assert all(c["type"] != keys.certified_label(PROFILE) for c in new["status"].get("conditions") or [])
        other = await admin.get(resource_path("v1", "nodes", name=kept))
        assert _labels(other)[keys.certified_label(PROFILE)] == "Pass"
    finally:
        await kube.close()
