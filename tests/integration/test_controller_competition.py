"""Issue 3, acceptance 2 and 5: competing profiles never share a Node (invariant 1), and a
failure-domain budget of 1 per zone holds for whole groups with two controller replicas
running (invariant 7)."""

from collections import Counter
from pathlib import Path

from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by


async def test_two_profiles_competing_for_overlapping_nodes_never_share_one(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    try:
        names = world.node_names(5)
        first, second = f"{namespace}-a", f"{namespace}-b"
        await world.add_nodes(names, requested_for=first)
        await world.add_profile(profile_body(first, namespace, 3))
        await world.add_profile(profile_body(second, namespace, 2))
        await eventually(world.runs, what="the first Run")
        await world.request(second, names)  # now every Node is requested by the second profile

        async def two_runs() -> list[dict]:
            runs = await world.runs()
            return runs if len(runs) == 2 and all(r.get("status", {}).get("phase") == "Running" for r in runs) else []

        runs = await eventually(two_runs, what=f"two Runs\n{controller.logs()}")
        held = [p["nodeName"] for r in runs for p in r["spec"]["participants"]]
        assert len(held) == len(set(held)) == 5
        by_uid = {r["metadata"]["uid"]: {p["nodeName"] for p in r["spec"]["participants"]} for r in runs}
        for node in await world.nodes(names):
            owner = reserved_by(node)
            assert owner is not None
            assert node["metadata"]["name"] in by_uid[owner]
    finally:
        controller.stop()
        await world.cleanup()


async def test_budget_of_one_per_zone_holds_with_two_replicas(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    replicas = [ControllerProcess(cluster, namespace, tmp_path, resync=1.0, identity=f"replica-{i}") for i in range(2)]
    for replica in replicas:
        await replica.start()
    try:
        budget = {"topologyKey": "topology.kubernetes.io/zone", "maxNodesUnderTest": 1}
        profiles = [f"{namespace}-{i}" for i in range(3)]
        for i, profile in enumerate(profiles):
            await world.add_nodes(world.node_names(2, f"p{i}-"), requested_for=profile, zones=("zone-a", "zone-b"))
        for profile in profiles:
            await world.add_profile(profile_body(profile, namespace, 1, budget=budget))

        async def settled() -> list[dict]:
            runs = await world.runs()
            status = (await world.profile(profiles[2])).get("status", {})
            return runs if len(runs) == 2 and status.get("eligibleNodes") is not None else []

        await eventually(
            settled, timeout=45, what=f"two Runs and a refusal\n{replicas[0].logs()}\n{replicas[1].logs()}"
        )
        runs = await world.runs()
        zones = Counter()
        for run in runs:
            for participant in run["spec"]["participants"]:
                node = (await world.nodes([participant["nodeName"]]))[0]
                zones[node["metadata"]["labels"]["topology.kubernetes.io/zone"]] += 1
        assert max(zones.values()) == 1
        assert len(runs) == 2

        async def refused_for_the_budget() -> str | None:
            # A change of the message alone is written within PROGRESS_INTERVAL (profiles.py).
            conditions = (await world.profile(profiles[2]))["status"]["conditions"]
            message = next(c["message"] for c in conditions if c["type"] == "Admissible")
            return message if "over the failure-domain budget" in message else None

        await eventually(refused_for_the_budget, timeout=15, what="the refusal's reason on the third profile")
    finally:
        for replica in replicas:
            replica.stop()
        await world.cleanup()
