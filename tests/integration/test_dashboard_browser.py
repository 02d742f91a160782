"""The dashboard in a real browser: Debian's Chromium (/usr/bin/chromium, installed by
hack/install-system-deps.sh) driven by Playwright, against the real portal (signal-portal as a
subprocess, its own ServiceAccount) reading the real API server, with Runs in each of the five
states decided by the controller's own acceptance code (the approach and helpers of
tests/integration/test_portal.py).

It checks what an operator sees: one card per check that is registered or has a result (and
none for a check that is neither), every state written out as text on a badge whose colours
meet WCAG AA contrast, the technical evidence only in a dialog opened by clicking a result,
live refresh without reloading, each Node's health and capacity beside its result (Ready,
GPU and RDMA allocatable, held by Signal, cordoned by an operator), bearer tokens from the
field only (a ``?token=`` URL is refused and never stored), and ``--auth none``. Screenshots go to test-artifacts/dashboard/ (git-ignored), never committed.
"""

import contextlib
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, async_playwright, expect

from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import KubeClient
from tests import evidence_builders as eb
from tests.controller_support import REPO, eventually
from tests.integration.test_portal import (
    AUDIENCE,
    Lab,
    Portal,
    _fresh,
    _hold,
    _now_minus,
    _tampered,
    fleet_reader,
    grant_runs,
    mint,
    portal_identity,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")
CHROMIUM = Path(os.environ.get("SIGNAL_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
STATES = ("Passed", "Failed", "Running", "Stale", "Unknown")
Obj = dict[str, Any]

# WCAG 2.x contrast of a badge's text against its background (both opaque rgb()).
CONTRAST = """(el) => {
  const style = getComputedStyle(el);
  const channels = (c) => c.match(/[0-9.]+/g).slice(0, 3).map(Number);
  const lum = (c) => {
    const [r, g, b] = channels(c).map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [a, b] = [lum(style.color), lum(style.backgroundColor)].sort((x, y) => y - x);
  return { ratio: (a + 0.05) / (b + 0.05), size: parseFloat(style.fontSize), text: el.innerText.trim() };
}"""


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run hack/install-system-deps.sh (installs Debian's chromium)")
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=args)
        yield launched
        await launched.close()


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Path:
    folder = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


async def _page(browser: Browser, errors: list[str], url: str) -> Page:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await context.new_page()

    def console(message: ConsoleMessage) -> None:
        if message.type == "error" and "status of 401" not in message.text:
            errors.append(f"{message.text} ({message.location.get('url')})")

    page.on("console", console)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(url)
    return page


def _with_measurements(documents: list[Obj]) -> list[Obj]:
    for document in documents:
        for participant in document["results"]["participants"]:
            participant["measurements"] = {"busbw_gbps": 187.5, "transport": "NET/IB"}
    return [eb.seal(d) for d in documents]


async def _wait_for(portal: Portal, token: str | None, expected: dict[str, str]) -> None:
    """Until the API itself serves ``expected`` ({Node: state}), before the browser looks."""

    async def served() -> bool:
        answer = await portal.get("/api/v1/results", token, limit="1000")
        states = {item["target"]["name"]: item["state"] for item in answer.json().get("items", [])}
        return all(states.get(node) == state for node, state in expected.items())

    await eventually(served, timeout=60, what=f"portal serves {expected}")


async def _assert_readable_badges(page: Page, card: Any) -> None:
    badges = card.locator(".counts .state, tbody .state")
    assert await badges.count() >= len(STATES)
    for i in range(await badges.count()):
        facts = await badges.nth(i).evaluate(CONTRAST)
        assert facts["text"].split()[-1] in STATES, facts
        assert facts["ratio"] >= 4.5, facts
        assert facts["size"] >= 12, facts


async def test_fleet_view_states_and_detail_on_demand(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, browser: Browser, artifacts: Path
) -> None:
    unwatched = f"{namespace}-x"
    await cluster.create_namespace(unwatched)
    portals: list[Portal] = []
    portals_stack: list[contextlib.AsyncExitStack] = []
    try:
        kubeconfig = await portal_identity(cluster, admin, namespace, [])
        main, short, idle = f"{namespace}-fleet", f"{namespace}-fresh", f"{namespace}-idle"
        ghost = f"{namespace}-ghost"
        await lab.profile(main)
        await lab.profile(short, interval="30m")
        await lab.profile(idle)
        n = {k: await lab.nodes(f"{namespace}-{k}", 2 if k in {"pass", "fail"} else 1) for k in ("run", "pass", "tamp")}
        # Fleet context: a failed Node an operator cordoned, a stale one that is not Ready.
        n["fail"] = await cluster.add_nodes(
            [SimNode(f"{namespace}-fail-0", unschedulable=True), SimNode(f"{namespace}-fail-1")]
        )
        n["stale"] = await cluster.add_nodes([SimNode(f"{namespace}-stale-0", ready=False, gpus=4, rdma=2)])
        node = {k: [x["metadata"]["name"] for x in v] for k, v in n.items()}
        running = await lab.run(namespace, main, n["run"])
        await _hold(admin, node["run"][0], running, 0)
        passed = await lab.finish(r := await lab.run(namespace, main, n["pass"]), _with_measurements(_fresh(r)))
        await lab.finish(r := await lab.run(namespace, main, n["fail"]), _fresh(r, verdicts={0: "Fail"}))
        await lab.finish(r := await lab.run(namespace, short, n["stale"]), _fresh(r, finished=_now_minus(hours=1)))
        tampered = await lab.finish(r := await lab.run(namespace, main, n["tamp"]), _fresh(r))
        await lab.replace_evidence(tampered, _tampered)
        # A check that is neither registered nor has a result the portal sees: its Run is in a
        # namespace the portal does not read, and no profile registers it.
        await lab.run(unwatched, ghost, await lab.nodes(f"{namespace}-ghost", 1))

        portal = Portal(kubeconfig, ["--namespace", namespace, "--auth", "sar"], cluster.workdir())
        portals.append(portal)
        await portal.start()
        await grant_runs(admin, namespace, "viewer")
        token = await mint(admin, namespace, "viewer", [AUDIENCE])
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(fleet_reader(admin, namespace, "viewer"))
        portals_stack.append(stack)
        expected = {
            node["run"][0]: "Running",
            node["pass"][0]: "Passed",
            node["pass"][1]: "Passed",
            node["fail"][0]: "Failed",
            node["fail"][1]: "Passed",
            node["stale"][0]: "Stale",
            node["tamp"][0]: "Unknown",
        }
        await _wait_for(portal, token, expected)
        errors: list[str] = []

        # Without a token the page says so and shows nothing; the token field then works.
        first = await _page(browser, errors, portal.url + "/")
        await expect(first.get_by_role("alert")).to_contain_text("needs a bearer token")
        await expect(first.locator("article.check")).to_have_count(0)
        await first.screenshot(path=artifacts / "01-no-token.png")
        await first.fill("#token", token)
        await first.click("text=Use token")
        await expect(first.locator(f'article[data-check="{main}/check-0"]')).to_be_visible()
        await expect(first.get_by_role("alert")).to_be_hidden()
        await first.context.close()

        # A token in the URL is refused outright (it would already be in logs and history) and
        # never reaches the page's storage.
        leaked = await _page(browser, [], f"{portal.url}/?token={token}")  # its 400 is the point
        assert "CredentialsInURL" in await leaked.locator("body").inner_text()
        assert await leaked.evaluate("sessionStorage.getItem('signal-portal-token')") is None
        await leaked.context.close()

        page = await _page(browser, errors, f"{portal.url}/?refresh=1")
        await page.fill("#token", token)
        await page.click("text=Use token")
        card = page.locator(f'article[data-check="{main}/check-0"]')
        await expect(card).to_be_visible()
        assert "token" not in page.url
        assert await page.evaluate("sessionStorage.getItem('signal-portal-token')") == token

        # Each Node's health and capacity beside its result.
        def health(check: str, name: str) -> Any:
            return page.locator(f'article[data-check="{check}/check-0"] tr[data-node="{name}"] td.health')

        held = health(main, node["run"][0])
        await expect(held).to_have_attribute("data-held", "true")
        await expect(held).to_contain_text("Reserved and cordoned by Signal by Run")
        await expect(held).to_contain_text(running["metadata"]["name"])
        await expect(held).to_contain_text("GPU 8 · rdma/ib 8")
        cordoned = health(main, node["fail"][0])
        await expect(cordoned).to_have_attribute("data-operator-cordoned", "true")
        await expect(cordoned).to_contain_text("Cordoned by an operator")
        await expect(health(main, node["fail"][1])).to_have_attribute("data-operator-cordoned", "false")
        sick = health(short, node["stale"][0])
        await expect(sick).to_have_attribute("data-ready", "False")
        await expect(sick).to_contain_text("Not ready (KubeletNotReady)")
        await expect(sick).to_contain_text("GPU 4 · rdma/ib 2")
        await expect(health(main, node["pass"][0])).to_have_attribute("data-ready", "True")

        for name, state in expected.items():
            check = short if name == node["stale"][0] else main
            row = page.locator(f'article[data-check="{check}/check-0"] tr[data-node="{name}"]')
            await expect(row.get_by_role("button")).to_have_text(re.compile(rf"^\W*{state}$"))
            await expect(row).to_have_attribute("data-state", state)
        tallies = {"Passed": "3", "Failed": "1", "Running": "1", "Stale": "0", "Unknown": "1"}
        for state, count in tallies.items():
            await expect(card.locator(f'.counts li[data-state="{state}"]')).to_contain_text(f"{state}{count}")
        await expect(card.locator(".tag")).to_have_text("registered")
        await _assert_readable_badges(page, card)
        await _assert_readable_badges(page, page.locator(f'article[data-check="{short}/check-0"]'))
        quiet = page.locator(f'article[data-check="{idle}/check-0"]')
        await expect(quiet).to_contain_text("No results yet.")
        await expect(page.locator(f'article[data-check^="{ghost}/"]')).to_have_count(0)
        assert ghost not in await page.locator("body").inner_text()

        # The evidence is not on the page until a result is chosen.
        dialog = page.locator("dialog#detail")
        run_digest = passed["status"]["evidence"]["digest"]
        await expect(dialog).to_be_hidden()
        await expect(page.locator("#detail-body > *")).to_have_count(0)
        assert run_digest not in await page.content()
        assert "busbw_gbps" not in await page.content()
        await page.screenshot(path=artifacts / "02-fleet.png", full_page=True)

        await card.locator(f'tr[data-node="{node["pass"][0]}"] button').click()
        await expect(dialog).to_be_visible()
        await expect(dialog).to_contain_text("Participants and measurements")
        for name in node["pass"]:
            await expect(dialog.locator(f'.participants tr[data-node="{name}"]')).to_contain_text("busbw_gbps")
        await expect(dialog).to_contain_text(run_digest)
        await expect(dialog).to_contain_text(passed["status"]["evidence"]["configMap"])
        await expect(dialog.locator(".cleanup")).to_have_text("Complete")
        await expect(dialog).to_contain_text("every workload is gone")
        await expect(dialog).to_contain_text("CheckPassed")
        await page.screenshot(path=artifacts / "03-detail-passed.png")
        await dialog.get_by_role("button", name="Close").click()
        await expect(dialog).to_be_hidden()
        await expect(page.locator("#detail-body > *")).to_have_count(0)

        await card.locator(f'tr[data-node="{node["tamp"][0]}"] button').click()
        await expect(dialog.locator(".verdict")).to_contain_text("DigestMismatch")
        await expect(dialog.locator(".cleanup")).to_have_text("Unknown")
        await page.screenshot(path=artifacts / "04-detail-unknown.png")
        await page.keyboard.press("Escape")
        await expect(dialog).to_be_hidden()

        # Live refresh: a new Run appears without reloading the page.
        live = await lab.nodes(f"{namespace}-live", 1)
        await lab.run(namespace, main, live)
        await expect(card.locator(f'tr[data-node="{live[0]["metadata"]["name"]}"]')).to_have_attribute(
            "data-state", "Running", timeout=30_000
        )
        await expect(card.locator('.counts li[data-state="Running"]')).to_contain_text("Running2")
        await page.screenshot(path=artifacts / "05-after-refresh.png", full_page=True)

        # --auth none: no token needed.
        open_portal = Portal(kubeconfig, ["--namespace", namespace, "--auth", "none"], cluster.workdir())
        portals.append(open_portal)
        await open_portal.start()
        await _wait_for(open_portal, None, expected)
        anonymous = await _page(browser, errors, open_portal.url + "/")
        await expect(anonymous.locator(f'article[data-check="{main}/check-0"] tbody tr')).to_have_count(7)
        await expect(anonymous.get_by_role("alert")).to_be_hidden()
        await anonymous.screenshot(path=artifacts / "06-auth-none.png", full_page=True)
        assert errors == []
    finally:
        for started in portals:
            started.stop()
        for stack in portals_stack:
            await stack.aclose()
        await cluster.delete_namespace(unwatched)
