"""Issue 43, item 6, on the real API server: ``signalctl uninstall --clean-nodes`` (a subprocess
with an admin's kubeconfig, as an operator runs it) leaves no key of Signal's on the cluster's
Nodes, and nothing else changes. One Node is held by a Run the real controller admitted (its
reservation label, annotation, taint and the autoscalers' do-not-disrupt annotations, as the
controller writes them: the Run waits for the GPUs a Pod holds, ``busyNodes: waitForIdle``);
another carries a profile's result written by the projection's own patches, a request, the
legacy request label, a retry's next attempt and the trusted-node label; both carry an
operator's own label, annotation and taint. ``--dry-run`` changes nothing; without
``--release-held`` the held Node keeps only what holds it; with it, every Node is clean. It
refuses while a ``signal-controller`` Deployment has replicas."""

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controller.rules.projection import node_condition, projection_patch
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from shared.nodekeys import node_key
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by
from tests.integration.test_busy_nodes import create_pod, running, sleeper
from tests.integration.test_signalctl import signalctl

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
async def work_namespace(cluster: LocalCluster) -> AsyncIterator[str]:
    name = f"work-{uuid.uuid4().hex[:8]}"
    await cluster.create_namespace(name)
    yield name
    await cluster.delete_namespace(name)


OPERATORS = {"label": "team.example.com/pool", "annotation": "team.example.com/note", "taint": "example.com/maint"}


def signals_keys(node: Obj) -> set[str]:
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    found = {("label", k) for k in meta.get("labels") or {}} | {
        ("annotation", k) for k in meta.get("annotations") or {}
    }
    found |= {("taint", t["key"]) for t in spec.get("taints") or []}
    found |= {("condition", c["type"]) for c in status.get("conditions") or []}
    return {f"{w} {k}" for w, k in found if node_key(w, k) is not None}  # type: ignore[arg-type]


def operators_keys(node: Obj) -> dict[str, Any]:
    meta = node["metadata"]
    return {
        "label": (meta.get("labels") or {}).get(OPERATORS["label"]),
        "annotation": (meta.get("annotations") or {}).get(OPERATORS["annotation"]),
        "taint": [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] == OPERATORS["taint"]],
    }


async def test_uninstall_clean_nodes_leaves_no_key_of_signals_and_nothing_else_changes(
    cluster: LocalCluster, admin: KubeClient, namespace: str, work_namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    kubeconfig = identities.admin(cluster.plane).kubeconfig(tmp_path / "admin.kubeconfig")
    held, projected = world.node_names(2, "u")
    mark = f"uninstall-test={namespace}"
    profile = f"{namespace}-held"
    try:
        await world.add_nodes([held, projected], requested_for=None)
        for name in (held, projected):
            await admin.merge_patch(
                resource_path("v1", "nodes", name=name),
                {
                    "metadata": {
                        "labels": {"uninstall-test": namespace, OPERATORS["label"]: "a"},
                        "annotations": {OPERATORS["annotation"]: "kept"},
                    },
                    "spec": {"taints": [{"key": OPERATORS["taint"], "value": "x", "effect": "PreferNoSchedule"}]},
                },
            )
        # The held Node: reserved by the real controller, waiting for a Pod's GPUs.
        await create_pod(admin, work_namespace, sleeper("hog", held, gpus=8))
        await running(admin, work_namespace, "hog")
        body = profile_body(profile, namespace, 1)
        body["spec"]["busyNodes"] = {"policy": "waitForIdle", "timeoutSeconds": 3600}
        await world.add_profile(body)
        await world.request(profile, [held])

        async def reserved() -> Obj | None:
            (node,) = await world.nodes([held])
            annotations = node["metadata"].get("annotations") or {}
            return node if reserved_by(node) and keys.KARPENTER_DO_NOT_DISRUPT in annotations else None

        try:
            await eventually(reserved, timeout=60, what="the controller to reserve the held Node")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{controller.logs()}") from None
        # The projected Node: a result as the projection's own patches write it.
        (node,) = await world.nodes([projected])
        detail = {
            "run": "r",
            "namespace": namespace,
            "runUID": "run-uid",
            "verdict": "Pass",
            "completionTime": "2026-12-07T06:00:00Z",
            "evidenceDigest": "sha256:" + "0" * 64,
            "runCreated": "2026-12-07T05:00:00Z",
        }
        patch = projection_patch(node, "gone-profile", detail)
        assert patch is not None
        patch["metadata"]["labels"] |= {
            keys.CERTIFY_LABEL: "gone-profile",
            keys.LEGACY_CERTIFY_LABEL: "x",
            keys.TRUSTED_NODE_LABEL: "true",
        }
        patch["metadata"]["annotations"][keys.ATTEMPT_ANNOTATION] = "gone-profile:2"
        del patch["metadata"]["resourceVersion"]  # the heartbeat changes it
        path = resource_path("v1", "nodes", name=projected)
        await admin.merge_patch(path, patch)
        await admin.request(
            "PATCH",
            f"{path}/status",
            body=json.dumps({"status": {"conditions": [node_condition("gone-profile", detail)]}}),
            content_type="application/strategic-merge-patch+json",
        )
        controller.stop()  # uninstall comes after Signal is deleted
        before = {n["metadata"]["name"]: n for n in await world.nodes([held, projected])}
        assert len(signals_keys(before[projected])) == 8, signals_keys(before[projected])
        assert len(signals_keys(before[held])) == 5, signals_keys(before[held])

        # A running controller Deployment: refused, nothing written.
        deployment = {
            "metadata": {"name": "signal-controller"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "x"}},
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        }
        await admin.create(resource_path("apps/v1", "deployments", namespace), deployment)
        rc, out, err = await signalctl(kubeconfig, "uninstall", "--clean-nodes", "-n", namespace, "-l", mark)
        assert rc == 1, (rc, out, err)
        assert f"Deployment {namespace}/signal-controller is still running" in err
        await admin.delete(resource_path("apps/v1", "deployments", namespace, "signal-controller"))

        rc, out, err = await signalctl(kubeconfig, "uninstall", "--clean-nodes", "--dry-run", "-l", mark)
        assert rc == 0, (rc, out, err)
        assert f"Node {projected}: would remove" in out, out
        assert "1 of 2 Nodes would be cleaned; 1 held by a Run kept their reservation" in out, out
        assert f"Node {held}: nothing of Signal's; kept (held by Run uid" in out, out
        after = {n["metadata"]["name"]: n for n in await world.nodes([held, projected])}
        assert {k: signals_keys(v) for k, v in after.items()} == {k: signals_keys(v) for k, v in before.items()}

        rc, out, err = await signalctl(kubeconfig, "uninstall", "--clean-nodes", "-n", namespace, "-l", mark)
        assert rc == 0, (rc, out, err)
        assert f"[2/2] Node {projected}: removed" in out or f"[1/2] Node {projected}: removed" in out, out
        assert "kept (held by Run uid" in out, out
        (still_held, clean) = await world.nodes([held, projected])
        assert signals_keys(clean) == set()
        assert signals_keys(still_held) == signals_keys(before[held])  # held: nothing released

        rc, out, err = await signalctl(
            kubeconfig, "uninstall", "--clean-nodes", "--release-held", "-n", namespace, "-l", mark
        )
        assert rc == 0, (rc, out, err)
        for node in await world.nodes([held, projected]):
            assert signals_keys(node) == set(), node["metadata"]["name"]
            assert operators_keys(node) == {
                "label": "a",
                "annotation": "kept",
                "taint": [{"key": OPERATORS["taint"], "value": "x", "effect": "PreferNoSchedule"}],
            }
        hog = await admin.get(resource_path("v1", "pods", work_namespace, "hog"))
        assert not hog["metadata"].get("deletionTimestamp")  # uninstall touches no Pod
    finally:
        controller.stop()
        await world.cleanup()
