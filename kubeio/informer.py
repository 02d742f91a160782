"""List-then-watch caches of raw objects, with bookmarks, resumption and re-list on 410 Gone.

Each object is reduced by a caller-supplied function as it arrives, so a cache holds only
what its user needs (e.g. a compact Node view); an object the function cannot reduce is
left out of the cache and logged, never fatal. ``changed`` is set on every change and every
handler is called with ``(key, old, new)``.

A watch asks the server to end it after ``timeoutSeconds`` and is resumed from the last
resourceVersion seen (events or bookmarks); a stream silent past that is a dead connection.
When a watch cannot be resumed the cache reports itself unsynced (``is_synced``, with the
reason in ``last_error``), tries again with a capped, jittered backoff logged at WARNING,
and becomes synced again as soon as a watch is re-established or a list succeeds.

Failures count until a stream proves it follows the server: it delivered an event (or a
bookmark), or stayed open ``MIN_HEALTHY_STREAM`` seconds. A watch answered and then broken at
once (a garbled or oversized line, an event without a resourceVersion, a proxy closing every
stream), or ended at once without an event, is a failure like a refused connection: the first
is resumed at once, the next ones back off, and after ``RELIST_AFTER`` such streams in a row
the cache lists again instead of replaying what broke them. A 410 Gone re-lists
at once the first time and backs off when it comes again before the stream proved itself."""

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import structlog

from kubeio.client import WATCH_SECONDS, Kube, Obj
from kubeio.errors import ApiError, Gone, error_for

T = TypeVar("T")
log = structlog.get_logger("informer")
MIN_HEALTHY_STREAM = 5.0
"""Seconds a watch must stay open (when it delivers nothing) to count as following the server."""
RELIST_AFTER = 3
"""Watches in a row answered and then broken, with no event delivered, after which the cache
lists again (a refused connection resumes from the last version, however often)."""


YIELD_EVERY = 100
"""Objects of a listed page reduced between two yields to the event loop (the next page's
request and answer go on meanwhile)."""


class WatchEnded(Exception):
    """A watch stream ended before it delivered anything or stayed open long enough."""


Handler = Callable[[str, T | None, T | None], None]


def backoff_delay(failures: int, *, base: float = 0.5, cap: float = 10.0, rand: float = 0.5) -> float:
    """Delay before the ``failures``-th retry (1-based): doubling from ``base`` up to ``cap``,
    scaled by a jitter factor in [0.75, 1.25) from ``rand`` in [0, 1). Pure."""
    raw = min(cap, base * (2.0 ** max(0, failures - 1)))
    return raw * (0.75 + rand / 2)


class Informer(Generic[T]):
    page_size = 500
    watch_seconds = WATCH_SECONDS
    """A watch asks the server to end it after this long; it is then resumed."""
    max_backoff = 10.0
    """The longest wait between attempts while the API server cannot be followed."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        reduce: Callable[[Obj], T],
        **query: str,
    ) -> None:
        self.kube = kube
        self.path = path
        self.reduce = reduce
        self.query = query
        self.items: dict[str, T] = {}
        self.synced = asyncio.Event()
        """Set once the first list has completed (and stays set)."""
        self.changed = asyncio.Event()
        self.handlers: list[Handler[T]] = []
        self.last_error = ""
        """Why the cache is not synced now (empty while it is)."""
        self.unreducible = 0
        """Objects left out of the cache because ``reduce`` failed on them."""
        self._fresh = False
        self._version = ""
        self._failures = 0
        self._gones = 0
        self._broken = 0
        """Failures in a row of watches that were answered and then broke (see RELIST_AFTER)."""
        self._progressed = False
        self._opened_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._rng = random.Random()
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    @property
    def is_synced(self) -> bool:
        """True while the cache follows the server: listed, and its watch open or resumable."""
        return self._fresh

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

    def _reduce(self, obj: Obj) -> T | None:
        try:
            return self.reduce(obj)
        except Exception as exc:  # one malformed object must not stop the cache
            self.unreducible += 1
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            log.warning(
                "object left out of the cache: it cannot be read",
                path=self.path,
                object=(meta or {}).get("name") if isinstance(meta, dict) else None,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
            return None

    def _notify(self, key: str, old: T | None, new: T | None) -> None:
        for handler in self.handlers:
            try:
                handler(key, old, new)
            except Exception:  # a handler's bug must not stop the cache
                log.exception("informer handler failed", path=self.path, key=key)

    def _put(self, key: str, value: T | None) -> None:
        old = self.items.get(key)
        if value is None:
            self.items.pop(key, None)
        else:
            self.items[key] = value
        if old is not None or value is not None:
            self._notify(key, old, value)
        self.changed.set()

    def _replace(self, items: dict[str, T]) -> None:
        previous, self.items = self.items, items
        for key in previous.keys() | items.keys():
            old, new = previous.get(key), items.get(key)
            if old is not new and old != new:
                self._notify(key, old, new)
        self.changed.set()

    async def _list(self) -> tuple[dict[str, T], str]:
        """List in pages, reducing each page as it arrives, so the peak memory of the initial
        sync is two pages of raw JSON rather than the whole collection. The next page is asked
        for before this one is reduced, and the reduction yields every ``YIELD_EVERY`` objects:
        the server prepares and sends a page while this process reduces the one before (at
        100,000 Nodes, 201 pages one after the other took 15.5 s of the cold start, 12.4 s so;
        what is left is mostly this process decoding and reducing them)."""
        items: dict[str, T] = {}
        upcoming = self._page("")
        try:
            while True:
                page = await upcoming
                token = page["metadata"].get("continue") or ""
                if token:
                    upcoming = self._page(token)
                    await asyncio.sleep(0)  # the next request goes out before this page is reduced
                for count, obj in enumerate(page.get("items", []), 1):
                    reduced = self._reduce(obj)
                    if reduced is not None:
                        items[self.key(obj)] = reduced
                    if count % YIELD_EVERY == 0:
                        await asyncio.sleep(0)
                if not token:
                    return items, page["metadata"]["resourceVersion"]
        finally:
            upcoming.cancel()  # a list ended by an error or a cancellation asks for nothing more

    def _page(self, token: str) -> "asyncio.Task[Obj]":
        query = {**self.query, "limit": str(self.page_size)}
        if token:
            query["continue"] = token
        task = asyncio.ensure_future(self.kube.get(self.path, **query))
        # A page asked for and then not awaited (the list ended first): its outcome is read here.
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        return task

    def _mark_synced(self) -> None:
        if not self._fresh and self.synced.is_set():
            log.warning("informer synced again", path=self.path)
        self._fresh = True
        self.last_error = ""
        self.synced.set()
        self.changed.set()

    def _mark_unsynced(self, reason: str) -> None:
        self._fresh = False
        self.last_error = reason
        self.changed.set()

    def _opened(self) -> None:
        self._opened_at = time.monotonic()
        self._mark_synced()

    def _proved(self) -> bool:
        """Whether the current stream showed that it follows the server (see the module docstring)."""
        if self._progressed:
            return True
        lived = time.monotonic() - self._opened_at if self._opened_at is not None else 0.0
        return self._opened_at is not None and lived >= min(MIN_HEALTHY_STREAM, self.watch_seconds / 2)

    async def _watch(self) -> None:
        """Follow one watch stream from ``_version``, advancing it with every event."""
        async for event in self.kube.watch(
            self.path,
            resource_version=self._version,
            timeout_seconds=self.watch_seconds,
            opened=self._opened,
            query=self.query,
        ):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise error_for(int(obj.get("code", 500)), obj, "WATCH", self.path)
            self._version = obj["metadata"]["resourceVersion"]
            self._progressed = True
            if kind == "BOOKMARK":
                continue
            key = self.key(obj)
            self._put(key, None if kind == "DELETED" else self._reduce(obj))

    async def _run(self) -> None:
        while True:
            self._progressed, self._opened_at = False, None
            try:
                if not self._version:
                    items, self._version = await self._list()
                    self._replace(items)
                    self._mark_synced()
                await self._watch()
                if not self._proved():
                    raise WatchEnded("the watch ended at once, without an event")
                self._failures = self._broken = self._gones = 0  # its timeout: resumed from there
            except asyncio.CancelledError:
                raise
            except Gone as exc:
                self._version = ""
                self._gones = 1 if self._proved() else self._gones + 1
                if self._gones == 1:
                    log.info("informer re-listing: its resourceVersion expired", path=self.path)
                else:  # expired again before a stream proved itself: not a hot re-list loop
                    await self._back_off(exc, self._gones, "its resourceVersion expired again; re-listing")
            except Exception as exc:  # any other failure: resume, else back off and try again
                if self._proved():
                    self._failures = self._broken = 0
                self._failures += 1
                if self._opened_at is not None:  # answered, then broken: what broke it may come again
                    self._broken += 1
                if self._failures == 1 and self._version:
                    log.info("watch ended; resuming", path=self.path, error=f"{type(exc).__name__}: {exc}"[:300])
                    continue
                if self._version and self._broken >= RELIST_AFTER:
                    log.warning("informer re-listing: its watch keeps breaking", path=self.path, at=self._version)
                    self._version, self._broken = "", 0
                await self._back_off(exc, self._failures, "")

    async def _back_off(self, exc: Exception, failures: int, what: str) -> None:
        """Report the cache unsynced and wait before the next attempt (capped, jittered)."""
        reason = f"{what + ': ' if what else ''}{type(exc).__name__}: {exc}"[:300]
        self._mark_unsynced(reason)
        delay = backoff_delay(failures, cap=self.max_backoff, rand=self._rng.random())
        retry_after = exc.retry_after if isinstance(exc, ApiError) else None
        delay = max(delay, min(retry_after or 0.0, self.max_backoff * 3))
        log.warning(
            "informer cannot follow the API server; its cache is not synced",
            path=self.path,
            error=reason,
            failures=failures,
            retry_in=round(delay, 2),
            resume_from=self._version or None,
        )
        await self._sleep(delay)
