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


@dataclass
class KubeClient:
    """Bearer-token client for one identity."""

    server: str
    token: str
    ca_file: Path
    timeout: float = 30.0

    def __post_init__(self) -> None:
        self._http = httpx.AsyncClient(
            base_url=self.server,
            verify=ssl.create_default_context(cafile=str(self.ca_file)),
            headers={"Authorization": f"Bearer {self.token}", "Accept": "application/json"},
            timeout=self.timeout,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
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
