"""Raw-JSON requests and watches over HTTP/1.1 (kubeio/http.py), to the ``kubeio.transport.Endpoint``
configured.

The edge of the services: every request has a timeout, every failure leaves as a
``kubeio.errors.ApiError`` (``TransportError`` when no answer came), retryable reads are
sent again honouring Retry-After, and every write passes an optional guard (the
controller's leadership) and the crash points."""

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast
from urllib.parse import urlencode

import structlog

from kubeio import crashpoints, testhooks
from kubeio.errors import ApiError, NotFound, TooManyRequests, TransportError, error_for, parse_retry_after
from kubeio.http import HttpError, Pool, Response
from kubeio.transport import ConfigError, Endpoint, from_kubeconfig, in_cluster
from shared.version import VERSION

Obj = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_WRITES = {"POST", "PUT", "PATCH", "DELETE"}
WATCH_SECONDS = 290
"""A watch asks the server to end it after this long (then it is resumed)."""
WATCH_GRACE = 30
"""A watch silent this long past its timeoutSeconds is a dead connection."""
MAX_RETRY_WAIT = 5.0
MAX_CONNECTIONS = 100
"""Connections open to the API server at once (each watch holds one)."""
log = structlog.get_logger("kubeio")


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
    """GET/LIST/WATCH/POST/... as the API server's audit log would name it (a server-side
    dry run, which stores nothing, as e.g. POST-DRYRUN)."""
    if method != "GET":
        return f"{method}-DRYRUN" if query and query.get("dryRun") else method
    if query and query.get("watch") == "true":
        return "WATCH"
    segments = path.strip("/").split("/")
    collection = len(segments) % 2 == (1 if segments[0] == "api" else 0)
    return "LIST" if collection else "GET"


def _retry_delay(error: ApiError, attempt: int) -> float:
    """How long to wait before sending a request again: the server's Retry-After when it gave
    one, else a short doubling delay; capped so that a reconcile is never held for long (the
    work queue backs off further)."""
    if error.retry_after is not None:
        return min(error.retry_after, MAX_RETRY_WAIT)
    return min(0.2 * (2.0**attempt), MAX_RETRY_WAIT)


def _may_resend(method: str, error: ApiError) -> bool:
    """A read may be sent again after any retryable failure; a write only after a 429 (the
    server refused it before acting on it): a write that got no answer may have been applied,
    so it goes back to its caller, whose writes are safe to repeat at the next reconcile."""
    if not error.retryable:
        return False
    return method == "GET" or isinstance(error, TooManyRequests)


def user_agent(component: str) -> str:
    """The User-Agent of every request: the component (its field manager, e.g.
    ``signal-controller``), Signal's version, the client and Python, so API server audit logs
    and metrics tell Signal's components apart (issue 45)."""
    return f"{component}/{VERSION} (kubeio; python/{sys.version_info[0]}.{sys.version_info[1]})"


class Kube:
    """One identity's connection to the API server. Every request has a timeout; a request
    that fails without an answer raises ``TransportError``; reads that fail in a retryable way
    are sent again (at most ``retries`` times, honouring Retry-After)."""

    def __init__(self, endpoint: Endpoint, *, field_manager: str, timeout: float = 30.0, retries: int = 2) -> None:
        self.endpoint = endpoint
        self.host = endpoint.host
        self._pool_: Pool | None = None
        self.field_manager = field_manager
        self.user_agent = user_agent(field_manager)
        self.timeout = timeout
        self.retries = retries
        self.requests: dict[str, int] = {}
        """Requests sent, by verb (for benchmarks)."""
        self.crash_points = True
        """Whether writes pass the crash points (off for the controller's Lease connection: its
        renewals come at times of their own and would shift the numbering of the others)."""
        self.write_guard: Callable[[str, str], None] | None = None
        """Called with (method, path) before every write (not dry runs, which change nothing);
        raises to refuse it (the controller's leadership)."""
        self.observe: Callable[[str, str, float], None] | None = None
        """Called with (verb, HTTP code or ``error``, seconds) after every request sent (a
        watch: once the server answered it); the controller's metrics (kubeio imports none)."""

    @classmethod
    async def connect(cls, *, kubeconfig: str | None, field_manager: str, timeout: float = 30.0) -> "Kube":
        """In-cluster configuration when running in a Pod, else the kubeconfig file (raises
        ``kubeio.transport.ConfigError`` when neither is usable)."""
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            endpoint = in_cluster()
        else:
            endpoint = from_kubeconfig(kubeconfig)
        return cls(endpoint, field_manager=field_manager, timeout=timeout)

    def _pool(self) -> Pool:
        """The connection pool, opened at the first request (inside the event loop)."""
        if self._pool_ is None:
            self._pool_ = Pool(self.host, self.endpoint.ssl, self.endpoint.server_hostname, limit=MAX_CONNECTIONS)
        return self._pool_

    async def close(self) -> None:
        if self._pool_ is not None:
            await self._pool_.close()
            self._pool_ = None

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        read_timeout: float | None = None,
        before_send: Callable[[], None] | None = None,
    ) -> Response:
        """Send one request; its answer's head read within ``self.timeout`` (or ``read_timeout``).
        ``before_send`` runs once the credentials and a connection are in hand, right before
        the request goes out."""
        headers = {"Content-Type": content_type, "Accept": "application/json", "User-Agent": self.user_agent}
        verb = _verb(method, path, query)
        self.requests[verb] = self.requests.get(verb, 0) + 1
        request_log = testhooks.current().request_log  # benchmarks: every request, armed only by them
        if request_log is not None:
            with request_log.open("a", encoding="utf-8") as handle:
                handle.write(f"{time.time():.3f}\t{verb}\t{path}\n")
        credentials = self.endpoint.credentials
        try:
            token = await credentials.token() if credentials is not None else None
        except ConfigError as exc:
            raise TransportError(f"no credentials: {exc}", method, path) from exc
        if token:
            headers["Authorization"] = f"Bearer {token}"
        target = path + (f"?{urlencode(query)}" if query else "")
        payload = None if body is None else json.dumps(body).encode()
        deadline = None if read_timeout is not None else time.monotonic() + self.timeout
        try:
            return await self._pool().request(
                method,
                target,
                headers,
                payload,
                deadline=deadline,
                connect_timeout=self.timeout,
                read_timeout=read_timeout,
                before_send=before_send,
            )
        except (HttpError, ValueError) as exc:
            raise TransportError(_describe(exc), method, path) from exc

    async def _once(
        self,
        method: str,
        path: str,
        body: Any,
        query: Mapping[str, str] | None,
        content_type: str,
        before_send: Callable[[], None] | None = None,
    ) -> Obj:
        started = time.monotonic()
        verb, code = _verb(method, path, query), "error"
        try:
            response = await self._send(
                method, path, body=body, query=query, content_type=content_type, before_send=before_send
            )
            try:
                payload = await response.read(deadline=started + self.timeout)
                code = str(response.status)
            except HttpError as exc:
                raise TransportError(f"reading the answer: {_describe(exc)}", method, path) from exc
            finally:
                response.release()
        finally:
            self._observed(verb, code, started)
        try:
            decoded = json.loads(payload) if payload else {}
        except ValueError:
            decoded = {"message": payload[:500].decode(errors="replace")}
        if response.status >= 300:
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            raise error_for(response.status, decoded, method, path, retry_after=retry_after)
        return cast(Obj, decoded)

    def _observed(self, verb: str, code: str, started: float) -> None:
        if self.observe is not None:
            self.observe(verb, code, time.monotonic() - started)

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """Send one request; raise an ``ApiError`` subclass on a non-2xx answer or none."""
        # A server-side dry-run stores nothing: neither guarded nor a crash point.
        write = method in _WRITES and not (query and query.get("dryRun"))
        guarded = write and self.write_guard is not None
        guard = self.write_guard if guarded else None
        # The guard again right before the request goes out: a credential plugin, a wait for
        # a free connection or a slow connect may outlast the term (controller/process/leader.py).
        before_send = None if guard is None else (lambda: guard(method, path))
        if write:
            if guarded and self.write_guard is not None:
                self.write_guard(method, path)
            if self.crash_points:
                crashpoints.hit(f"before {method} {path}")
        attempt = 0
        while True:
            try:
                decoded = await self._once(method, path, body, query, content_type, before_send)
                break
            except ApiError as exc:
                if attempt >= self.retries or not _may_resend(method, exc):
                    raise
                delay = _retry_delay(exc, attempt)
                log.info("retrying a request", method=method, path=path, error=str(exc)[:200], retry_in=delay)
                attempt += 1
                await asyncio.sleep(delay)
                if guarded and self.write_guard is not None:
                    self.write_guard(method, path)
        if write and self.crash_points:
            crashpoints.hit(f"after {method} {path}")
        return decoded

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
        self,
        path: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = None,
        grace_seconds: int | None = None,
    ) -> Obj:
        """DELETE with preconditions (``uid``; ``resource_version``: only if unchanged since
        read, else ``Conflict``), propagation policy and grace period."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            body["preconditions"] = preconditions
        if propagation:
            body["propagationPolicy"] = propagation
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        return await self.request("DELETE", path, body=body)

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_seconds: int = WATCH_SECONDS,
        opened: Callable[[], None] | None = None,
        query: Mapping[str, str] | None = None,
        **extra: str,
    ) -> AsyncIterator[Obj]:
        """Watch events (with bookmarks) from ``resource_version`` until the server ends the
        stream, which it does after ``timeout_seconds``. A stream silent for longer than that
        (a half-open connection) fails with ``TransportError``; so does a dropped one.
        ``opened`` is called once the server has accepted the watch."""
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            **(query or {}),
            **extra,
        }
        silent = int(params["timeoutSeconds"]) + WATCH_GRACE
        started, code = time.monotonic(), "error"
        try:
            response = await self._send("GET", path, query=params, read_timeout=silent)
            code = str(response.status)
        finally:
            self._observed("WATCH", code, started)
        try:
            if response.status >= 300:
                try:
                    payload = await response.read(deadline=time.monotonic() + self.timeout)
                except HttpError as exc:
                    raise TransportError(f"reading the answer: {_describe(exc)}", "WATCH", path) from exc
                try:
                    decoded = json.loads(payload or b"{}")
                except ValueError:
                    decoded = {"message": payload[:500].decode(errors="replace")}
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                raise error_for(response.status, decoded, "WATCH", path, retry_after=retry_after)
            if opened is not None:
                opened()
            try:
                async for line in response.lines(silent):
                    if line.strip():
                        yield json.loads(line)
            except HttpError as exc:
                raise TransportError(f"watch stream: {_describe(exc)}", "WATCH", path) from exc
        finally:
            response.release()


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["ApiError", "Kube", "Obj", "resource_path"]
