"""A small raw-JSON Kubernetes client over httpx for the local control plane's own
support code (CRD install, fleet, process kubelet). It shares the pure path builder and
the error hierarchy with kubeio (a request with no answer raises kubeio's
``TransportError``, an answer the ``ApiError`` subclass for its status); the services use
kubeio's gateway.
"""

import json
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpcore
import httpx

from kubeio.client import resource_path
from kubeio.errors import ApiError, TransportError, error_for, parse_retry_after

Obj = dict[str, Any]

CORE_PLURALS = {
    "pods",
    "nodes",
    "namespaces",
    "configmaps",
    "secrets",
    "services",
    "serviceaccounts",
    "events",
}


class _ClosingStream(httpcore.AsyncNetworkStream):
    """A TCP stream closed when its TLS handshake ends in anything but success, cancellation
    included. httpcore (1.0.9, ``AnyIOStream.start_tls``) closes it only when the handshake
    raises an ``Exception``: a request cancelled mid-handshake (a task cancelled while the API
    server, restarted by a fault or slow under load, had not finished it) left its socket to the
    garbage collector, which warned ``unclosed transport <_SelectorSocketTransport ...>``."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            return await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            raise

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _ClosingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's own backend, with each TCP stream a ``_ClosingStream``."""

    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        return _ClosingStream(await self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def transport(context: ssl.SSLContext, limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """httpx's transport over a connection pool whose sockets are closed even when a request is
    cancelled during the TLS handshake (``_ClosingStream``)."""
    made = httpx.AsyncHTTPTransport(verify=context, limits=limits)
    # httpx takes no network backend: its pool is replaced by one that has ours.
    made._pool = httpcore.AsyncConnectionPool(
        ssl_context=context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_ClosingBackend(),
    )
    return made


@dataclass
class KubeClient:
    """Bearer-token client for one identity."""

    server: str
    token: str
    ca_file: Path
    timeout: float = 30.0

    def __post_init__(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        self._http = httpx.AsyncClient(
            base_url=self.server,
            transport=transport(context, limits),
            headers={"Authorization": f"Bearer {self.token}", "Accept": "application/json"},
            timeout=self.timeout,
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "KubeClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        accept: str | None = None,
    ) -> Obj:
        content = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
        headers = {"Content-Type": content_type} if content is not None else {}
        if accept:
            headers["Accept"] = accept
        try:
            try:
                response = await self._http.request(method, path, content=content, params=params, headers=headers)
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
                # A keep-alive connection the server has just closed fails on reuse. Only a
                # read is safe to send again; a write may have been applied, so it surfaces.
                if method != "GET":
                    raise
                response = await self._http.request(method, path, content=content, params=params, headers=headers)
        except httpx.TransportError as exc:
            # The same error kubeio raises: no answer at all (refused, reset, timed out).
            raise TransportError(f"{type(exc).__name__}: {exc}", method, path) from exc
        if response.status_code >= 300:
            try:
                status = response.json()
            except ValueError:
                status = {"message": response.text}
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            raise error_for(response.status_code, status, method, path, retry_after=retry_after)
        if not response.content:
            return {}
        result: Obj = response.json()
        return result

    async def get(self, path: str, **params: str) -> Obj:
        return await self.request("GET", path, params=params or None)

    async def text(self, path: str, **params: str) -> str:
        """GET an answer that is not JSON (e.g. ``pods/NAME/log``)."""
        try:
            response = await self._http.get(path, params=params or None)
        except httpx.TransportError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}", "GET", path) from exc
        if response.status_code >= 300:
            raise error_for(response.status_code, {"message": response.text}, "GET", path)
        return response.text

    async def create(self, path: str, body: Obj) -> Obj:
        return await self.request("POST", path, body=body)

    async def merge_patch(self, path: str, patch: Obj) -> Obj:
        return await self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    async def apply(self, path: str, body: Obj | str, manager: str = "signal-localcluster") -> Obj:
        """Server-side apply (forced) of a whole object."""
        return await self.request(
            "PATCH",
            path,
            body=body,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": manager, "force": "true"},
        )

    async def delete(self, path: str, body: Obj | None = None) -> Obj:
        return await self.request("DELETE", path, body=body)

    async def watch(self, path: str, **params: str) -> AsyncIterator[Obj]:
        """Yield watch events (dicts with type and object) until the server closes."""
        query = {"watch": "true", "allowWatchBookmarks": "true", **params}
        try:
            async with self._http.stream("GET", path, params=query, timeout=None) as response:
                if response.status_code >= 300:
                    text = (await response.aread()).decode(errors="replace")
                    raise error_for(response.status_code, {"message": text}, "WATCH", path)
                async for line in response.aiter_lines():
                    if line:
                        yield json.loads(line)
        except httpx.TransportError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}", "WATCH", path) from exc


__all__ = ["ApiError", "KubeClient", "Obj", "resource_path"]
