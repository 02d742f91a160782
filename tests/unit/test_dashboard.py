"""The dashboard's serving (portal/dashboard.py) without a cluster: the page and its assets come
from the package, with a strict Content Security Policy; nothing else is reachable under
/static/; the files reference nothing outside the portal (the machines are offline); and the
wheel's package data includes them. What the page shows is tested in a real browser by
tests/integration/test_dashboard_browser.py."""

import re
import tomllib
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from portal.api import make_app
from portal.auth import OpenAccess
from portal.dashboard import ASSETS
from portal.index import Index

REPO = Path(__file__).resolve().parents[2]


class _Source:
    index = Index([])

    def ready(self) -> bool:
        return True


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(make_app(_Source(), OpenAccess()))) as test_client:
        yield test_client


async def test_page_and_assets_are_served_with_a_strict_policy(client: TestClient[Any, Any]) -> None:
    page = await client.get("/")
    assert page.status == 200
    assert page.content_type == "text/html"
    html = await page.text()
    assert '<script type="module" src="static/dashboard.js">' in html
    assert 'href="static/dashboard.css"' in html
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    for name, kind in ASSETS.items():
        if name == "index.html":
            continue
        asset = await client.get(f"/static/{name}")
        assert asset.status == 200, name
        assert asset.content_type == kind
        assert asset.headers["Content-Security-Policy"] == policy


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/static/index.html", id="the page only at /"),
        pytest.param("/static/nope.js", id="unknown asset"),
        pytest.param("/static/..%2Fapi.py", id="encoded traversal"),
        pytest.param("/static/../api.py", id="plain traversal"),
        pytest.param("/static/", id="no listing"),
    ],
)
async def test_nothing_else_is_served(client: TestClient[Any, Any], path: str) -> None:
    answer = await client.get(path)
    assert answer.status == 404
    assert "import" not in await answer.text()


async def test_the_api_is_unchanged_beside_the_page(client: TestClient[Any, Any]) -> None:
    assert (await client.get("/api/v1/checks")).status == 200
    assert (await client.get("/healthz")).status == 200


def test_assets_load_nothing_from_elsewhere() -> None:
    folder = resources.files("portal").joinpath("static")
    for name in ASSETS:
        # An XML namespace name is an identifier, not something a browser loads.
        text = re.sub(r'xmlns="[^"]*"', "", folder.joinpath(name).read_text(encoding="utf-8"))
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.IGNORECASE), name
        assert "@import" not in text
        assert "@font-face" not in text
    for name in (n for n in ASSETS if n.endswith(".js")):
        script = folder.joinpath(name).read_text(encoding="utf-8")
        assert "innerHTML" not in script, name
        assert "eval(" not in script, name


def test_the_wheel_ships_the_assets() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["portal"]
    shipped = {p.name for pattern in patterns for p in (REPO / "portal").glob(pattern)}
    assert set(ASSETS) <= shipped


def test_browser_screenshots_are_not_tracked() -> None:
    ignored = (REPO / ".gitignore").read_text(encoding="utf-8").split()
    assert "test-artifacts/" in ignored
