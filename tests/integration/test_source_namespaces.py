"""Issue 42, Low: the controller's cluster-wide ConfigMap read is no oracle or copier for a
profile author. A profile's source is read only from the controller's own namespace and the
namespaces of ``--source-namespaces`` (default ``signal-scripts``); any other is refused with
the same answer whether a ConfigMap is there or not, and nothing of it is read or copied."""

import contextlib
from pathlib import Path

from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared.conditions import condition
from shared.digests import bundle_digest
from tests.controller_support import SCRIPTS, ControllerProcess, World, eventually, profile_body


async def test_a_source_outside_the_allowed_namespaces_is_neither_read_nor_copied(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    other = f"{namespace}-other"
    await cluster.create_namespace(other)
    # A ConfigMap of another tenant, shaped as a valid source (immutable, the scripts' keys).
    await admin.create(
        resource_path("v1", "configmaps", other), {"metadata": {"name": "theirs"}, "data": SCRIPTS, "immutable": True}
    )
    names = world.node_names(1)
    await world.add_nodes(names, requested_for=None)
    existing, missing = f"{namespace}-theirs", f"{namespace}-nothing"
    for profile, name in ((existing, "theirs"), (missing, "nothing-here")):
        body = profile_body(profile, namespace, 1, digest=bundle_digest(SCRIPTS, {}))
        body["spec"]["source"] |= {"namespace": other, "name": name}
        await world.add_profile(body)
    await world.request(existing, names)
    controller = ControllerProcess(cluster, namespace, tmp_path)
    await controller.start()
    try:

        async def ready_of(profile: str) -> Obj | None:
            status = (await world.profile(profile)).get("status") or {}
            return condition(status.get("conditions") or [], "Ready")

        for profile in (existing, missing):
            ready = await eventually(lambda p=profile: ready_of(p), what=f"{profile} Ready\n{controller.logs()}")
            assert (ready["status"], ready["reason"]) == ("False", "SourceNamespaceNotAllowed"), ready
        # The same answer whether the ConfigMap is there or not: nothing to learn from it.
        answers = [(await ready_of(p) or {}).get("message") for p in (existing, missing)]
        assert answers[0] == answers[1], answers
        assert await world.runs() == [], "a Run admitted from another tenant's ConfigMap"
    finally:
        controller.stop()
        await world.cleanup()
        with contextlib.suppress(ApiError):
            await cluster.delete_namespace(other)
