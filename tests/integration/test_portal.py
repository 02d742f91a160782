"""The portal (signal-portal) on the real API server, as its own ServiceAccount with the RBAC
of deploy/base/portal-rbac.yaml: every state produced by real Runs decided by the controller's
own acceptance code (controller/accept.py, in-process, as in the acceptance corpus);
workspace isolation between two users; a pagination walk while Runs are being written; and
schemathesis against the served OpenAPI document (no server error).

deploy/base/portal-rbac.yaml grants Runs and ConfigMaps in one namespace (the Signal
namespace); the isolation test watches two, so it copies that Role into the second one."""

import asyncio
import base64
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
import yaml
from schemathesis.checks import not_a_server_error

from controller.accept import accept, check_evidence_name
from controller.state import Context
from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.controlplane import free_port
from localcluster.fleet import SimNode
from localcluster.kube import KubeClient, resource_path
from localcluster.rbac import rbac_in_effect
from shared import keys
from shared.acceptance import RUN_EVIDENCE_SCHEMA
from shared.digests import bundle_digest
from shared.evidence import EVIDENCE_KEY, SCHEMA_ANNOTATION, decode_document, encode
from tests import evidence_builders as eb
from tests.controller_support import REPO, eventually, install_rbac, stop_process
from tests.run_builders import run_body
from tests.unit.test_envelope_builders import evidence

pytestmark = pytest.mark.asyncio(loop_scope="session")
API = keys.API_VERSION
SCRIPTS = {"s.sh": "exit 0"}
Obj = dict[str, Any]


@dataclass
class Portal:
    """signal-portal as a subprocess."""

    kubeconfig: Path
    args: list[str]
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        log = (self.workdir / f"portal-{self.port}.log").open("wb")
        command = [str(Path(sys.executable).parent / "signal-portal"), "--kubeconfig", str(self.kubeconfig)]
        command += ["--port", str(self.port), "--host", "127.0.0.1", "--resync", "1", "--log-format", "console"]
        self.process = subprocess.Popen([*command, *self.args], stdout=log, stderr=subprocess.STDOUT, env=os.environ)
        log.close()

        async def ready() -> bool:
            assert self.process is not None
            assert self.process.poll() is None, self.logs()
            with contextlib.suppress(httpx.HTTPError):
                async with httpx.AsyncClient() as client:
                    return (await client.get(f"{self.url}/readyz")).status_code == 200
            return False

        await eventually(ready, timeout=60, what="portal ready")

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in self.workdir.glob("portal-*.log"))

    def stop(self) -> None:
        stop_process(self.process)

    async def get(self, path: str, token: str | None = None, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as client:
            return await client.get(path, headers=headers, params=params)


async def portal_identity(cluster: LocalCluster, admin: KubeClient, namespace: str, others: list[str]) -> Path:
    """The portal's ServiceAccount and RBAC (deploy/base/portal-rbac.yaml), and a kubeconfig."""
    await install_rbac(admin, namespace, "portal-rbac.yaml")
    text = (REPO / "deploy" / "base" / "portal-rbac.yaml").read_text()
    role = next(d for d in yaml.safe_load_all(text) if d["kind"] == "Role")
    for other in others:
        copy = {**role, "metadata": {"name": "signal-portal", "namespace": other}}
        await admin.apply(resource_path("rbac.authorization.k8s.io/v1", "roles", other, "signal-portal"), copy)
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "signal-portal", "namespace": other},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "signal-portal"},
            "subjects": [{"kind": "ServiceAccount", "name": "signal-portal", "namespace": namespace}],
        }
        await admin.apply(
            resource_path("rbac.authorization.k8s.io/v1", "rolebindings", other, "signal-portal"), binding
        )
        await rbac_in_effect(admin, [copy, binding])
    sa = await identities.service_account(cluster.plane, namespace, "signal-portal", create=False)
    return sa.kubeconfig(cluster.workdir() / f"portal-{namespace}.kubeconfig", namespace)


@dataclass
class Lab:
    """Runs, profiles and Nodes of one test, and the controller's acceptance in-process."""

    cluster: LocalCluster
    admin: KubeClient
    profiles: list[str] = field(default_factory=list)
    contexts: dict[str, Context] = field(default_factory=dict)

    async def profile(self, name: str, checks: int = 1, interval: str | None = None) -> None:
        spec: Obj = {
            "source": {"namespace": "default", "name": "scripts", "digest": bundle_digest(SCRIPTS, {})},
            "participants": {"selector": {"matchLabels": {"pool": name}}, "count": 2},
            "checks": [
                {"name": f"check-{i}", "scriptKey": "s.sh", "backend": "Pod", "backendActiveDeadline": "1m"}
                for i in range(checks)
            ],
        }
        if interval:
            spec["recurrence"] = {"interval": interval}
        body = {"apiVersion": API, "kind": keys.PROFILE_KIND, "metadata": {"name": name}, "spec": spec}
        await self.admin.create(resource_path(API, keys.PROFILE_PLURAL), body)
        self.profiles.append(name)

    async def nodes(self, prefix: str, count: int = 2) -> list[Obj]:
        return await self.cluster.add_nodes([SimNode(f"{prefix}-{i}") for i in range(count)])

    async def run(self, namespace: str, profile: str, nodes: list[Obj], checks: int = 1) -> Obj:
        body = run_body(namespace, nodes, profile, checks)
        name = body["metadata"]["name"]
        await self.admin.create(resource_path(API, keys.RUN_PLURAL, namespace), body)
        status = {"status": {"phase": "Running", "startTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}}
        return await self.admin.merge_patch(resource_path(API, keys.RUN_PLURAL, namespace, name, "status"), status)

    async def finish(self, run: Obj, documents: list[Obj]) -> Obj:
        """Store each check's evidence and let the controller's acceptance decide."""
        namespace, name = run["metadata"]["namespace"], run["metadata"]["name"]
        digests = {}
        for index, document in enumerate(documents):
            cm_name = check_evidence_name(name, index)
            stored = eb.config_map(cm_name, document)
            body = {**stored, "metadata": {**stored["metadata"], "name": cm_name}}
            await self.admin.create(resource_path("v1", "configmaps", namespace), body)
            digests[index] = eb.digest_of(document)
        nodes = {
            f"n{i}": {
                "templateName": "check",
                "phase": "Succeeded",
                "inputs": {"parameters": [{"name": "index", "value": str(i)}]},
                "outputs": {"parameters": [{"name": "evidence-digest", "value": d}]},
            }
            for i, d in digests.items()
        }
        workflow = {"metadata": {"name": name}, "status": {"phase": "Succeeded", "nodes": nodes}}
        if namespace not in self.contexts:
            kube = Kube(identities.admin(self.cluster.plane).api_client(), field_manager="signal-controller")
            self.contexts[namespace] = Context(kube, namespace, "portal-test")
        await accept(self.contexts[namespace], run, workflow, deadline_passed=False)
        return await self.admin.get(resource_path(API, keys.RUN_PLURAL, namespace, name))

    async def replace_evidence(self, run: Obj, edit: Callable[[Obj], Obj]) -> None:
        """Delete the Run's evidence ConfigMap and put an edited copy in its place (same name, labels)."""
        namespace = run["metadata"]["namespace"]
        name = run["status"]["evidence"]["configMap"]
        path = resource_path("v1", "configmaps", namespace, name)
        original = await self.admin.get(path)
        document = edit(decode_document(original, RUN_EVIDENCE_SCHEMA)[0])
        await self.admin.delete(path)
        meta = {k: original["metadata"][k] for k in ("name", "labels", "annotations", "ownerReferences")}
        meta["annotations"] = {**meta["annotations"], SCHEMA_ANNOTATION: str(document.get("schema"))}
        payload = encode(document)[2]
        body = {"metadata": meta, "immutable": True, "binaryData": {EVIDENCE_KEY: base64.b64encode(payload).decode()}}
        await self.admin.create(resource_path("v1", "configmaps", namespace), body)

    async def close(self) -> None:
        for context in self.contexts.values():
            await context.kube.close()
        for name in self.profiles:
            with contextlib.suppress(Exception):
                await self.admin.delete(resource_path(API, keys.PROFILE_PLURAL, name=name))


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


def _now_minus(**delta: float) -> datetime:
    return datetime.now(UTC) - timedelta(**delta)


async def _states(portal: Portal, token: str | None, **params: str) -> dict[str, tuple[str, str]]:
    answer = await portal.get("/api/v1/results", token, limit="1000", **params)
    assert answer.status_code == 200, answer.text
    return {item["id"]: (item["state"], item["reason"]) for item in answer.json()["items"]}


def _fresh(run: Obj, **kw: Any) -> list[Obj]:
    return [
        evidence(run, i, finished=kw.pop("finished", datetime.now(UTC)), **kw)
        for i in range(len(run["spec"]["checks"]))
    ]


def _id(namespace: str, node: str, profile: str, check: str, run: Obj) -> str:
    return "~".join((namespace, node, profile, check, run["metadata"]["uid"]))


def _tampered(document: Obj) -> Obj:
    document["message"] = "all good, trust me"
    return document


def _next_version(document: Obj) -> Obj:
    return {**document, "schema": "projectsignal.dev/evidence/v2"}


async def test_each_state_comes_from_real_runs(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    main, short = f"{namespace}-main", f"{namespace}-short"
    await lab.profile(main)
    await lab.profile(short, interval="30m")
    n = {
        k: await lab.nodes(f"{namespace}-{k}", 2 if k == "fail" else 1)
        for k in ("run", "pass", "fail", "stale", "repl", "tamp", "vers")
    }
    running = await lab.run(namespace, main, n["run"])
    passed = await lab.finish(r := await lab.run(namespace, main, n["pass"]), _fresh(r))
    failed = await lab.finish(r := await lab.run(namespace, main, n["fail"]), _fresh(r, verdicts={0: "Fail"}))
    stale = await lab.finish(r := await lab.run(namespace, short, n["stale"]), _fresh(r, finished=_now_minus(hours=1)))
    replaced = await lab.finish(r := await lab.run(namespace, main, n["repl"]), _fresh(r))
    tampered = await lab.finish(r := await lab.run(namespace, main, n["tamp"]), _fresh(r))
    versioned = await lab.finish(r := await lab.run(namespace, main, n["vers"]), _fresh(r))
    assert [x["status"]["phase"] for x in (passed, failed, stale, replaced, tampered, versioned)] == [
        "Succeeded",
        "Failed",
        "Succeeded",
        "Succeeded",
        "Succeeded",
        "Succeeded",
    ]
    portal = await _start(portals, cluster, kubeconfig, "--namespace", namespace, "--auth", "sar")
    token = identities.admin(cluster.plane).token

    def node(key: str, i: int = 0) -> str:
        return str(n[key][i]["metadata"]["name"])

    expected = {
        _id(namespace, node("run"), main, "check-0", running): ("Running", "RunInProgress"),
        _id(namespace, node("pass"), main, "check-0", passed): ("Passed", "CheckPassed"),
        _id(namespace, node("fail", 0), main, "check-0", failed): ("Failed", "CheckFailed"),
        _id(namespace, node("fail", 1), main, "check-0", failed): ("Passed", "CheckPassed"),
        _id(namespace, node("stale"), short, "check-0", stale): ("Stale", "OlderThanWindow"),
        _id(namespace, node("repl"), main, "check-0", replaced): ("Passed", "CheckPassed"),
        _id(namespace, node("tamp"), main, "check-0", tampered): ("Passed", "CheckPassed"),
        _id(namespace, node("vers"), main, "check-0", versioned): ("Passed", "CheckPassed"),
    }
    await eventually(lambda: _matches(portal, token, expected), timeout=30, what="initial states")
    # Then the world changes under the portal: a Node replaced, evidence swapped twice.
    await cluster.remove_node(node("repl"))
    await cluster.add_nodes([SimNode(node("repl"))])
    await lab.replace_evidence(tampered, _tampered)
    await lab.replace_evidence(versioned, _next_version)
    expected[_id(namespace, node("repl"), main, "check-0", replaced)] = ("Unknown", "NodeReplaced")
    expected[_id(namespace, node("tamp"), main, "check-0", tampered)] = ("Unknown", "DigestMismatch")
    expected[_id(namespace, node("vers"), main, "check-0", versioned)] = ("Unknown", "UnsupportedVersion")
    await eventually(lambda: _matches(portal, token, expected), timeout=30, what="states after changes")

    detail = (
        await portal.get(f"/api/v1/results/{_id(namespace, node('pass'), main, 'check-0', passed)}", token)
    ).json()
    assert detail["schema"] == "projectsignal.dev/validation-result/v1"
    assert detail["evidence"]["runDigest"] == passed["status"]["evidence"]["digest"]
    assert detail["detailsSchema"] == detail["details"]["schema"] == "projectsignal.dev/check-evidence/v1"
    assert detail["target"] == {"name": node("pass"), "uid": n["pass"][0]["metadata"]["uid"], "index": 0}
    assert detail["cleanup"] == "Complete"
    summary = (await portal.get(f"/api/v1/nodes/{node('fail')}", token)).json()
    rows = {row["check"]: row["state"] for row in summary["checks"]}
    assert rows[f"{main}/check-0"] == "Failed"
    assert rows[f"{short}/check-0"] == "Unknown"  # registered, no result for this Node
    checks = {c["id"]: c for c in (await portal.get("/api/v1/checks", token)).json()["items"]}
    assert checks[f"{short}/check-0"]["freshnessSeconds"] == 1800
    assert checks[f"{main}/check-0"]["freshnessSeconds"] == 7 * 86400
    assert (await portal.get("/readyz")).status_code == 200
    assert "signal_portal_results" in (await portal.get("/metrics")).text


async def _matches(portal: Portal, token: str, expected: dict[str, tuple[str, str]]) -> bool:
    states = await _states(portal, token)
    return all(states.get(k) == v for k, v in expected.items())


async def _grant_list_runs(admin: KubeClient, namespace: str, user: str) -> None:
    rbac = "rbac.authorization.k8s.io/v1"
    role = {
        "apiVersion": rbac,
        "kind": "Role",
        "metadata": {"name": f"{user}-runs", "namespace": namespace},
        "rules": [{"apiGroups": [keys.GROUP], "resources": [keys.RUN_PLURAL], "verbs": ["get", "list"]}],
    }
    binding = {
        "apiVersion": rbac,
        "kind": "RoleBinding",
        "metadata": {"name": f"{user}-runs", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{user}-runs"},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    await admin.apply(resource_path(rbac, "roles", namespace, f"{user}-runs"), role)
    await admin.apply(resource_path(rbac, "rolebindings", namespace, f"{user}-runs"), binding)
    await rbac_in_effect(admin, [role, binding])


async def test_a_user_sees_only_their_workspaces(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    other = f"{namespace}-b"
    await cluster.create_namespace(other)
    try:
        kubeconfig = await portal_identity(cluster, admin, namespace, [other])
        await _grant_list_runs(admin, namespace, "alice")
        profile = f"{namespace}-iso"
        await lab.profile(profile)
        mine = await lab.finish(r := await lab.run(namespace, profile, await lab.nodes(f"{namespace}-a")), _fresh(r))
        hidden_nodes = await lab.nodes(f"{namespace}-hid")
        hidden = await lab.finish(r := await lab.run(other, profile, hidden_nodes), _fresh(r))
        portal = await _start(
            portals, cluster, kubeconfig, "--namespace", namespace, "--namespace", other, "--auth", "sar"
        )
        root = identities.admin(cluster.plane).token
        alice, bob = identities.user(cluster.plane, "alice").token, identities.user(cluster.plane, "bob").token
        hidden_id = _id(other, hidden_nodes[0]["metadata"]["name"], profile, "check-0", hidden)
        mine_id = _id(namespace, f"{namespace}-a-0", profile, "check-0", mine)
        await eventually(
            lambda: _matches(portal, root, {hidden_id: ("Passed", "CheckPassed"), mine_id: ("Passed", "CheckPassed")}),
            what="both results",
        )
        seen = await _states(portal, alice)
        assert mine_id in seen
        assert {key.split("~")[0] for key in seen} == {namespace}
        assert await _states(portal, bob) == {}
        assert await _states(portal, alice, workspace=other) == {}
        texts = []
        for path in (f"/api/v1/results/{hidden_id}", f"/api/v1/results/{hidden_id[:-4]}abcd"):
            answer = await portal.get(path, alice)
            assert answer.status_code == 404
            texts.append(answer.text)
        assert texts[0] == texts[1]
        assert (await portal.get(f"/api/v1/results/{mine_id}", alice)).status_code == 200
        assert (await portal.get(f"/api/v1/results/{mine_id}", bob)).status_code == 404
        node = await portal.get(f"/api/v1/nodes/{hidden_nodes[0]['metadata']['name']}", alice)
        assert node.json()["checks"][0]["state"] == "Unknown"
        everything = [texts[0], node.text, (await portal.get("/api/v1/checks", alice)).text]
        everything.append((await portal.get("/api/v1/results", alice)).text)
        assert not any(other in text or hidden["metadata"]["uid"] in text for text in everything)
        assert (await portal.get("/api/v1/results")).status_code == 401
        assert (await portal.get("/api/v1/results", "not-a-token")).status_code == 401
    finally:
        await cluster.delete_namespace(other)


async def test_pagination_walk_while_runs_are_written(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    profile = f"{namespace}-page"
    nodes = await lab.nodes(f"{namespace}-p", 4)
    for i in range(12):
        await lab.run(namespace, profile, nodes[i % 3 : i % 3 + 2])
    portal = await _start(portals, cluster, kubeconfig, "--namespace", namespace, "--auth", "none")

    async def all_there() -> dict[str, tuple[str, str]] | None:
        states = await _states(portal, None)
        return states if len(states) == 24 else None

    initial = set(await eventually(all_there, what="24 results"))
    stop = asyncio.Event()

    async def writer() -> int:
        written = 0
        while not stop.is_set() and written < 60:
            await lab.run(namespace, profile, nodes[written % 3 : written % 3 + 2])
            written += 1
            await asyncio.sleep(0.05)
        return written

    task = asyncio.create_task(writer())
    walked: list[str] = []
    token: str | None = None
    pages = 0
    try:
        while True:
            params = {"limit": "2", **({"continue": token} if token else {})}
            body = (await portal.get("/api/v1/results", None, **params)).json()
            walked += [item["id"] for item in body["items"]]
            pages += 1
            token = body["continue"]
            if token is None:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        written = await task
    assert written > 0
    assert len(walked) == len(set(walked)), "duplicates"
    assert initial <= set(walked), f"omitted: {sorted(initial - set(walked))}"
    assert pages >= 12


async def test_schemathesis_finds_no_server_error(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    profile = f"{namespace}-fuzz"
    await lab.profile(profile)
    nodes = await lab.nodes(f"{namespace}-f")
    await lab.finish(r := await lab.run(namespace, profile, nodes), _fresh(r))
    await lab.run(namespace, profile, nodes)
    portal = await _start(portals, cluster, kubeconfig, "--namespace", namespace, "--auth", "none")
    schema = schemathesis.openapi.from_url(f"{portal.url}/api/v1/openapi.json")
    failures: list[str] = []
    calls = [0]

    def fuzz() -> None:
        for result in schema.get_all_operations():
            operation = result.ok()

            @hypothesis.settings(
                max_examples=60,
                deadline=None,
                database=None,
                suppress_health_check=list(hypothesis.HealthCheck),
                phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
            )
            @hypothesis.given(case=operation.as_strategy())
            def check(case: Any) -> None:
                calls[0] += 1
                response = case.call(base_url=portal.url, timeout=10)
                try:
                    case.validate_response(response, checks=[not_a_server_error])
                except Exception as exc:
                    failures.append(f"{case.method} {case.formatted_path} {case.query}: {exc}"[:500])

            check()

    await asyncio.to_thread(fuzz)
    assert calls[0] >= 100
    assert failures == []
