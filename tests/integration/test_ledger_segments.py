"""The admission ledger's head and segments (controller/rules/ledger.py,
controller/reconcile/ledgerstore.py) against the real kube-apiserver (issue 47): the
controller's context reads, writes and fences the ledger as in production, as admin here (who
may write the ledger is tests/integration/test_attacks_identities.py's business).

* A head of an earlier version, its groups inline, is read as it is; the next write (taking
  the fence) moves them into segments and takes ``groups`` out of the head.
* A segment the head names that is deleted, or replaced with other content, makes the ledger
  unreadable (LedgerError): never a group with no Nodes, never a ledger without the group.
* A group dropped deletes its segment at once; a segment no head names is deleted once older
  than SEGMENT_GRACE, never a named one, a young one, or one of a newer fence.
* A fresh controller reads many segments with one LIST (one not listed, by name); a second
  read reads none."""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from controller.reconcile.ledgerstore import SEGMENT_GETS, SEGMENT_GRACE, delete_unnamed
from controller.reconcile.recovery import collect_segments
from controller.reconcile.state import Context
from controller.rules.ledger import LEDGER_NAME, Group, LedgerError, Segment, segment_name, segment_object
from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import Conflict
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient
from tests.controller_support import ledger_groups

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]


class Counting:
    """The real client, counting GETs of single segments and LISTs of ConfigMaps."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.segment_gets = 0
        self.lists = 0
        self.before_segment_get: Callable[[], Awaitable[None]] | None = None
        """Run once, before the next segment GET (another writer's turn)."""

    async def get(self, path: str, **query: str) -> Obj:
        if f"/configmaps/{LEDGER_NAME}-" in path:
            self.segment_gets += 1
        elif path.endswith("/configmaps"):
            self.lists += 1
        return await self.kube.get(path, **query)

    async def get_or_none(self, path: str) -> Obj | None:
        if f"/configmaps/{LEDGER_NAME}-" in path:
            self.segment_gets += 1
            hook, self.before_segment_get = self.before_segment_get, None
            if hook is not None:
                await hook()
        return await self.kube.get_or_none(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


async def _context(cluster: LocalCluster, namespace: str) -> tuple[Context, Counting]:
    kube = await Kube.connect(kubeconfig=str(cluster.plane.admin_kubeconfig), field_manager="test")
    counting = Counting(kube)
    return Context(counting, namespace, "me"), counting  # type: ignore[arg-type]


def _segments(items: list[Obj]) -> set[str]:
    return {c["metadata"]["name"] for c in items if c["metadata"]["name"].startswith(f"{LEDGER_NAME}-")}


async def _names(admin: KubeClient, namespace: str) -> set[str]:
    return _segments((await admin.get(resource_path("v1", "configmaps", namespace)))["items"])


async def test_an_earlier_versions_inline_groups_move_into_segments_when_the_fence_is_taken(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    legacy = '{"old-run":{"nodes":["n1","n2"],"profile":"p"}}'
    head = {"metadata": {"name": LEDGER_NAME}, "data": {"fence": "3", "holder": "old", "groups": legacy}}
    await admin.create(resource_path("v1", "configmaps", namespace), head)
    ctx, _ = await _context(cluster, namespace)
    try:
        await ctx.take_fence()
        data = (await admin.get(resource_path("v1", "configmaps", namespace, LEDGER_NAME)))["data"]
        assert "groups" not in data
        assert (data["fence"], data["holder"]) == ("4", "me")
        assert await ledger_groups(admin, namespace) == {"old-run": {"profile": "p", "nodes": ["n1", "n2"]}}
        assert (await ctx.read_ledger()).held_nodes() == {"n1", "n2"}
    finally:
        await ctx.kube.close()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_segment_gone_or_replaced_makes_the_ledger_unreadable(
    cluster: LocalCluster, admin: KubeClient, namespace: str, how: str
) -> None:
    ctx, _ = await _context(cluster, namespace)
    try:
        await ctx.take_fence()
        ledger = await ctx.write_ledger((await ctx.read_ledger()).with_group("run-a", Group("p", ("n1", "n2"))))
        name = segment_name(ledger.digests["run-a"])
        path = resource_path("v1", "configmaps", namespace, name)
        await admin.delete(path)
        if how == "replaced":  # immutable: a new object under the same name, the group emptied
            forged = segment_object(Segment("run-a", Group("p", ()), ctx.fence), namespace)
            await admin.create(resource_path("v1", "configmaps", namespace), {**forged, "metadata": {"name": name}})
        fresh, _ = await _context(cluster, namespace)  # a restarted controller: nothing cached
        fresh.fence = ctx.fence
        fresh.identity = ctx.identity
        try:
            problem = "is missing" if how == "deleted" else "does not match the digest"
            with pytest.raises(LedgerError, match=problem):
                await fresh.read_ledger()
            assert problem in fresh.ledger_problem
        finally:
            await fresh.kube.close()
    finally:
        await ctx.kube.close()


async def test_a_group_dropped_while_its_segment_is_read_is_read_again_not_missing(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    """A deposed leader may drop a group (head, then segment) between another controller's
    read of the head and of the segment: the reader reads the head again, and finds no group
    rather than a missing segment (tests/integration/test_recovery_after_crash.py's release
    and rollback saw this race in their own reads, before those were made the same way)."""
    ctx, _ = await _context(cluster, namespace)
    reader, counting = await _context(cluster, namespace)
    try:
        await ctx.take_fence()
        await ctx.write_ledger((await ctx.read_ledger()).with_group("run-a", Group("p", ("n1",))))
        reader.fence, reader.identity = ctx.fence, ctx.identity

        async def dropped() -> None:
            await ctx.drop_group("run-a")

        counting.before_segment_get = dropped
        ledger = await reader.read_ledger()
        assert counting.before_segment_get is None, "the other writer's turn came"
        assert dict(ledger.groups) == {}
        assert reader.ledger_problem == ""
    finally:
        await ctx.kube.close()
        await reader.kube.close()


async def test_a_dropped_groups_segment_goes_at_once_and_an_unnamed_one_after_the_grace(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    ctx, _ = await _context(cluster, namespace)
    try:
        await ctx.take_fence()
        ledger = await ctx.read_ledger()
        ledger = await ctx.write_ledger(ledger.with_group("run-a", Group("p", ("n1",))))
        ledger = await ctx.write_ledger(ledger.with_group("run-b", Group("p", ("n2",))))
        a, b = (segment_name(ledger.digests[r]) for r in ("run-a", "run-b"))
        assert await _names(admin, namespace) == {a, b}
        await ctx.drop_group("run-a")
        assert await _names(admin, namespace) == {b}
        # A segment written before a compare-and-swap that lost: named by no head.
        lost = segment_object(Segment("run-c", Group("p", ("n3",)), ctx.fence), namespace)
        await admin.create(resource_path("v1", "configmaps", namespace), lost)
        # One the leader after this one wrote (a newer fence), seen by this deposed one.
        newer = segment_object(Segment("run-d", Group("p", ("n4",)), ctx.fence + 1), namespace)
        await admin.create(resource_path("v1", "configmaps", namespace), newer)
        named = (await ctx.read_ledger()).digests
        assert await delete_unnamed(ctx.kube, namespace, named, ctx.fence, datetime.now(UTC)) == (0, 2), "young: kept"
        later = datetime.now(UTC) + SEGMENT_GRACE + SEGMENT_GRACE / 10
        assert await delete_unnamed(ctx.kube, namespace, named, ctx.fence, later) == (1, 1), "newer: kept"
        assert await _names(admin, namespace) == {b, newer["metadata"]["name"]}
        assert await ledger_groups(admin, namespace) == {"run-b": {"profile": "p", "nodes": ["n2"]}}
    finally:
        await ctx.kube.close()


async def test_a_fresh_controller_lists_the_segments_once_and_then_reads_none(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    ctx, _ = await _context(cluster, namespace)
    fresh, counting = await _context(cluster, namespace)
    try:
        await ctx.take_fence()
        ledger = await ctx.read_ledger()
        many = SEGMENT_GETS + 4
        for i in range(many):
            ledger = await ctx.write_ledger(ledger.with_group(f"run-{i}", Group("p", (f"n{i}",))))
        fresh.fence, fresh.identity = ctx.fence, ctx.identity
        # Immutable is the content only: one segment's label taken off, it is not listed, and
        # is read by its name (its content still verified by the digest it is named by).
        unlabelled = resource_path("v1", "configmaps", namespace, segment_name(ledger.digests["run-0"]))
        await admin.merge_patch(unlabelled, {"metadata": {"labels": None}})
        assert len((await fresh.read_ledger()).groups) == many
        assert (counting.lists, counting.segment_gets) == (1, 1)
        ledger = await fresh.read_ledger()
        assert (counting.lists, counting.segment_gets) == (1, 1), "segments are read once"
        await fresh.write_ledger(ledger.with_group("run-new", Group("p", ("n-new",))))
        await ctx.read_ledger()  # the other context: one segment new to it, one GET
        assert ctx.kube.segment_gets == 1  # type: ignore[attr-defined]
        assert (await ctx.read_ledger()).held_nodes() == {f"n{i}" for i in range(many)} | {"n-new"}
    finally:
        await ctx.kube.close()
        await fresh.kube.close()


async def test_a_resync_lists_the_segments_only_when_one_may_have_been_left(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    """The goal of no LIST after sync (issue 47): a resync looks for unnamed segments at start
    and after a failed write only; one kept for being young is looked for again."""
    ctx, counting = await _context(cluster, namespace)
    try:
        await ctx.take_fence()
        assert ctx.segments_litter, "at start, a crash may have left one"
        assert await collect_segments(ctx) == 0
        lists = counting.lists
        assert (lists, ctx.segments_litter) == (1, False)
        ledger = await ctx.write_ledger((await ctx.read_ledger()).with_group("run-a", Group("p", ("n1",))))
        await ctx.drop_group("run-a")
        assert await collect_segments(ctx) == 0
        assert counting.lists == lists, "nothing left: no LIST"
        # A compare-and-swap that loses (a stale head) after its segment was written.
        with pytest.raises(Conflict):
            await ctx.write_ledger(ledger.with_group("run-b", Group("p", ("n2",))))
        assert ctx.segments_litter
        assert await collect_segments(ctx) == 0, "the segment left is young: kept"
        assert counting.lists == lists + 1
        assert ctx.segments_litter, "kept: looked for again"
        assert len(await _names(admin, namespace)) == 1
    finally:
        await ctx.kube.close()
