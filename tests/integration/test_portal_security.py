"""Portal hardening (issue 12, item 8) against the real API server: the real signal-portal
(a subprocess, as its own ServiceAccount with deploy/base/portal-rbac.yaml) and real tokens
from the TokenRequest API.

* a token minted for the API server (or any audience but the portal's) is refused, and the
  portal's own tokens are refused by the API server;
* ``/api/v1/nodes/{name}`` and ``/api/v1/checks`` answer only what the caller's RBAC lets them
  see (Node health to who may list Nodes, registered checks to who may list profiles);
* ``/metrics`` reveals no result counts to an unauthenticated scraper;
* failed authentications are rate-limited per address (429, no TokenReview), while a token
  already known to be valid keeps working; the TokenReview cache is a bounded LRU;
* TLS from a serving certificate given on the command line.

Headers, URL credentials, exposure refusals and the fleet view off the event loop need no API
server: tests/unit/test_portal_security.py."""

import asyncio
import contextlib
import re
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient
from portal import metrics
from portal.auth import ReviewAccess, Unauthenticated
from tests.controller_support import eventually
from tests.integration.test_portal import (
    Lab,
    Portal,
    _fresh,
    _id,
    fleet_reader,
    grant_runs,
    mint,
    portal_identity,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")
AUDIENCE: str | None = "signal-portal"
"""The audience of the callers' tokens (None: the API server's own)."""
Obj = dict[str, Any]


async def caller(admin: KubeClient, namespace: str, name: str) -> str:
    return await mint(admin, namespace, name, [AUDIENCE] if AUDIENCE else None)


@pytest.fixture
async def portals(cluster: LocalCluster) -> AsyncIterator[list[Portal]]:
    started: list[Portal] = []
    yield started
    for portal in started:
        portal.stop()


async def _start(portals: list[Portal], cluster: LocalCluster, kubeconfig: Path, *args: str) -> Portal:
    portal = Portal(kubeconfig, list(args), cluster.workdir())
    portals.append(portal)
    await portal.start()
    return portal


async def _one_result(lab: Lab, namespace: str, profile: str, prefix: str) -> tuple[Obj, str]:
    await lab.profile(profile)
    nodes = await lab.nodes(prefix, 1)
    run = await lab.finish(r := await lab.run(namespace, profile, nodes), _fresh(r))
    return run, _id(namespace, nodes[0]["metadata"]["name"], profile, "check-0", run)


async def _until_served(portal: Portal, token: str, result_id: str) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        answer = await portal.get(f"/api/v1/results/{result_id}", token)
        if answer.status_code == 200:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{result_id} never served: {answer.text}"
        await asyncio.sleep(0.2)


async def test_tokens_for_other_audiences_are_refused(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    await grant_runs(admin, namespace, "reader")
    _, result_id = await _one_result(lab, namespace, f"{namespace}-aud", f"{namespace}-aud")
    portal = await _start(portals, cluster, kubeconfig, "--namespace", namespace, "--auth", "sar")
    # The attack: a token meant for the API server (what every Pod mounts, what kubectl holds)
    # replayed against the portal.
    for_apiserver = await mint(admin, namespace, "reader", None)
    elsewhere = await mint(admin, namespace, "reader", ["some-other-service"])
    static_admin = identities.admin(cluster.plane).token
    for label, token in (("API server", for_apiserver), ("other", elsewhere), ("static admin", static_admin)):
        answer = await portal.get(f"/api/v1/results/{result_id}", token)
        assert answer.status_code == 401, f"a token for the {label} audience was accepted: {answer.status_code}"
        assert "--audience signal-portal" in answer.json()["error"]["message"]
    mine = await mint(admin, namespace, "reader", ["signal-portal"])
    await _until_served(portal, mine, result_id)
    # ... and a token minted for the portal is worthless against the API server.
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cluster.plane.ca_file))) as client:
        direct = await client.get(f"{cluster.plane.server}/api", headers={"Authorization": f"Bearer {mine}"})
    assert direct.status_code == 401


async def test_nodes_and_checks_answer_only_what_the_caller_may_see(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    for account in ("reader", "operator"):
        await grant_runs(admin, namespace, account)
    seen_profile, idle_profile = f"{namespace}-seen", f"{namespace}-idle"
    run, result_id = await _one_result(lab, namespace, seen_profile, f"{namespace}-seen")
    seen_node = run["spec"]["participants"][0]["nodeName"]
    await lab.profile(idle_profile)
    (other,) = await lab.nodes(f"{namespace}-other", 1)
    other_node = other["metadata"]["name"]
    portal = await _start(portals, cluster, kubeconfig, "--namespace", namespace, "--auth", "sar")
    reader = await caller(admin, namespace, "reader")
    await _until_served(portal, reader, result_id)

    # reader may list Runs in this namespace, nothing else.
    hidden = await portal.get(f"/api/v1/nodes/{other_node}", reader)
    made_up = await portal.get(f"/api/v1/nodes/{namespace}-no-such-node", reader)
    assert hidden.status_code == 404, f"a Node the caller may not see was described: {hidden.text}"
    assert hidden.json() == made_up.json()
    own = (await portal.get(f"/api/v1/nodes/{seen_node}", reader)).json()
    assert own["uid"] is None
    assert own["health"] is None
    assert [row["check"] for row in own["checks"]] == [f"{seen_profile}/check-0"]
    checks = {c["id"] for c in (await portal.get("/api/v1/checks", reader)).json()["items"]}
    assert f"{seen_profile}/check-0" in checks
    assert f"{idle_profile}/check-0" not in checks, "a profile the caller may not list was named"
    fleet = (await portal.get("/api/v1/fleet", reader)).json()
    assert fleet["nodes"] == {}
    assert idle_profile not in str(fleet["items"])

    async with fleet_reader(admin, namespace, "operator"):
        operator = await caller(admin, namespace, "operator")
        described = (await portal.get(f"/api/v1/nodes/{other_node}", operator)).json()
        assert described["uid"] == other["metadata"]["uid"]
        assert described["health"]["ready"]["status"] == "True"
        assert described["health"]["allocatable"]["gpu"] == "8"
        checks = {c["id"] for c in (await portal.get("/api/v1/checks", operator)).json()["items"]}
        assert {f"{seen_profile}/check-0", f"{idle_profile}/check-0"} <= checks


async def test_metrics_reveal_no_result_counts(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    run, result_id = await _one_result(lab, namespace, f"{namespace}-met", f"{namespace}-met")
    portal = await _start(portals, cluster, kubeconfig, "--namespace", namespace, "--auth", "sar")
    await grant_runs(admin, namespace, "reader")
    await _until_served(portal, await caller(admin, namespace, "reader"), result_id)
    text = (await portal.get("/metrics")).text
    assert "signal_portal_requests_total" in text
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    counted = [line for line in samples if re.search(r'state="|workspace="|namespace="|node="', line)]
    assert counted == [], f"/metrics reveals result counts without authorization: {counted}"
    assert namespace not in text
    assert run["spec"]["participants"][0]["nodeName"] not in text


def _reviews(text: str) -> float:
    found = re.search(r'^signal_portal_auth_reviews_total\{kind="TokenReview"\} ([0-9.e+]+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_failed_authentications_are_rate_limited(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    await grant_runs(admin, namespace, "reader")
    _, result_id = await _one_result(lab, namespace, f"{namespace}-lim", f"{namespace}-lim")
    portal = await _start(portals, cluster, kubeconfig, "--namespace", namespace, "--auth", "sar")
    good = await caller(admin, namespace, "reader")
    await _until_served(portal, good, result_id)
    before = _reviews((await portal.get("/metrics")).text)
    began = asyncio.get_running_loop().time()
    answers = [await portal.get("/api/v1/checks", f"garbage-{i}") for i in range(60)]
    codes = [answer.status_code for answer in answers]
    elapsed = asyncio.get_running_loop().time() - began
    after = _reviews((await portal.get("/metrics")).text)
    assert 429 in codes, f"60 bad tokens in a row were never limited: {sorted(set(codes))}"
    first = codes.index(429)
    assert set(codes[:first]) == {401}
    assert set(codes) == {401, 429}
    # A burst of 20, then one more per second: every 401 cost one TokenReview, a 429 none.
    assert after - before == codes.count(401), "a refused token cost the API server a TokenReview"
    assert first <= 20 + elapsed + 1
    assert codes.count(401) <= 20 + elapsed + 1, (codes, elapsed)
    limited = answers[first]
    assert int(limited.headers["Retry-After"]) >= 1
    assert limited.json()["error"]["reason"] == "TooManyRequests"
    # A token already known to be valid is not locked out by someone else's garbage.
    assert (await portal.get(f"/api/v1/results/{result_id}", good)).status_code == 200


async def test_the_token_review_cache_is_a_bounded_lru(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    kube = await Kube.connect(kubeconfig=str(kubeconfig), field_manager="signal-portal")
    try:
        access = ReviewAccess(kube, max_entries=3)
        counter = metrics.AUTH_REVIEWS.labels("TokenReview")
        began = counter._value.get()
        others = [f"not-a-token-{i}" for i in range(6)]
        for other in others:
            for token in ("hot-but-not-a-token", other):
                with pytest.raises(Unauthenticated):
                    await access.caller(f"Bearer {token}")
        reviews = counter._value.get() - began
        assert reviews == 1 + len(others), f"{reviews} TokenReviews: the token in use was evicted and reviewed again"
        assert len(access.tokens) <= 3
    finally:
        await kube.close()


def _certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "tls.crt", folder / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=signal-portal",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_tls_from_a_serving_certificate(
    cluster: LocalCluster, admin: KubeClient, namespace: str, portals: list[Portal], tmp_path: Path
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    cert, key = _certificate(tmp_path)
    portal = Portal(
        kubeconfig,
        [
            "--namespace",
            namespace,
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-reload-seconds",
            "1",
        ],
        cluster.workdir(),
    )
    portals.append(portal)
    tls = f"https://127.0.0.1:{portal.port}"
    command = [str(Path(sys.executable).parent / "signal-portal"), "--kubeconfig", str(kubeconfig)]
    command += ["--port", str(portal.port), "--host", "127.0.0.1", "--resync", "1", "--log-format", "console"]
    with (portal.workdir / f"portal-{portal.port}.log").open("wb") as log:
        portal.process = subprocess.Popen([*command, *portal.args], stdout=log, stderr=subprocess.STDOUT)

    async def ready() -> bool:
        """The portal answers /readyz over TLS with a certificate ``cert`` (as it is now) verifies."""
        with contextlib.suppress(httpx.HTTPError):
            async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cert))) as client:
                return (await client.get(f"{tls}/readyz")).status_code == 200
        assert portal.process is not None
        assert portal.process.poll() is None, portal.logs()
        return False

    assert portal.process is not None
    deadline = asyncio.get_running_loop().time() + 60
    while not await ready():
        assert asyncio.get_running_loop().time() < deadline, portal.logs()
        await asyncio.sleep(0.2)
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cert))) as client:
        answer = await client.get(f"{tls}/api/v1/checks")
    assert answer.status_code == 401  # --auth sar: TLS carries the token, it does not replace it
    assert answer.headers["Strict-Transport-Security"].startswith("max-age=")
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.HTTPError):
            await client.get(f"http://127.0.0.1:{portal.port}/readyz")
    # A renewed certificate (a new key pair, swapped in as a mounted Secret is) is served to new
    # connections without a restart (issue 42, Low: it was loaded once, at start).
    renewed = tmp_path / "renewed"
    renewed.mkdir()
    new_cert, new_key = _certificate(renewed)
    new_key.replace(key)
    new_cert.replace(cert)

    await eventually(ready, timeout=30, what=f"the renewed certificate\n{portal.logs()}")
