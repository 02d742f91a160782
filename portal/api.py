"""The portal's HTTP API (aiohttp): /api/v1 (checks, the fleet view, results, one result,
one Node), /api/v1/openapi.json, /healthz, /readyz, /metrics; and the dashboard
(portal/dashboard.py) at ``/``. Read-only: handlers only read the current index snapshot
(portal/index.py) and ask the authorizer which workspaces the caller sees.

A result in a workspace the caller may not see answers exactly like one that does not exist
(404, the same message), and listings never count or hint at invisible results.
"""

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kubeio.errors import ApiError
from portal import dashboard, metrics
from portal.auth import ALL, Authorizer, Unauthenticated
from portal.index import Filters, Index, Visible, render_page
from portal.openapi import DEFAULT_FLEET_ROWS, DEFAULT_LIMIT, MAX_FLEET_ROWS, MAX_LIMIT, document
from portal.pagination import TokenError, decode_token, encode_token
from shared.envelope import ENVELOPE_SCHEMA, State, parse_id

log = structlog.get_logger("portal.api")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_PARAM = 253


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
        response = await handler(request)
        code = response.status
        return response
    except ApiProblem as problem:
        code = problem.code
        return _error(problem.code, problem.reason, problem.message)
    except Unauthenticated as exc:
        code = 401
        response = _error(401, "Unauthorized", str(exc))
        response.headers["WWW-Authenticate"] = 'Bearer realm="signal-portal"'
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


class Api:
    def __init__(self, source: IndexSource, authorizer: Authorizer) -> None:
        self.source = source
        self.authorizer = authorizer
        self._openapi = json.dumps(document()).encode()

    async def _visible(self, request: web.Request, index: Index) -> Visible:
        caller = await self.authorizer.caller(request.headers.get("Authorization"))
        allowed = await self.authorizer.visible(caller, index.workspaces)
        if ALL in allowed:
            return lambda _workspace: True
        return allowed.__contains__

    async def checks(self, request: web.Request) -> web.Response:
        index = self.source.index
        visible = await self._visible(request, index)
        return web.json_response({"apiVersion": "v1", "items": index.visible_checks(visible)})

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
        visible = await self._visible(request, index)
        entries, more = index.page(filters, visible, after=after, limit=limit)
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
        visible = await self._visible(request, index)
        body = b'{"apiVersion":"v1","schema":"' + ENVELOPE_SCHEMA.encode() + b'","items":' + index.fleet(visible, rows)
        return web.Response(body=body + b"}", content_type="application/json")

    async def result(self, request: web.Request) -> web.Response:
        key = parse_id(request.match_info["id"])
        index = self.source.index
        visible = await self._visible(request, index)
        entry = index.get(key) if key else None
        if entry is None or not visible(entry.key[0]):
            raise NOT_FOUND
        full: dict[str, Any] = json.loads(entry.summary)
        full["detailsSchema"] = entry.details_schema
        full["details"] = entry.details
        return web.json_response(full)

    async def node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        index = self.source.index
        visible = await self._visible(request, index)
        summary = index.node_summary(name, visible) if len(name) <= MAX_PARAM else None
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
        return web.Response(status=503, text="caches not synced")

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
