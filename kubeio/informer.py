"""List-then-watch caches of raw objects, with bookmarks and re-list on 410 Gone.

Each object is reduced by a caller-supplied function as it arrives, so a cache holds only
what its user needs (e.g. a compact Node view). ``changed`` is set on every change."""

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import structlog

from kubeio.client import Kube, Obj
from kubeio.errors import ApiError

T = TypeVar("T")
log = structlog.get_logger("informer")


class Informer(Generic[T]):
    page_size = 500

    def __init__(self, kube: Kube, path: str, reduce: Callable[[Obj], T], **query: str) -> None:
        self.kube = kube
        self.path = path
        self.reduce = reduce
        self.query = query
        self.items: dict[str, T] = {}
        self.synced = asyncio.Event()
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @staticmethod
    def key(obj: Obj) -> str:
        meta: dict[str, Any] = obj["metadata"]
        return f"{meta.get('namespace') or ''}/{meta['name']}"

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"informer {self.path}")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _list(self) -> tuple[dict[str, T], str]:
        """List in pages, reducing each page as it arrives, so the peak memory of the initial
        sync is one page of raw JSON rather than the whole collection."""
        items: dict[str, T] = {}
        token = ""
        while True:
            query = {**self.query, "limit": str(self.page_size)}
            if token:
                query["continue"] = token
            page = await self.kube.get(self.path, **query)
            for obj in page.get("items", []):
                items[self.key(obj)] = self.reduce(obj)
            token = page["metadata"].get("continue") or ""
            if not token:
                return items, page["metadata"]["resourceVersion"]

    async def _run(self) -> None:
        while True:
            try:
                self.items, version = await self._list()
                self.synced.set()
                self.changed.set()
                while True:
                    async for event in self.kube.watch(self.path, resource_version=version, **self.query):
                        kind, obj = event["type"], event["object"]
                        if kind == "ERROR":
                            raise ApiError(int(obj.get("code", 500)), obj.get("reason", ""), obj.get("message", ""))
                        version = obj["metadata"]["resourceVersion"]
                        if kind == "BOOKMARK":
                            continue
                        if kind == "DELETED":
                            self.items.pop(self.key(obj), None)
                        else:
                            self.items[self.key(obj)] = self.reduce(obj)
                        self.changed.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any watch failure means: list again
                log.info("informer re-listing", path=self.path, error=str(exc)[:200])
                await asyncio.sleep(0.5)
