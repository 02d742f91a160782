"""Raw-JSON requests and watches through kubernetes_asyncio's configured ApiClient."""

import json
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

from kubeio import crashpoints
from kubeio.errors import ApiError, NotFound, error_for

Obj = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_WRITES = {"POST", "PUT", "PATCH", "DELETE"}
# Benchmarks set SIGNAL_REQUEST_LOG=<file> to record every request (time, verb, path).
_REQUEST_LOG = os.environ.get("SIGNAL_REQUEST_LOG", "")


def resource_path(
    api_version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """URL path of a collection or an object."""
    parts = ["/api/v1" if api_version == "v1" else f"/apis/{api_version}"]
    if namespace:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name:
        parts.append(name)
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


def _verb(method: str, path: str, query: Mapping[str, str] | None) -> str:
    """GET/LIST/WATCH/POST/... as the API server's audit log would name it."""
    if method != "GET":
        return method
    if query and query.get("watch") == "true":
        return "WATCH"
    segments = path.strip("/").split("/")
    collection = len(segments) % 2 == (1 if segments[0] == "api" else 0)
    return "LIST" if collection else "GET"


class Kube:
    """One identity's connection to the API server."""

    def __init__(self, api_client: k8s.ApiClient, *, field_manager: str) -> None:
        self.api = api_client
        self.field_manager = field_manager
        self.requests: dict[str, int] = {}
        """Requests sent, by verb (for benchmarks)."""

    @classmethod
    async def connect(cls, *, kubeconfig: str | None, field_manager: str) -> "Kube":
        """In-cluster configuration when running in a Pod, else the kubeconfig file."""
        configuration = k8s.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return cls(k8s.ApiClient(configuration=configuration), field_manager=field_manager)

    async def close(self) -> None:
        await self.api.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
    ) -> Any:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        await self.api.update_params_for_auth(headers, [], ["BearerToken"])
        url = f"{self.api.configuration.host}{path}"
        verb = _verb(method, path, query)
        self.requests[verb] = self.requests.get(verb, 0) + 1
        if _REQUEST_LOG:
            with open(_REQUEST_LOG, "a", encoding="utf-8") as handle:  # noqa: ASYNC230 - benchmarks only
                handle.write(f"{time.time():.3f}\t{verb}\t{path}\n")
        try:
            return await self.api.rest_client.request(
                method,
                url,
                query_params=dict(query or {}),
                headers=headers,
                body=body,
                _preload_content=False,
                _request_timeout=timeout,
            )
        except ApiException as exc:  # pragma: no cover - only raised with preloaded content
            raise error_for(exc.status or 0, exc.body, method, path) from exc

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """Send one request; raise an ``ApiError`` subclass on a non-2xx answer."""
        write = method in _WRITES
        if write:
            crashpoints.hit(f"before {method} {path}")
        response = await self._send(method, path, body=body, query=query, content_type=content_type)
        try:
            payload = await response.read()
        finally:
            response.release()
        try:
            decoded = json.loads(payload) if payload else {}
        except ValueError:
            decoded = {"message": payload[:500].decode(errors="replace")}
        if response.status >= 300:
            raise error_for(response.status, decoded, method, path)
        if write:
            crashpoints.hit(f"after {method} {path}")
        return cast(Obj, decoded)

    async def get(self, path: str, **query: str) -> Obj:
        return await self.request("GET", path, query=query or None)

    async def get_or_none(self, path: str) -> Obj | None:
        try:
            return await self.get(path)
        except NotFound:
            return None

    async def create(self, path: str, body: Obj) -> Obj:
        return await self.request("POST", path, body=body, query={"fieldManager": self.field_manager})

    async def replace(self, path: str, body: Obj) -> Obj:
        return await self.request("PUT", path, body=body, query={"fieldManager": self.field_manager})

    async def merge_patch(self, path: str, patch: Obj) -> Obj:
        return await self.request(
            "PATCH", path, body=patch, content_type=MERGE_PATCH, query={"fieldManager": self.field_manager}
        )

    async def strategic_patch(self, path: str, patch: Obj) -> Obj:
        """Strategic merge patch (built-in types only): lists such as Node conditions merge by key."""
        return await self.request(
            "PATCH", path, body=patch, content_type=STRATEGIC_PATCH, query={"fieldManager": self.field_manager}
        )

    async def delete(
        self, path: str, *, uid: str | None = None, propagation: str | None = None, grace_seconds: int | None = None
    ) -> Obj:
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if propagation:
            body["propagationPolicy"] = propagation
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        return await self.request("DELETE", path, body=body)

    async def watch(self, path: str, *, resource_version: str, **query: str) -> AsyncIterator[Obj]:
        """Watch events (with bookmarks) until the server ends the stream."""
        params = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": resource_version, **query}
        response = await self._send("GET", path, query=params, timeout=None)
        try:
            if response.status >= 300:
                raise error_for(response.status, json.loads(await response.read() or b"{}"), "WATCH", path)
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)
        finally:
            response.release()


__all__ = ["ApiError", "Kube", "Obj", "resource_path"]
