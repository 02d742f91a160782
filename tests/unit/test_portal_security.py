"""Portal hardening (issue 12, item 8) where no API server is involved: the headers of every
response, no credentials in URLs (server and dashboard script), the refusal of an
unauthenticated or plain-HTTP portal on a network address, the fleet view sliced off the
event loop, and the bounded caches and failure limiter as pure logic. What the API server
decides (token audiences, RBAC, the limiter in front of real TokenReviews) is tested against it
in tests/integration/test_portal_security.py."""

import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from portal.api import make_app
from portal.auth import FailureLimiter, Lru, OpenAccess, TooManyFailures, network_of
from portal.index import Index
from tests.unit.test_portal_api import Fixed, _index

PORTAL = str(Path(sys.executable).parent / "signal-portal")
FRAME_ANCESTORS = "frame-ancestors 'none'"


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(make_app(Fixed(_index()), OpenAccess()))) as test_client:
        yield test_client


@pytest.mark.parametrize(
    ("path", "status", "api"),
    [
        ("/api/v1/results", 200, True),
        ("/api/v1/results?limit=0", 400, True),
        ("/api/v1/results/nope", 404, True),
        ("/api/v1/nothing-here", 404, True),
        ("/api/v1/openapi.json", 200, True),
        ("/healthz", 200, True),
        ("/metrics", 200, True),
        ("/", 200, False),
        ("/static/dashboard.js", 200, False),
        ("/static/nope.js", 404, True),
    ],
)
async def test_every_response_carries_the_security_headers(
    client: TestClient[Any, Any], path: str, status: int, api: bool
) -> None:
    answer = await client.get(path)
    assert answer.status == status
    assert answer.headers.get("X-Content-Type-Options") == "nosniff", path
    assert FRAME_ANCESTORS in answer.headers.get("Content-Security-Policy", ""), path
    assert "default-src 'none'" in answer.headers["Content-Security-Policy"], path
    assert answer.headers.get("Referrer-Policy") == "no-referrer", path
    assert answer.headers.get("Cache-Control") == ("no-store" if api else "no-cache"), path


@pytest.mark.parametrize("query", ["token=abc", "access_token=abc", "Token=abc", "limit=5&token=abc"])
@pytest.mark.parametrize("path", ["/api/v1/results", "/api/v1/fleet", "/"])
async def test_credentials_in_a_url_are_refused(client: TestClient[Any, Any], path: str, query: str) -> None:
    answer = await client.get(f"{path}?{query}")
    assert answer.status == 400
    body = await answer.json()
    assert body["error"]["reason"] == "CredentialsInURL"
    assert "Authorization: Bearer" in body["error"]["message"]
    assert answer.headers["Cache-Control"] == "no-store"


def test_the_dashboard_never_reads_or_writes_a_token_in_a_url() -> None:
    folder = resources.files("portal").joinpath("static")
    script = folder.joinpath("dashboard.js").read_text(encoding="utf-8")
    assert 'params.get("token")' not in script
    assert "replaceState" not in script
    assert "token=" not in script
    page = folder.joinpath("index.html").read_text(encoding="utf-8")
    # Submitting the token form without the script must not put the token in the address bar.
    assert '<form id="auth" class="auth" method="post"' in page


def _portal(*args: str) -> subprocess.CompletedProcess[str]:
    # No cluster is reachable from this kubeconfig: a portal that gets as far as connecting fails
    # differently (and later) than one that refuses its configuration.
    argv = [PORTAL, "--kubeconfig", "/nonexistent/kubeconfig", "--port", "0", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--auth", "none"], "--insecure-unauthenticated-on-network"),
        (["--auth", "none", "--host", "0.0.0.0"], "--insecure-unauthenticated-on-network"),
        (["--auth", "none", "--host", "::"], "--insecure-unauthenticated-on-network"),
        (["--auth", "none", "--host", "10.1.2.3"], "--insecure-unauthenticated-on-network"),
        (["--auth", "sar", "--host", "0.0.0.0"], "--tls-cert-file"),
        (["--auth", "none", "--host", "0.0.0.0", "--insecure-unauthenticated-on-network"], "--tls-cert-file"),
        (["--host", "127.0.0.1", "--tls-cert-file", "c.pem"], "--tls-key-file"),
    ],
)
def test_an_exposed_portal_is_refused_unless_explicitly_overridden(args: list[str], named: str) -> None:
    done = _portal(*args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "signal-portal: refused:" in done.stderr
    assert named in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--auth", "none", "--host", "127.0.0.1"],
        ["--auth", "none", "--host", "::1"],
        ["--auth", "none", "--host", "localhost"],
        ["--auth", "sar", "--host", "0.0.0.0", "--insecure-plaintext-behind-proxy"],
        [
            "--auth",
            "none",
            "--host",
            "0.0.0.0",
            "--insecure-unauthenticated-on-network",
            "--insecure-plaintext-behind-proxy",
        ],
    ],
)
def test_an_explicit_configuration_gets_past_the_check(args: list[str]) -> None:
    done = _portal(*args)
    assert "refused" not in done.stderr
    assert done.returncode not in (0, 2)  # it went on, and then found no cluster
    assert "kubeconfig" in done.stderr.lower() or "config" in done.stderr.lower()


class _Recording(Index):
    """An index that records which thread computes its fleet view."""

    threads: list[int]

    def fleet(self, sight: Any, rows: int) -> bytes:
        self.threads.append(threading.get_ident())
        return super().fleet(sight, rows)


async def test_the_fleet_view_is_computed_off_the_event_loop() -> None:
    plain = _index()
    index = _Recording(plain.entries, checks=plain.checks, node_uids=plain.node_uids)
    index.threads = []
    async with TestClient(TestServer(make_app(Fixed(index), OpenAccess()))) as test_client:
        assert (await test_client.get("/api/v1/fleet")).status == 200
    assert index.threads
    assert threading.get_ident() not in index.threads, "the fleet view was computed on the event loop"


def test_the_lru_is_bounded_and_keeps_what_is_used() -> None:
    now = [0.0]
    cache: Lru[str, int] = Lru(3, clock=lambda: now[0])
    cache.put("hot", 1, ttl=10)
    for i in range(100):
        cache.put(f"cold-{i}", i, ttl=10)
        assert cache.get("hot") == (True, 1), i
        assert len(cache) <= 3
    assert cache.get("cold-0") == (False, None)
    now[0] = 11.0
    assert cache.get("hot") == (False, None), "expired"


def test_failed_authentications_are_limited_per_address() -> None:
    now = [0.0]
    limiter = FailureLimiter(burst=3, per_second=0.5, max_addresses=2, clock=lambda: now[0])
    for _ in range(3):
        limiter.check("10.0.0.1")
        limiter.failed("10.0.0.1")
    with pytest.raises(TooManyFailures) as refused:
        limiter.check("10.0.0.1")
    assert refused.value.retry_after == pytest.approx(2.0)
    limiter.check("10.0.0.2")  # another address is not affected
    now[0] = 2.0
    limiter.check("10.0.0.1")  # one failure refilled
    limiter.failed("10.0.0.1")
    with pytest.raises(TooManyFailures):
        limiter.check("10.0.0.1")


def _failures_until_refused(limiter: FailureLimiter, remotes: Iterable[str]) -> int:
    """How many failures ``limiter`` takes from ``remotes`` (a fresh one each time) before it
    refuses; -1 when it never does."""
    for spent, remote in enumerate(remotes):
        try:
            limiter.check(remote)
        except TooManyFailures:
            return spent
        limiter.failed(remote)
    return -1


def test_rotating_addresses_does_not_reset_the_failure_budget() -> None:
    """Issue 42, Low: one bucket per address let an attacker with many addresses (an IPv6 /64
    holds 2**64) send unlimited garbage tokens to TokenReview; and with more addresses than the
    LRU holds, its own buckets were evicted and refilled. Networks and all callers together have
    budgets too."""
    now = [0.0]
    limiter = FailureLimiter(burst=2, per_second=0.5, max_addresses=4, clock=lambda: now[0])
    in_one_network = (f"2001:db8::{host:x}" for host in range(1000))
    assert _failures_until_refused(limiter, in_one_network) == 2 * 4, "a /64 has 4 times an address's budget"
    networks = (f"10.{n // 256}.{n % 256}.1" for n in range(1000))
    assert _failures_until_refused(limiter, networks) == 2 * 20 - 2 * 4, "all callers have 20 times an address's"
    now[0] = 2.0  # refilled: one failure for everyone
    limiter.check("192.0.2.1")


@pytest.mark.parametrize(
    ("remote", "network"),
    [
        ("10.1.2.3", "10.1.2.0/24"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("::ffff:10.1.2.3", "10.1.2.0/24"),
        ("", ""),
        ("unix-socket", "unix-socket"),
    ],
)
def test_network_of(remote: str, network: str) -> None:
    assert network_of(remote) == network
