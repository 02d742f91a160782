"""Retries (issue 5): an Inconclusive Run with attempts left gives its Nodes back with their
request restored, and admission starts the next attempt on the same Nodes; the last attempt
keeps its group reserved."""

from pathlib import Path

from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by

API = keys.API_VERSION


async def test_inconclusive_run_is_retried_once_on_the_same_nodes(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    profile = f"{namespace}-retry"
    names = world.node_names(2)
    await world.add_nodes(names, requested_for=profile)
    body = profile_body(profile, namespace, 2)
    body["spec"]["retries"] = {"maxAttempts": 2}
    await world.add_profile(body)
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    try:

        async def attempt(n: int) -> Obj | None:
            runs = [r for r in await world.runs() if r["spec"]["attempt"] == n]
            running = [r for r in runs if (r.get("status") or {}).get("phase") == "Running"]
            return running[0] if running else None

        first = await eventually(lambda: attempt(1), what=f"attempt 1 Running\n{controller.logs()}")
        path = resource_path(API, keys.RUN_PLURAL, namespace, first["metadata"]["name"], "status")
        await admin.merge_patch(path, {"status": {"phase": "Inconclusive", "reason": "SuiteDeadlineExceeded"}})
        second = await eventually(lambda: attempt(2), timeout=30, what=f"attempt 2 Running\n{controller.logs()}")
        assert sorted(p["nodeUID"] for p in second["spec"]["participants"]) == sorted(
            p["nodeUID"] for p in first["spec"]["participants"]
        )
        assert all(reserved_by(n) == second["metadata"]["uid"] for n in await world.nodes(names))
        old = await admin.get(resource_path(API, keys.RUN_PLURAL, namespace, first["metadata"]["name"]))
        types = {c["type"]: c["status"] for c in old["status"]["conditions"]}
        assert types["RetryStarted"] == "True"
        assert types["Released"] == "True"
        for node in await world.nodes(names):
            assert keys.ATTEMPT_ANNOTATION not in node["metadata"].get("annotations", {}), "attempt not consumed"
        # The last attempt ends Inconclusive: no third Run, the group stays reserved.
        path = resource_path(API, keys.RUN_PLURAL, namespace, second["metadata"]["name"], "status")
        await admin.merge_patch(path, {"status": {"phase": "Inconclusive", "reason": "SuiteDeadlineExceeded"}})

        async def settled() -> bool:
            current = await admin.get(resource_path(API, keys.RUN_PLURAL, namespace, second["metadata"]["name"]))
            return any(c["type"] == "ResourcesCleaned" for c in current["status"].get("conditions", []))

        await eventually(settled, what="the last attempt cleaned up")
        assert len(await world.runs()) == 2
        assert all(reserved_by(n) == second["metadata"]["uid"] for n in await world.nodes(names))
    finally:
        controller.stop()
        await world.cleanup()
