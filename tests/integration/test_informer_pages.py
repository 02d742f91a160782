"""kubeio/informer.py's first list against the real kube-apiserver, in pages: every object is
cached once, whatever the page size, and the next page is asked for before the page in hand is
reduced (issue 47: at 100,000 Nodes, 201 pages one after the other took 15.5 s of the
controller's cold start, half of each page's time the server's, which the reduction of the
page before can overlap)."""

import asyncio
from typing import Any

import pytest

from kubeio.client import Kube, Obj, resource_path
from kubeio.informer import Informer
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]
OBJECTS = 23
PAGE = 5


class Counting:
    """The real client, counting the requests started (a page's task ran its first step)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.started = 0

    async def get(self, path: str, **query: str) -> Obj:
        self.started += 1
        return await self.kube.get(path, **query)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


async def test_a_paged_list_caches_every_object_and_asks_for_the_next_page_first(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    path = resource_path("v1", "configmaps", namespace)
    names = [f"page-{i:02d}" for i in range(OBJECTS)]
    await asyncio.gather(*(admin.create(path, {"metadata": {"name": n}, "data": {"i": n}}) for n in names))
    kube = await Kube.connect(kubeconfig=str(cluster.plane.admin_kubeconfig), field_manager="test")
    counting = Counting(kube)
    asked: dict[str, int] = {}  # object -> requests started when it was reduced

    def reduce(obj: Obj) -> str:
        asked[obj["metadata"]["name"]] = counting.started
        return str(obj["data"]["i"]) if obj.get("data") else ""

    informer: Informer[str] = Informer(counting, path, reduce)  # type: ignore[arg-type]
    informer.page_size = PAGE
    informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 60)
        cached = {k.split("/", 1)[1]: v for k, v in informer.items.items() if k.split("/", 1)[1] in names}
        assert cached == {n: n for n in names}
        # The server lists in name order: object i is on page i // PAGE. While page k is
        # reduced, page k + 1's request has started (k + 2 requests), except on the last page.
        ordered = sorted(n for n in asked if n in names)
        pages = -(-len(asked) // PAGE)
        for name in ordered:
            page = sorted(asked).index(name) // PAGE
            wanted = page + 1 if page == pages - 1 else page + 2
            assert asked[name] == wanted, f"{name} (page {page}) reduced after {asked[name]} requests, not {wanted}"
        assert counting.started == pages
    finally:
        await informer.stop()
        await kube.close()
