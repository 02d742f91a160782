"""Concurrent HTTP/1.1 requests for the floors' bare clients, over one connection per lane.

One pooled ``httpx.AsyncClient`` is no floor at 64 requests in flight: httpcore 1.0's pool
matches every waiting request against every connection each time one request starts or ends
(``AsyncConnectionPool._assign_requests_to_connections``), and at 64 idle keep-alive connections
64 label PATCHes at once cost the client about 0.5 s of CPU against 0.18 s on fresh connections
(1.35 million ``is_idle`` calls a round under cProfile, 2026-12-05). On two cores that CPU is
taken from the API server the floor measures, so the floor was slower than a plain client can be.
Signal's services do not pay it (kubeio/http.py holds its own pool).

:class:`Lanes` keeps ``count`` clients of one connection each and hands a free one to each
request, the most recently used first (``LifoQueue``): one request after another reuses one warm
connection, as a pooled client does, and ``count`` requests at once each own one.
"""

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any

import httpx


class Lanes:
    def __init__(
        self, count: int, *, base_url: str, verify: ssl.SSLContext, headers: Mapping[str, str], timeout: float
    ) -> None:
        if count < 1:
            raise ValueError(f"Lanes needs at least one lane, not {count}")
        one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        self._clients = [
            httpx.AsyncClient(base_url=base_url, verify=verify, headers=dict(headers), timeout=timeout, limits=one)
            for _ in range(count)
        ]
        self._free: asyncio.LifoQueue[httpx.AsyncClient] = asyncio.LifoQueue()
        for client in reversed(self._clients):
            self._free.put_nowait(client)

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        client = await self._free.get()
        try:
            return await client.request(method, url, **kwargs)
        finally:
            self._free.put_nowait(client)

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self._clients))
