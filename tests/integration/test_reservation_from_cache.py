"""A reservation's first try is decided on the informer's view of the Node
(controller/reconcile/reservations.py ``reserve``), against the real API server: when the view is
current, the Node is reserved with no read of it; when the Node changed after the view was
taken, the patch made from the view is refused (its resourceVersion is stale) and an uncached
read decides: what another writer added is kept, and a Node cordoned meanwhile is never
reserved."""

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.reconcile.reservations import AdmissionAborted, reserve
from controller.reconcile.state import Context
from controller.rules.nodes import node_view
from controller.rules.runview import ParticipantRef, run_view
from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from tests.run_builders import run_body

pytestmark = pytest.mark.asyncio(loop_scope="session")
MAINTENANCE = {"key": "example.com/maintenance", "value": "soon", "effect": "NoSchedule"}


class CountingKube(Kube):
    """The controller's own client, counting its uncached Node reads."""

    node_reads = 0

    async def get_or_none(self, path: str) -> Any:
        if path.startswith("/api/v1/nodes/"):
            self.node_reads += 1
        return await super().get_or_none(path)


@pytest.fixture
async def ctx(cluster: LocalCluster, namespace: str) -> AsyncIterator[Context]:
    kube = CountingKube(identities.admin(cluster.plane).endpoint(), field_manager="signal-controller")
    yield Context(kube, namespace, "reservation-test")
    await kube.close()


@pytest.fixture
async def node(cluster: LocalCluster) -> AsyncIterator[Obj]:
    name = f"cache-{uuid.uuid4().hex[:8]}"
    (created,) = await cluster.add_nodes([SimNode(name)])
    yield created
    await cluster.remove_node(name)


def node_reads(ctx: Context) -> int:
    assert isinstance(ctx.kube, CountingKube)
    return ctx.kube.node_reads


def _cache(ctx: Context, node: Obj) -> None:
    ctx.nodes.items[f"/{node['metadata']['name']}"] = node_view(node)


async def _reserve(ctx: Context, namespace: str, node: Obj) -> str:
    body = run_body(namespace, [node], "p")
    body["metadata"]["uid"] = str(uuid.uuid4())
    run = run_view(body)
    participant = ParticipantRef(0, node["metadata"]["name"], node["metadata"]["uid"])
    await reserve(ctx, run, participant)
    return run.uid


def _path(node: Obj) -> str:
    return resource_path("v1", "nodes", name=node["metadata"]["name"])


async def test_a_current_view_reserves_the_node_without_reading_it(
    ctx: Context, admin: KubeClient, namespace: str, node: Obj
) -> None:
    current = await admin.get(_path(node))
    _cache(ctx, current)
    uid = await _reserve(ctx, namespace, current)
    after = await admin.get(_path(node))
    reservation = node_view(after).reservation
    assert reservation is not None
    assert reservation.run_uid == uid
    assert node_view(after).signal_taint_uid == uid
    assert node_reads(ctx) == 0


async def test_a_stale_view_is_refused_and_what_changed_since_is_kept(
    ctx: Context, admin: KubeClient, namespace: str, node: Obj
) -> None:
    _cache(ctx, await admin.get(_path(node)))
    # Another writer taints the Node after the view was taken; the view still shows it untainted.
    await admin.merge_patch(_path(node), {"spec": {"taints": [MAINTENANCE]}, "metadata": {"labels": {"team": "a"}}})
    uid = await _reserve(ctx, namespace, node)
    after = await admin.get(_path(node))
    taints = [{k: t[k] for k in ("key", "value", "effect")} for t in after["spec"]["taints"]]
    assert MAINTENANCE in taints  # a patch from the stale view would have replaced the list
    assert {"key": keys.RESERVED_TAINT_KEY, "value": uid, "effect": "NoSchedule"} in taints
    assert after["metadata"]["labels"]["team"] == "a"
    assert node_reads(ctx) == 1


async def test_a_node_cordoned_after_the_view_is_never_reserved(
    ctx: Context, admin: KubeClient, namespace: str, node: Obj
) -> None:
    _cache(ctx, await admin.get(_path(node)))
    await admin.merge_patch(_path(node), {"spec": {"unschedulable": True}})
    with pytest.raises(AdmissionAborted, match="cordoned by someone else"):
        await _reserve(ctx, namespace, node)
    after = await admin.get(_path(node))
    assert node_view(after).reservation is None
    assert not after["spec"].get("taints")
