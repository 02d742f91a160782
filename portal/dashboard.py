"""The dashboard: a static page (portal/static/, shipped as package data) served at ``/``.

It only serves files; everything the page shows it fetches from ``/api/v1`` in the browser
with the caller's own bearer token, so the API's authorization applies unchanged and the
page itself holds no data. The files are read once at start-up from a fixed allow-list
(no path from the request ever reaches the file system) and served with a strict Content
Security Policy: same-origin scripts, styles and requests only, no inline code, no frames.
Used by portal/api.py (``make_app``).
"""

from dataclasses import dataclass
from importlib import resources
from typing import Final

from aiohttp import web

ASSETS: Final = {
    "index.html": "text/html",
    "dashboard.css": "text/css",
    "dashboard.js": "text/javascript",
    "dom.js": "text/javascript",
    "detail.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str


def load_assets() -> dict[str, Asset]:
    """The dashboard's files from the installed package (portal/static/)."""
    folder = resources.files("portal").joinpath("static")
    return {name: Asset(folder.joinpath(name).read_bytes(), kind) for name, kind in ASSETS.items()}


class Dashboard:
    def __init__(self, assets: dict[str, Asset]) -> None:
        self.assets = assets

    def _serve(self, name: str) -> web.Response:
        asset = self.assets.get(name)
        if asset is None:
            raise web.HTTPNotFound()
        response = web.Response(body=asset.body, content_type=asset.content_type, charset="utf-8")
        response.headers.update(SECURITY_HEADERS)
        return response

    async def index(self, _: web.Request) -> web.Response:
        return self._serve("index.html")

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "index.html":
            raise web.HTTPNotFound()
        return self._serve(name)


def add_routes(app: web.Application) -> None:
    """Serve the dashboard at ``/`` and its assets under ``/static/``."""
    dashboard = Dashboard(load_assets())
    app.add_routes([web.get("/", dashboard.index), web.get("/static/{name}", dashboard.static)])
