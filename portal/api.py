"""The portal's HTTP API (aiohttp): /api/v1 (checks, the fleet view, results, one result,
one Node), /api/v1/openapi.json, /healthz, /readyz, /metrics; and the dashboard
(portal/dashboard.py) at ``/``. Read-only: handlers only read the current index snapshot
(portal/index.py) and ask the authorizer which workspaces the caller sees.

A result in a workspace the caller may not see answers exactly like one that does not exist
(404, the same message), and listings never count or hint at invisible results. Node health
and registered checks without a visible result are shown only to callers who may list Nodes
and profiles (portal/auth.py decides the caller's ``Sight``).

Every response (API, errors, dashboard, 404s) carries the dashboard's Content Security Policy
(``frame-ancestors 'none'``), ``X-Content-Type-Options: nosniff`` and ``no-referrer``; API
answers ``Cache-Control: no-store``; HTTPS answers HSTS. Credentials are never accepted in a
URL: a ``token`` or ``access_token`` query parameter is refused (400) on every path.
"""

import asyncio
import gzip
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kubeio.errors import ApiError
from portal import dashboard, metrics
from portal.auth import Authorizer, TooManyFailures, Unauthenticated
from portal.encoding import accepts_gzip
from portal.index import Filters, Index, render_page
from portal.openapi import DEFAULT_FLEET_ROWS, DEFAULT_LIMIT, MAX_FLEET_ROWS, MAX_LIMIT, document
from portal.pagination import TokenError, decode_token, encode_token
from portal.sight import Sight
from shared.envelope import ENVELOPE_SCHEMA, State, parse_id

log = structlog.get_logger("portal.api")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_PARAM = 253
URL_CREDENTIALS = frozenset({"token", "access_token", "bearer", "authorization"})


class IndexSource(Protocol):
    index: Index

    def ready(self) -> bool: ...


class ApiProblem(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


NOT_FOUND = ApiProblem(404, "NotFound", "no such result")


def _error(code: int, reason: str, message: str) -> web.Response:
    body = {"error": {"code": code, "reason": reason, "message": message}}
    return web.json_response(body, status=code)


@web.middleware
async def _observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
    began = time.perf_counter()
    code = 500
    try:
        if URL_CREDENTIALS & {name.lower() for name in request.query}:
            raise ApiProblem(
                400,
                "CredentialsInURL",
                "credentials are never accepted in a URL (they end up in logs and browser history); "
                "send them as an Authorization: Bearer header instead, and revoke the token you put in the URL",
            )
        response = await handler(request)
        code = response.status
        _compress(request, response)
        return response
    except ApiProblem as problem:
        code = problem.code
        return _error(problem.code, problem.reason, problem.message)
    except Unauthenticated as exc:
        code = 401
        response = _error(401, "Unauthorized", str(exc))
        response.headers["WWW-Authenticate"] = 'Bearer realm="signal-portal"'
        return response
    except TooManyFailures as exc:
        code = 429
        metrics.AUTH_LIMITED.inc()
        response = _error(429, "TooManyRequests", str(exc))
        response.headers["Retry-After"] = str(max(1, round(exc.retry_after)))
        return response
    except ApiError as exc:
        code = 503
        log.warning("authorization unavailable", status=exc.status)
        return _error(503, "ServiceUnavailable", "authorization is unavailable, try again")
    except web.HTTPException as exc:
        code = exc.status
        return _error(exc.status, exc.reason, exc.reason)
    finally:
        metrics.REQUESTS.labels(route, str(code)).inc()
        metrics.LATENCY.labels(route).observe(time.perf_counter() - began)


MAX_GZIPPED = 64
"""Compressed fleet answers kept (one per cached slice; dropped all at once when full)."""
COMPRESS_ABOVE = 1024
"""Answers larger than this are sent gzip-compressed to a client that accepts it (the fleet
view of 200 rows x 10 checks: about 2 MiB of JSON, a few dozen KiB on the wire). The answers
hold no secret a caller could probe by compression (tokens travel only in the request)."""
GZIP_LEVEL = 6


def _accepts_gzip(request: web.Request) -> bool:
    return accepts_gzip(request.headers.get("Accept-Encoding"))


def _compress(request: web.Request, response: web.StreamResponse) -> None:
    """gzip an answer aiohttp has not sent yet (large bodies are compressed off the event loop by
    aiohttp); the fleet view arrives compressed already (cached per snapshot and sight)."""
    response.headers["Vary"] = "Accept-Encoding"
    if (
        isinstance(response, web.Response)
        and "Content-Encoding" not in response.headers
        and isinstance(response.body, bytes)
        and len(response.body) > COMPRESS_ABOVE
        and _accepts_gzip(request)
    ):
        response.enable_compression(web.ContentCoding.gzip)


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every response, whatever produced it (handlers, errors, aiohttp's own 404s)."""
    for name, value in dashboard.SECURITY_HEADERS.items():
        if name != "Cache-Control":
            response.headers[name] = value
    response.headers.setdefault("Cache-Control", "no-store")  # the dashboard's assets say no-cache
    if request.secure:
        response.headers["Strict-Transport-Security"] = "max-age=31536000"


class Api:
    def __init__(self, source: IndexSource, authorizer: Authorizer) -> None:
        self.source = source
        self.authorizer = authorizer
        self._openapi = json.dumps(document()).encode()
        self._gzipped: dict[int, tuple[bytes, bytes]] = {}
        """id of a cached fleet slice -> (that slice, its whole answer gzipped)."""

    async def _sight(self, request: web.Request, index: Index) -> Sight:
        caller = await self.authorizer.caller(request.headers.get("Authorization"), request.remote or "")
        return await self.authorizer.sight(caller, index.workspaces)

    async def checks(self, request: web.Request) -> web.Response:
        index = self.source.index
        sight = await self._sight(request, index)
        return web.json_response({"apiVersion": "v1", "items": index.visible_checks(sight)})

    async def results(self, request: web.Request) -> web.Response:
        query = request.query
        filters = Filters(
            node=_param(query, "node"),
            check=_param(query, "check", 128),
            state=_state(query.get("state")),
            workspace=_param(query, "workspace"),
        )
        limit = _limit(query.get("limit"))
        after = None
        if "continue" in query:
            try:
                after = decode_token(query["continue"])
            except TokenError as exc:
                raise ApiProblem(400, "BadRequest", str(exc)) from exc
        index = self.source.index
        sight = await self._sight(request, index)
        entries, more = index.page(filters, sight.workspace, after=after, limit=limit)
        token = encode_token(entries[-1].key) if more and entries else None
        body = (
            b'{"apiVersion":"v1","schema":"'
            + ENVELOPE_SCHEMA.encode()
            + b'","items":'
            + render_page(entries)
            + b',"continue":'
            + json.dumps(token).encode()
            + b"}"
        )
        return web.Response(body=body, content_type="application/json")

    async def fleet(self, request: web.Request) -> web.Response:
        rows = _bounded(request.query.get("rows"), "rows", 0, MAX_FLEET_ROWS, DEFAULT_FLEET_ROWS)
        index = self.source.index
        sight = await self._sight(request, index)
        gzipped = _accepts_gzip(request)
        body = self._cached_fleet_body(index, sight, rows, gzipped)
        if body is None:  # slicing and compressing a large fleet is CPU-bound: off the event loop
            body = await asyncio.to_thread(self._fleet_body, index, sight, rows, gzipped)
        response = web.Response(body=body, content_type="application/json")
        if gzipped:
            response.headers["Content-Encoding"] = "gzip"
        return response

    def _cached_fleet_body(self, index: Index, sight: Sight, rows: int, gzipped: bool) -> bytes | None:
        """The answer when this snapshot already made it for this sight (and, for gzip, compressed
        it): no thread hop for what is a dictionary look-up. None: make it."""
        members = index.cached_fleet(sight, rows)
        if members is None:
            return None
        if not gzipped:
            return self._fleet_body(index, sight, rows, gzipped)
        kept = self._gzipped.get(id(members))
        return kept[1] if kept is not None and kept[0] is members else None

    def _fleet_body(self, index: Index, sight: Sight, rows: int, gzipped: bool) -> bytes:
        """The fleet answer, gzipped once per cached slice (the index caches a slice per sight
        and snapshot; the compressed copy is kept beside it while that slice is the index's)."""
        members = index.fleet(sight, rows)
        if gzipped:
            kept = self._gzipped.get(id(members))
            if kept is not None and kept[0] is members:
                return kept[1]
        body = b'{"apiVersion":"v1","schema":"' + ENVELOPE_SCHEMA.encode() + b'",' + members + b"}"
        if not gzipped:
            return body
        packed = gzip.compress(body, GZIP_LEVEL, mtime=0)
        if len(self._gzipped) >= MAX_GZIPPED:
            self._gzipped.clear()
        self._gzipped[id(members)] = (members, packed)
        return packed

    async def result(self, request: web.Request) -> web.Response:
        key = parse_id(request.match_info["id"])
        index = self.source.index
        sight = await self._sight(request, index)
        entry = index.get(key) if key else None
        if entry is None or not sight.workspace(entry.key[0]):
            raise NOT_FOUND
        full: dict[str, Any] = json.loads(entry.summary)
        full["detailsSchema"] = entry.details_schema
        full["details"] = entry.details
        return web.json_response(full)

    async def node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        index = self.source.index
        sight = await self._sight(request, index)
        summary = index.node_summary(name, sight) if len(name) <= MAX_PARAM else None
        if summary is None:
            raise ApiProblem(404, "NotFound", "no such Node")
        return web.json_response(summary)

    async def openapi(self, _: web.Request) -> web.Response:
        return web.Response(body=self._openapi, content_type="application/json")

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(self, _: web.Request) -> web.Response:
        if self.source.ready():
            return web.Response(text="ok")
        return web.Response(
            status=503,
            text="not ready: the caches are not listed yet, or the results snapshot has not been refreshed for "
            "longer than its bound (see 'refresh failed' in the portal's log); ready again once a refresh succeeds",
        )

    async def metrics(self, _: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(metrics.REGISTRY))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response


def _param(query: Any, name: str, limit: int = MAX_PARAM) -> str | None:
    value = query.get(name)
    if value is None:
        return None
    if not value or len(value) > limit:
        raise ApiProblem(400, "BadRequest", f"{name} must be 1..{limit} characters")
    return str(value)


def _state(value: str | None) -> State | None:
    if value is None:
        return None
    try:
        return State(value)
    except ValueError as exc:
        raise ApiProblem(400, "BadRequest", f"state must be one of {', '.join(s.value for s in State)}") from exc


def _limit(value: str | None) -> int:
    return _bounded(value, "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)


def _bounded(value: str | None, name: str, low: int, high: int, default: int) -> int:
    if value is None:
        return default
    if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
        raise ApiProblem(400, "BadRequest", f"{name} must be an integer {low}..{high}")
    return int(value)


def make_app(source: IndexSource, authorizer: Authorizer) -> web.Application:
    api = Api(source, authorizer)
    app = web.Application(middlewares=[_observe])
    app.on_response_prepare.append(_security_headers)
    app.add_routes(
        [
            web.get("/api/v1/checks", api.checks),
            web.get("/api/v1/fleet", api.fleet),
            web.get("/api/v1/results", api.results),
            web.get("/api/v1/results/{id}", api.result),
            web.get("/api/v1/nodes/{name}", api.node),
            web.get("/api/v1/openapi.json", api.openapi),
            web.get("/healthz", api.healthz),
            web.get("/readyz", api.readyz),
            web.get("/metrics", api.metrics),
        ]
    )
    dashboard.add_routes(app)
    return app
