"""A group certified again gets a Run name of its own (real API server, real controller): after
retention deleted the group's oldest Runs, and when the name the admission would take is held
by a Workflow someone else made, which ends that Run but never the profile."""

from pathlib import Path

from controller.rules.manifests import GROUP_HASH_LABEL, group_hash, run_name
from controller.rules.nodes import node_view
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from tests.controller_support import ControllerProcess, World, eventually, profile_body
from tests.integration.test_controller_bad_objects import WORKFLOWS, foreign_workflow
from tests.run_builders import finished_run


async def _group_hash(world: World, profile: str, names: list[str]) -> str:
    uid = (await world.profile(profile))["metadata"]["uid"]
    return group_hash(uid, 1, [node_view(n) for n in await world.nodes(names)])


async def run_status(admin: KubeClient, namespace: str, name: str) -> Obj:
    """The Run's status; empty while there is no such Run."""
    try:
        run = await admin.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, name))
    except ApiError as exc:
        if exc.status == 404:
            return {}
        raise
    return run.get("status") or {}


def _condition(obj: Obj, type_: str) -> Obj:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


async def test_a_group_certified_again_after_retention_gets_a_new_run(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    names = world.node_names(2, "again")
    await world.add_nodes(names, requested_for=None)
    profile = f"{namespace}-again"
    await world.add_profile(profile_body(profile, namespace, 2))
    ghash = await _group_hash(world, profile, names)
    # What three certifications of this group leave once retention deleted the oldest: Runs 2
    # and 3. A count of the group's Runs (2) would name the next one after Run 3 again.
    for ordinal, completed in ((2, "2026-11-30T02:00:00Z"), (3, "2026-11-30T03:00:00Z")):
        await finished_run(
            admin,
            namespace,
            await world.nodes(names),
            profile,
            name=run_name(profile, ghash, ordinal),
            labels={GROUP_HASH_LABEL: ghash},
            completed=completed,
        )
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    try:
        await world.request(profile, names)
        fourth = run_name(profile, ghash, 4)

        async def running() -> bool:
            return (await run_status(admin, namespace, fourth)).get("phase") == "Running"

        await eventually(running, timeout=30, what=f"Run {fourth} Running\n{controller.logs()}")
        kept = sorted(r["metadata"]["name"] for r in await world.runs())
        assert kept == sorted(run_name(profile, ghash, o) for o in (2, 3, 4))
        assert "already exists for another admission" not in controller.logs()
    finally:
        controller.stop()
        await world.cleanup()


async def test_a_stray_workflow_at_a_new_runs_name_ends_that_run_not_the_profile(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    names = world.node_names(4, "stray")
    first, second = sorted(names)[:2], sorted(names)[2:]
    await world.add_nodes(names, requested_for=None)
    profile = f"{namespace}-stray"
    await world.add_profile(profile_body(profile, namespace, 2))
    taken = run_name(profile, await _group_hash(world, profile, first), 1)
    stranger = await admin.create(resource_path(WORKFLOWS, "workflows", namespace), foreign_workflow(taken))
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    try:
        await world.request(profile, first)

        async def ended() -> Obj | None:
            status = await run_status(admin, namespace, taken)
            return status if status.get("phase") == "Inconclusive" else None

        status = await eventually(ended, timeout=60, what=f"Run {taken} ended\n{controller.logs()}")
        assert status["reason"] == "WorkflowNotOwned", status
        await world.request(profile, second)

        async def second_running() -> Obj | None:
            for run in await world.runs():
                group = sorted(p["nodeName"] for p in run["spec"]["participants"])
                if group == second and (run.get("status") or {}).get("phase") == "Running":
                    return run
            return None

        await eventually(second_running, timeout=30, what=f"the profile's next group Running\n{controller.logs()}")
        ready = _condition(await world.profile(profile), "Ready")
        assert ready.get("status") == "True", ready
        left = await admin.get(resource_path(WORKFLOWS, "workflows", namespace, taken))
        assert left["metadata"]["uid"] == stranger["metadata"]["uid"], "the stranger's Workflow was touched"
    finally:
        controller.stop()
        await world.cleanup()
