"""Issue 3, recovery at start-up: a reservation whose Run does not exist is released (its
request given back only from the Run's ledger group), a Workflow whose Run does not exist is deleted, and a reservation held by
another installation (another namespace) is left alone. A Workflow that names no Run stops
none of the fleet passes."""

import contextlib
import json
from pathlib import Path

from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, resource_path
from shared import keys
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by
from tests.run_builders import finished_run


async def reserve_for_a_gone_run(admin: KubeClient, name: str, owner_namespace: str) -> None:
    """Node ``name`` reserved (label, annotation, taint) for Run ``gone`` of ``owner_namespace``,
    which does not exist."""
    detail = {"run": "gone", "namespace": owner_namespace, "uid": "uid-gone", "index": 0, "request": "some-profile"}
    await admin.merge_patch(
        resource_path("v1", "nodes", name=name),
        {
            "metadata": {
                "labels": {keys.RESERVED_BY_LABEL: "uid-gone"},
                "annotations": {keys.RESERVATION_ANNOTATION: json.dumps(detail)},
            },
            "spec": {"taints": [{"key": "projectsignal.dev/reserved", "value": "uid-gone", "effect": "NoSchedule"}]},
        },
    )


async def test_orphans_are_cleaned_up_at_start(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    ours, foreign = world.node_names(2)
    await world.add_nodes([ours, foreign], requested_for=None)
    for name, owner_ns in ((ours, namespace), (foreign, "another-installation")):
        await reserve_for_a_gone_run(admin, name, owner_ns)
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
        # The Run has no group in the ledger: the request its reservation annotation names (the
        # Node's kubelet can rewrite it) is not given back (issue 42 M-D).
        assert keys.CERTIFY_LABEL not in node["metadata"]["labels"], "a request given back on the annotation's word"

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


ADMISSION = "admissionregistration.k8s.io/v1"


async def refuse_updates_of(admin: KubeClient, node: str) -> list[str]:
    """A ValidatingAdmissionPolicy (as a cluster's webhook or policy might) refusing every
    update of Node ``node``, in force when this returns; the paths to delete afterwards."""
    name = f"refuse-{node}"
    policy = {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
                ]
            },
            "validations": [{"expression": f"object.metadata.name != '{node}'", "message": "this Node is frozen"}],
        },
    }
    binding = {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    made = []
    for plural, body in (("validatingadmissionpolicies", policy), ("validatingadmissionpolicybindings", binding)):
        await admin.create(resource_path(ADMISSION, plural), body)
        made.append(resource_path(ADMISSION, plural, name=name))

    async def in_force() -> bool:
        try:
            await admin.request(
                "PATCH",
                resource_path("v1", "nodes", name=node),
                body={"metadata": {"labels": {"probe": "x"}}},
                params={"dryRun": "All"},
                content_type="application/merge-patch+json",
            )
        except ApiError as exc:
            return "this Node is frozen" in exc.message
        return False

    await eventually(in_force, what=f"the policy refusing updates of {node} in force")
    return made


async def test_a_node_whose_release_is_refused_holds_up_nothing_else(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Two Nodes reserved for a Run that is gone; the API server refuses every update of the
    first (a policy). The controller starts anyway: it releases the other, admits a new group,
    and keeps trying the refused one (it stays reserved, and the controller says why)."""
    world = World(cluster, admin, namespace)
    await world.setup()
    frozen, orphan, *fresh = world.node_names(4, "held")
    await world.add_nodes([frozen, orphan, *fresh], requested_for=None)
    for name in (frozen, orphan):
        await reserve_for_a_gone_run(admin, name, namespace)
    made = await refuse_updates_of(admin, frozen)
    profile = f"{namespace}-after"
    await world.add_profile(profile_body(profile, namespace, 2))
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    try:
        await world.request(profile, fresh)

        async def running() -> bool:
            runs = await world.runs()
            return any((r.get("status") or {}).get("phase") == "Running" for r in runs)

        await eventually(running, timeout=60, what="a new group admitted despite the refused release")
        assert reserved_by((await world.nodes([orphan]))[0]) is None, "the other orphan was not released"
        assert reserved_by((await world.nodes([frozen]))[0]) == "uid-gone"
        assert "this Node is frozen" in controller.logs()
    finally:
        controller.stop()
        for path in reversed(made):
            with contextlib.suppress(ApiError):
                await admin.delete(path)
        await world.cleanup()
