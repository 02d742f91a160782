"""Issue 3, recovery at start-up: a reservation whose Run does not exist is released (and its
request restored), a Workflow whose Run does not exist is deleted, and a reservation held by
another installation (another namespace) is left alone. A Workflow that names no Run stops
none of the fleet passes."""

import json
from pathlib import Path

from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, resource_path
from shared import keys
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by
from tests.run_builders import finished_run


async def test_orphans_are_cleaned_up_at_start(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    ours, foreign = world.node_names(2)
    await world.add_nodes([ours, foreign], requested_for=None)
    for name, owner_ns in ((ours, namespace), (foreign, "another-installation")):
        detail = {"run": "gone", "namespace": owner_ns, "uid": "uid-gone", "index": 0, "request": "some-profile"}
        await admin.merge_patch(
            resource_path("v1", "nodes", name=name),
            {
                "metadata": {
                    "labels": {keys.RESERVED_BY_LABEL: "uid-gone"},
                    "annotations": {keys.RESERVATION_ANNOTATION: json.dumps(detail)},
                },
                "spec": {
                    "taints": [{"key": "projectsignal.dev/reserved", "value": "uid-gone", "effect": "NoSchedule"}]
                },
            },
        )
    workflows = resource_path("argoproj.io/v1alpha1", "workflows", namespace)
    await admin.create(
        workflows,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "orphan", "labels": {keys.RUN_NAME_LABEL: "gone", keys.RUN_UID_LABEL: "uid-gone"}},
            "spec": {"workflowTemplateRef": {"name": "signal-adapter"}},
        },
    )
    controller = ControllerProcess(cluster, namespace, tmp_path)
    await controller.start()
    try:

        async def released() -> bool:
            return reserved_by((await world.nodes([ours]))[0]) is None

        await eventually(released, what=f"the orphaned reservation released\n{controller.logs()}")
        node = (await world.nodes([ours]))[0]
        assert not node["spec"].get("taints")
        assert node["metadata"]["labels"][keys.CERTIFY_LABEL] == "some-profile", "the request is given back"

        async def workflow_gone() -> bool:
            try:
                await admin.get(f"{workflows}/orphan")
            except ApiError as exc:
                return exc.status == 404
            return False

        await eventually(workflow_gone, what="the orphaned Workflow deleted")
        assert reserved_by((await world.nodes([foreign]))[0]) == "uid-gone", "another installation's reservation stays"
    finally:
        controller.stop()
        await world.cleanup()


async def test_a_workflow_labelled_with_no_run_name_stops_no_pass(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """A Workflow with a Run's uid label but no Run name label (not one Signal made) is an orphan
    like any other, never a GET of every Run; and the passes after recovery's (retention here)
    run whatever it does."""
    world = World(cluster, admin, namespace)
    await world.setup()
    names = world.node_names(1, "kept")
    await world.add_nodes(names, requested_for=None)
    profile = f"{namespace}-kept"
    body = profile_body(profile, namespace, 1)
    body["spec"]["retention"] = {"keepTerminalRuns": 1}
    await world.add_profile(body)
    nodes = await world.nodes(names)
    older = await finished_run(admin, namespace, nodes, profile, completed="2026-11-30T01:00:00Z")
    newer = await finished_run(admin, namespace, nodes, profile, completed="2026-11-30T02:00:00Z")
    workflows = resource_path("argoproj.io/v1alpha1", "workflows", namespace)
    await admin.create(
        workflows,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "unnamed-run", "labels": {keys.RUN_UID_LABEL: "uid-of-no-run"}},
            "spec": {"workflowTemplateRef": {"name": "signal-adapter"}},
        },
    )
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    try:

        async def retained() -> list[str] | None:
            runs = sorted(r["metadata"]["name"] for r in await world.runs())
            return runs if runs == [newer["metadata"]["name"]] else None

        await eventually(retained, what=f"the older Run {older['metadata']['name']} deleted\n{controller.logs()}")

        async def workflow_gone() -> bool:
            try:
                await admin.get(f"{workflows}/unnamed-run")
            except ApiError as exc:
                return exc.status == 404
            return False

        await eventually(workflow_gone, what=f"the unnamed Run's Workflow deleted\n{controller.logs()}")
        assert "reconcile failed" not in controller.logs()
    finally:
        controller.stop()
        await world.cleanup()
