"""Issue 3, acceptance 1, 4 and 6: admission of an exact group by the real controller
(as its ServiceAccount), with the Run, snapshot and Workflow it writes; cordoned Nodes are
never selected; a bad source touches no Node."""

import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from controller.rules.manifests import group_hash, run_name
from controller.rules.nodes import NodeView
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, resource_path
from shared import keys, policies
from shared.digests import bundle_digest
from tests.controller_support import SCRIPTS, ControllerProcess, World, eventually, profile_body, reserved_by

API = keys.API_VERSION


@pytest.fixture
async def world(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[World]:
    w = World(cluster, admin, namespace)
    await w.setup()
    yield w
    await w.cleanup()


@pytest.fixture
async def controller(
    cluster: LocalCluster, namespace: str, world: World, tmp_path: Path
) -> AsyncIterator[ControllerProcess]:
    process = ControllerProcess(cluster, namespace, tmp_path)
    await process.start()
    yield process
    process.stop()


async def test_four_of_six_requested_nodes_are_admitted_with_exact_children(
    world: World, controller: ControllerProcess
) -> None:
    names = world.node_names(6)
    profile = f"{world.namespace}-p"
    await world.add_nodes(names, requested_for=profile, zones=("zone-a", "zone-b"))
    await world.add_profile(profile_body(profile, world.namespace, 4))

    async def running() -> list[dict]:
        runs = await world.runs()
        return runs if runs and runs[0].get("status", {}).get("phase") == "Running" else []

    runs = await eventually(running, what=f"a Running Run\n{controller.logs()}")
    assert len(runs) == 1
    run = runs[0]
    participants = run["spec"]["participants"]
    assert [p["nodeName"] for p in participants] == sorted(names)[:4]
    nodes = {n["metadata"]["name"]: n for n in await world.nodes(names)}
    for p in participants:
        node = nodes[p["nodeName"]]
        assert p["nodeUID"] == node["metadata"]["uid"]
        assert p["capacity"] == node["status"]["capacity"]
        assert p["allocatable"] == node["status"]["allocatable"]
        assert reserved_by(node) == run["metadata"]["uid"]
        taints = node["spec"].get("taints", [])
        assert {"key": "projectsignal.dev/reserved", "value": run["metadata"]["uid"], "effect": "NoSchedule"} in taints
        detail = json.loads(node["metadata"]["annotations"][keys.RESERVATION_ANNOTATION])
        assert detail["index"] == p["index"]
    for name in sorted(names)[4:]:
        assert reserved_by(nodes[name]) is None
    assert run["spec"]["suiteDeadlineSeconds"] == 5 * 60 + 10 * 60 + 2 * 60
    snapshot = await world.admin.get(
        resource_path("v1", "configmaps", world.namespace, run["spec"]["source"]["snapshotConfigMap"])
    )
    assert snapshot["immutable"] is True
    assert snapshot["data"] == SCRIPTS
    assert bundle_digest(snapshot["data"], {}) == run["spec"]["source"]["digest"]
    assert snapshot["metadata"]["ownerReferences"][0]["uid"] == run["metadata"]["uid"]
    workflow = await world.admin.get(
        resource_path("argoproj.io/v1alpha1", "workflows", world.namespace, run["metadata"]["name"])
    )
    assert workflow["metadata"]["ownerReferences"][0]["uid"] == run["metadata"]["uid"]
    assert workflow["spec"]["workflowTemplateRef"] == {"name": "signal-adapter"}
    assert workflow["spec"]["activeDeadlineSeconds"] == run["spec"]["suiteDeadlineSeconds"]
    params = {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}
    assert params["run-name"] == run["metadata"]["name"]
    assert params["run-namespace"] == world.namespace
    assert params["run-uid"] == run["metadata"]["uid"]
    assert params["participants"] == ",".join(sorted(names)[:4])
    assert json.loads(params["participants-json"]) == [
        {"index": p["index"], "nodeName": p["nodeName"], "nodeUID": p["nodeUID"]} for p in participants
    ]
    assert json.loads(params["checks"]) == run["spec"]["checks"]
    assert params["check-count"] == "2"
    assert params["snapshot"] == run["spec"]["source"]["snapshotConfigMap"]
    assert run["status"]["workflow"]["uid"] == workflow["metadata"]["uid"]

    async def what_is_left() -> str | None:
        conditions = ((await world.profile(profile)).get("status") or {}).get("conditions") or []
        admissible = next((c for c in conditions if c["type"] == "Admissible"), {})
        return admissible.get("message") if admissible.get("reason") == "InsufficientEligibleNodes" else None

    # The status of what the admission left (the two others), written by the pass after it.
    left = await eventually(what_is_left, what=f"the profile's status after admission\n{controller.logs()}")
    assert left.startswith("2 of 2 requested Nodes eligible, 4 needed")


async def test_a_node_cordoned_by_someone_else_is_never_selected(world: World, controller: ControllerProcess) -> None:
    names = world.node_names(3)
    profile = f"{world.namespace}-p"
    await world.add_nodes(names[:1], requested_for=profile, unschedulable=True)
    await world.add_nodes(names[1:], requested_for=profile)
    await world.add_profile(profile_body(profile, world.namespace, 2))
    runs = await eventually(world.runs, what="a Run")
    assert [p["nodeName"] for p in runs[0]["spec"]["participants"]] == names[1:]
    assert reserved_by((await world.nodes(names[:1]))[0]) is None


async def test_too_few_eligible_nodes_creates_no_run_and_says_why(world: World, controller: ControllerProcess) -> None:
    names = world.node_names(3)
    profile = f"{world.namespace}-p"
    await world.add_nodes(names[:1], requested_for=profile, unschedulable=True)
    await world.add_nodes(names[1:2], requested_for=profile, gpus=4)
    await world.add_nodes(names[2:], requested_for=profile)
    await world.add_profile(profile_body(profile, world.namespace, 2))

    async def explained() -> dict | None:
        status = (await world.profile(profile)).get("status", {})
        cond = next((c for c in status.get("conditions", []) if c["type"] == "Admissible"), None)
        return cond if cond and cond["status"] == "False" else None

    cond = await eventually(explained, what=f"an Admissible=False condition\n{controller.logs()}")
    assert cond["reason"] == "InsufficientEligibleNodes"
    assert "1 of 3 requested Nodes eligible, 2 needed" in cond["message"]
    assert "cordoned by someone else" in cond["message"]
    assert "nvidia.com/gpu 4<8" in cond["message"]
    assert (await world.profile(profile))["status"]["eligibleNodes"] == 1
    assert await world.runs() == []


@pytest.mark.parametrize(
    ("problem", "reason"),
    [
        ("digest", "DigestMismatch"),
        ("script-key", "ScriptKeyMissing"),
        ("mutable", "SourceMutable"),
        ("missing", "SourceNotFound"),
    ],
)
async def test_a_bad_source_leaves_every_node_untouched(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path, problem: str, reason: str
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup(immutable=problem != "mutable")
    if problem == "missing":
        await admin.delete(resource_path("v1", "configmaps", namespace, "scripts"))
    names = world.node_names(2)
    profile = f"{namespace}-p"
    await world.add_nodes(names, requested_for=profile)
    body = profile_body(profile, namespace, 2)
    if problem == "digest":
        body["spec"]["source"]["digest"] = "sha256:" + "0" * 64
    if problem == "script-key":
        body["spec"]["checks"][0]["scriptKey"] = "absent.sh"
    controller = ControllerProcess(cluster, namespace, tmp_path)
    await controller.start()
    try:
        await world.add_profile(body)

        async def not_ready() -> dict | None:
            conds = (await world.profile(profile)).get("status", {}).get("conditions", [])
            return next((c for c in conds if c["type"] == "Ready" and c["status"] == "False"), None)

        cond = await eventually(not_ready, what=f"Ready=False\n{controller.logs()}")
        assert cond["reason"] == reason
        assert f"ConfigMap {namespace}/scripts" in cond["message"]
        for node in await world.nodes(names):
            assert reserved_by(node) is None, node["metadata"]
            assert node["spec"].get("taints") is None, node["spec"]
            assert node["metadata"]["labels"][keys.CERTIFY_LABEL] == profile, "the request must not be consumed"
            assert keys.RESERVATION_ANNOTATION not in node["metadata"].get("annotations", {})
        assert await world.runs() == []
        cms = await admin.get(resource_path("v1", "configmaps", namespace))
        assert {c["metadata"]["name"] for c in cms["items"]} <= {
            "scripts",
            "kube-root-ca.crt",
            "signal-admission-ledger",
        }
    finally:
        controller.stop()
        await world.cleanup()


async def test_a_squatted_snapshot_name_never_blocks_the_group(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Issue 42 M-A: a ConfigMap squatting the name a group's Run would give its snapshot
    (possible only where the signal-scripts policy is missing: its binding is removed here) is
    never adopted and blocks nothing: the Run's snapshot has a fresh name."""
    world = World(cluster, admin, namespace)
    await world.setup()
    controller = ControllerProcess(cluster, namespace, tmp_path)
    await controller.start()  # installs Signal's policies for the namespace
    try:
        names = world.node_names(2)
        profile = f"{namespace}-p"
        await world.add_nodes(names, requested_for=None)
        nodes = await world.nodes(names)
        await admin.delete(
            resource_path(
                "admissionregistration.k8s.io/v1",
                "validatingadmissionpolicybindings",
                name=f"{policies.SCRIPTS_POLICY}-{namespace}",
            )
        )
        created = await world.add_profile(profile_body(profile, namespace, 2))
        uids = [n["metadata"]["uid"] for n in nodes]
        ghash = group_hash(created["metadata"]["uid"], 1, [cast(NodeView, SimpleNamespace(uid=u)) for u in uids])
        run_name_then = run_name(profile, ghash, 1)
        squat = {
            "metadata": {"name": f"{run_name_then}-scripts"},
            "data": {"inventory.sh": "#!/bin/sh\necho squatted\n"},
            "immutable": True,
        }

        async def squatted() -> bool:
            try:
                await admin.create(resource_path("v1", "configmaps", namespace), squat)
            except ApiError as error:
                if error.status == 409:
                    return True
                if error.status == 403:  # the binding's removal not yet seen by the API server
                    return False
                raise
            return True

        await eventually(squatted, what="the squatting ConfigMap to be created")
        await world.request(profile, names)

        async def running() -> list[dict] | None:
            runs = await world.runs()
            return runs if runs and runs[0].get("status", {}).get("phase") == "Running" else None

        runs = await eventually(running, timeout=60, what=f"a Running Run despite the squat\n{controller.logs()}")
        run = runs[0]
        assert run["metadata"]["name"] == run_name_then
        snapshot = run["spec"]["source"]["snapshotConfigMap"]
        assert snapshot.startswith(f"{run_name_then}-scripts-")
        assert snapshot != squat["metadata"]["name"]
        made = await admin.get(resource_path("v1", "configmaps", namespace, snapshot))
        assert made["data"] == SCRIPTS
        assert made["metadata"]["ownerReferences"][0]["uid"] == run["metadata"]["uid"]
        left = await admin.get(resource_path("v1", "configmaps", namespace, squat["metadata"]["name"]))
        assert left["data"] == squat["data"], "someone else's ConfigMap is left alone"
    finally:
        controller.stop()
        await world.cleanup()
