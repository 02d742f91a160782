"""Simulated GPU Nodes: capacity, labels, and a Ready condition kept fresh by the heartbeat."""

import uuid
from datetime import datetime

from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode, set_ready, standard_fleet
from localcluster.kube import KubeClient, resource_path
from tests.controller_support import eventually


async def test_nodes_carry_gpu_rdma_zone_and_rack(cluster: LocalCluster, admin: KubeClient) -> None:
    prefix = f"fleet-{uuid.uuid4().hex[:5]}"
    fleet = standard_fleet(6, prefix=prefix)
    created = await cluster.add_nodes(fleet)
    # In the order asked for, not the order the creations finished (tests index the result).
    assert [n["metadata"]["name"] for n in created] == [n.name for n in fleet]
    listing = await admin.get(resource_path("v1", "nodes"), labelSelector="projectsignal.dev/simulated=true")
    ours = [n for n in listing["items"] if n["metadata"]["name"].startswith(prefix)]
    assert len(ours) == 6
    for node in ours:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["status"]["allocatable"]["rdma/ib"] == "8"
        assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] in {"zone-a", "zone-b", "zone-c"}
        assert node["metadata"]["labels"]["projectsignal.dev/rack"].startswith("rack-")
    assert {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in ours} == {"zone-a", "zone-b", "zone-c"}


async def test_heartbeat_keeps_ready_fresh_and_respects_not_ready(cluster: LocalCluster, admin: KubeClient) -> None:
    fresh, sick = f"hb-{uuid.uuid4().hex[:5]}", f"hb-{uuid.uuid4().hex[:5]}"
    await cluster.add_nodes([SimNode(fresh), SimNode(sick)])
    await set_ready(admin, sick, ready=False)

    async def ready_of(name: str) -> dict[str, str]:
        node = await admin.get(resource_path("v1", "nodes", name=name))
        return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")

    before = _beat(await ready_of(fresh))
    marked = _beat(await ready_of(sick))

    async def beats(name: str, since: datetime, count: int) -> dict[str, str]:
        """The Node's Ready condition once the heartbeat has written it ``count`` times after ``since``."""
        seen, current = since, await ready_of(name)
        for _ in range(count):
            done = seen

            async def later(done: datetime = done) -> dict[str, str] | None:
                ready = await ready_of(name)
                return ready if _beat(ready) > done else None

            current = await eventually(later, timeout=cluster.heartbeat_seconds * 6, what=f"a beat of {name}")
            seen = _beat(current)
        return current

    assert (await beats(fresh, before, 1))["status"] == "True"
    # The heartbeat has handled the not-Ready Node twice since it was marked (the second beat
    # from a listing made after the first was written): still not Ready.
    handled = await beats(sick, marked, 2)
    assert handled["status"] == "False", handled


def _beat(ready: dict[str, str]) -> datetime:
    return datetime.fromisoformat(ready["lastHeartbeatTime"])
