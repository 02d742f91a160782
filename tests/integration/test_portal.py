"""The portal (signal-portal) on the real API server, as its own ServiceAccount with the RBAC
of deploy/base/portal-rbac.yaml: every state produced by real Runs decided by the controller's
own acceptance code (controller/reconcile/accept.py, in-process, as in the acceptance corpus);
workspace isolation between two users; a pagination walk while Runs are being written; and
schemathesis against the served OpenAPI document (no server error).

deploy/base/portal-rbac.yaml grants Runs and ConfigMaps in one namespace (the Signal
namespace); the isolation test watches two, so it copies that Role into the second one."""

import asyncio
import base64
import contextlib
import json
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

from controller.reconcile.accept import accept, check_evidence_name
from controller.reconcile.state import Context
from controller.rules.runview import run_view
from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.controlplane import free_port
from localcluster.fleet import SimNode
from localcluster.kube import ApiError, KubeClient, resource_path
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
RBAC = "rbac.authorization.k8s.io/v1"
AUDIENCE = "signal-portal"
"""The portal accepts only tokens minted for its audience (its --audience default)."""
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

    async def profile(
        self, name: str, checks: int = 1, interval: str | None = None, freshness: str | None = None
    ) -> None:
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
        if freshness:
            spec["freshness"] = freshness
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
            labels = {
                keys.RUN_NAME_LABEL: name,
                keys.RUN_UID_LABEL: run["metadata"]["uid"],
                keys.CHECK_LABEL: run["spec"]["checks"][index]["name"],
                keys.COMPONENT_LABEL: "evidence",  # the adapter's, which the evidence policy requires
            }
            body = {**stored, "metadata": {**stored["metadata"], "name": cm_name, "labels": labels}}
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
            kube = Kube(identities.admin(self.cluster.plane).endpoint(), field_manager="signal-controller")
            self.contexts[namespace] = Context(kube, namespace, "portal-test")
        await accept(self.contexts[namespace], run_view(run), workflow, deadline_passed=False)
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

    async def replace_check_evidence(self, run: Obj, document: Obj) -> None:
        """Delete check 0's evidence ConfigMap and store ``document`` under its name (same labels)."""
        namespace = run["metadata"]["namespace"]
        path = resource_path("v1", "configmaps", namespace, check_evidence_name(run["metadata"]["name"], 0))
        original = await self.admin.get(path)
        await self.admin.delete(path)
        stored = eb.config_map(original["metadata"]["name"], document)
        meta = {**stored["metadata"], "labels": original["metadata"]["labels"]}
        await self.admin.create(resource_path("v1", "configmaps", namespace), {**stored, "metadata": meta})

    async def close(self) -> None:
        for context in self.contexts.values():
            await context.kube.close()
        for name in self.profiles:
            with contextlib.suppress(Exception):
                await self.admin.delete(resource_path(API, keys.PROFILE_PLURAL, name=name))


async def mint(admin: KubeClient, namespace: str, name: str, audiences: list[str] | None) -> str:
    """A real token for ServiceAccount namespace/name (TokenRequest), for ``audiences``."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    await admin.apply(resource_path("v1", "serviceaccounts", namespace, name), account)
    spec: Obj = {"expirationSeconds": 3600}
    if audiences:
        spec["audiences"] = audiences
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    answer = await admin.create(resource_path("v1", "serviceaccounts", namespace, name, "token"), request)
    return str(answer["status"]["token"])


def _subject(namespace: str, name: str) -> Obj:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


async def grant_runs(admin: KubeClient, namespace: str, account: str, home: str | None = None) -> None:
    """ServiceAccount ``account`` (of ``home``, default ``namespace``) may list Runs in
    ``namespace`` (and nothing else)."""
    role = {
        "apiVersion": RBAC,
        "kind": "Role",
        "metadata": {"name": f"{account}-runs", "namespace": namespace},
        "rules": [{"apiGroups": [keys.GROUP], "resources": [keys.RUN_PLURAL], "verbs": ["get", "list"]}],
    }
    binding = {
        "apiVersion": RBAC,
        "kind": "RoleBinding",
        "metadata": {"name": f"{account}-runs", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{account}-runs"},
        "subjects": [_subject(home or namespace, account)],
    }
    await admin.apply(resource_path(RBAC, "roles", namespace, f"{account}-runs"), role)
    await admin.apply(resource_path(RBAC, "rolebindings", namespace, f"{account}-runs"), binding)
    await rbac_in_effect(admin, [role, binding])


@contextlib.asynccontextmanager
async def fleet_reader(admin: KubeClient, namespace: str, account: str) -> AsyncIterator[None]:
    """``account`` may list Nodes and profiles (cluster-wide), for the duration."""
    name = f"{namespace}-{account}-fleet"
    role = {
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
            {"apiGroups": [keys.GROUP], "resources": [keys.PROFILE_PLURAL], "verbs": ["list"]},
        ],
    }
    binding = {
        "apiVersion": RBAC,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [_subject(namespace, account)],
    }
    await admin.apply(resource_path(RBAC, "clusterroles", name=name), role)
    await admin.apply(resource_path(RBAC, "clusterrolebindings", name=name), binding)
    try:
        await rbac_in_effect(admin, [role, binding])
        yield
    finally:
        for plural in ("clusterrolebindings", "clusterroles"):
            with contextlib.suppress(ApiError):
                await admin.delete(resource_path(RBAC, plural, name=name))


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
    return {**document, "schema": "projectsignal.dev/evidence/v3"}


async def test_each_state_comes_from_real_runs(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    main, short = f"{namespace}-main", f"{namespace}-short"
    fresh, lenient = f"{namespace}-fresh", f"{namespace}-lenient"
    await lab.profile(main)
    await lab.profile(short, interval="30m")
    await lab.profile(fresh, freshness="30m")  # no recurrence: the profile's freshness alone
    await lab.profile(lenient, interval="30m", freshness="2h")  # freshness wins over the interval
    n = {
        k: await lab.nodes(f"{namespace}-{k}", 2 if k == "fail" else 1)
        for k in ("run", "pass", "fail", "stale", "repl", "tamp", "vers", "gone", "swap", "fresh", "lenient")
    }
    running = await lab.run(namespace, main, n["run"])
    passed = await lab.finish(r := await lab.run(namespace, main, n["pass"]), _fresh(r))
    failed = await lab.finish(r := await lab.run(namespace, main, n["fail"]), _fresh(r, verdicts={0: "Fail"}))
    stale = await lab.finish(r := await lab.run(namespace, short, n["stale"]), _fresh(r, finished=_now_minus(hours=1)))
    replaced = await lab.finish(r := await lab.run(namespace, main, n["repl"]), _fresh(r))
    tampered = await lab.finish(r := await lab.run(namespace, main, n["tamp"]), _fresh(r))
    versioned = await lab.finish(r := await lab.run(namespace, main, n["vers"]), _fresh(r))
    gone = await lab.finish(r := await lab.run(namespace, main, n["gone"]), _fresh(r))
    swapped = await lab.finish(r := await lab.run(namespace, main, n["swap"]), _fresh(r))
    old_fresh = await lab.finish(
        r := await lab.run(namespace, fresh, n["fresh"]), _fresh(r, finished=_now_minus(hours=1))
    )
    old_lenient = await lab.finish(
        r := await lab.run(namespace, lenient, n["lenient"]), _fresh(r, finished=_now_minus(hours=1))
    )
    assert [x["status"]["phase"] for x in (passed, failed, stale, replaced, tampered, versioned)] == [
        "Succeeded",
        "Failed",
        "Succeeded",
        "Succeeded",
        "Succeeded",
        "Succeeded",
    ]
    portal = await _start(portals, cluster, kubeconfig, "--namespace", namespace, "--auth", "sar")
    await grant_runs(admin, namespace, "viewer")
    token = await mint(admin, namespace, "viewer", [AUDIENCE])

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
        _id(namespace, node("gone"), main, "check-0", gone): ("Passed", "CheckPassed"),
        _id(namespace, node("swap"), main, "check-0", swapped): ("Passed", "CheckPassed"),
        _id(namespace, node("fresh"), fresh, "check-0", old_fresh): ("Stale", "OlderThanWindow"),
        _id(namespace, node("lenient"), lenient, "check-0", old_lenient): ("Passed", "CheckPassed"),
    }
    await eventually(lambda: _matches(portal, token, expected), timeout=30, what="initial states")
    # Then the world changes under the portal: a Node replaced, evidence swapped twice.
    await cluster.remove_node(node("repl"))
    await cluster.add_nodes([SimNode(node("repl"))])
    await lab.replace_evidence(tampered, _tampered)
    await lab.replace_evidence(versioned, _next_version)
    # The check evidence a v2 Run document names, deleted; or replaced by a valid document that
    # fails the Node (labels, owner and all): never a pass (issue 41).
    await admin.delete(resource_path("v1", "configmaps", namespace, check_evidence_name(gone["metadata"]["name"], 0)))
    await lab.replace_check_evidence(swapped, eb.check_evidence(swapped, 0, verdicts={0: "Fail"}))
    expected[_id(namespace, node("gone"), main, "check-0", gone)] = ("Unknown", "Missing")
    expected[_id(namespace, node("swap"), main, "check-0", swapped)] = ("Unknown", "DigestMismatch")
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
    # Registered checks without a result, to a caller who may list profiles and Nodes (a fresh
    # identity: the portal caches each caller's access answers for a few seconds).
    await grant_runs(admin, namespace, "operator")
    async with fleet_reader(admin, namespace, "operator"):
        operator = await mint(admin, namespace, "operator", [AUDIENCE])
        summary = (await portal.get(f"/api/v1/nodes/{node('fail')}", operator)).json()
        rows = {row["check"]: row["state"] for row in summary["checks"]}
        assert rows[f"{main}/check-0"] == "Failed"
        assert rows[f"{short}/check-0"] == "Unknown"  # registered, no result for this Node
        checks = {c["id"]: c for c in (await portal.get("/api/v1/checks", operator)).json()["items"]}
    assert checks[f"{short}/check-0"]["freshnessSeconds"] == 1800
    assert checks[f"{main}/check-0"]["freshnessSeconds"] == 7 * 86400  # neither: shared DEFAULT_FRESHNESS
    assert checks[f"{fresh}/check-0"]["freshnessSeconds"] == 1800
    assert checks[f"{lenient}/check-0"]["freshnessSeconds"] == 7200
    assert (await portal.get("/readyz")).status_code == 200
    assert "signal_portal_requests_total" in (await portal.get("/metrics")).text


async def _matches(portal: Portal, token: str, expected: dict[str, tuple[str, str]]) -> bool:
    states = await _states(portal, token)
    return all(states.get(k) == v for k, v in expected.items())


async def test_a_user_sees_only_their_workspaces(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    other = f"{namespace}-b"
    await cluster.create_namespace(other)
    try:
        kubeconfig = await portal_identity(cluster, admin, namespace, [other])
        await grant_runs(admin, namespace, "alice")
        profile = f"{namespace}-iso"
        await lab.profile(profile)
        mine = await lab.finish(r := await lab.run(namespace, profile, await lab.nodes(f"{namespace}-a")), _fresh(r))
        hidden_nodes = await lab.nodes(f"{namespace}-hid")
        hidden = await lab.finish(r := await lab.run(other, profile, hidden_nodes), _fresh(r))
        portal = await _start(
            portals, cluster, kubeconfig, "--namespace", namespace, "--namespace", other, "--auth", "sar"
        )
        await grant_runs(admin, other, "root", home=namespace)
        await grant_runs(admin, namespace, "root")
        root = await mint(admin, namespace, "root", [AUDIENCE])
        alice, bob = await mint(admin, namespace, "alice", [AUDIENCE]), await mint(admin, namespace, "bob", [AUDIENCE])
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
        assert node.status_code == 404, "alice sees no result of that Node and may not list Nodes"
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


async def _hold(admin: KubeClient, node: str, run: Obj, index: int) -> None:
    """Reserve and cordon ``node`` for ``run`` with Signal's keys, as the controller does."""
    meta = run["metadata"]
    detail = {"run": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"], "index": index, "request": ""}
    patch = {
        "metadata": {
            "labels": {keys.RESERVED_BY_LABEL: meta["uid"]},
            "annotations": {keys.RESERVATION_ANNOTATION: json.dumps(detail, sort_keys=True)},
        },
        "spec": {"taints": [{"key": keys.RESERVED_TAINT_KEY, "value": meta["uid"], "effect": "NoSchedule"}]},
    }
    await admin.merge_patch(resource_path("v1", "nodes", name=node), patch)


async def test_node_health_and_capacity_beside_results(
    cluster: LocalCluster, admin: KubeClient, namespace: str, lab: Lab, portals: list[Portal]
) -> None:
    kubeconfig = await portal_identity(cluster, admin, namespace, [])
    profile = f"{namespace}-health"
    await lab.profile(profile)
    held, cordoned, sick = (f"{namespace}-{k}" for k in ("held", "cordoned", "sick"))
    nodes = await cluster.add_nodes(
        [SimNode(held), SimNode(cordoned, unschedulable=True), SimNode(sick, ready=False, gpus=4, rdma=2)]
    )
    running = await lab.run(namespace, profile, nodes[:1])
    await _hold(admin, held, running, 0)
    done = await lab.finish(r := await lab.run(namespace, profile, nodes[1:]), _fresh(r))
    portal = await _start(portals, cluster, kubeconfig, "--namespace", namespace, "--auth", "sar")
    await grant_runs(admin, namespace, "viewer")
    viewer = await mint(admin, namespace, "viewer", [AUDIENCE])
    stranger = await mint(admin, namespace, "stranger", [AUDIENCE])  # may list Nodes, sees no workspace
    expected = {
        held: {
            "ready": "True",
            "gpu": "8",
            "rdma": {"rdma/ib": "8"},
            "signal": {
                "cordoned": True,
                "run": {
                    "name": running["metadata"]["name"],
                    "namespace": namespace,
                    "uid": running["metadata"]["uid"],
                    "index": 0,
                },
            },
            "operatorCordoned": False,
        },
        cordoned: {"ready": "True", "gpu": "8", "rdma": {"rdma/ib": "8"}, "signal": None, "operatorCordoned": True},
        sick: {"ready": "False", "gpu": "4", "rdma": {"rdma/ib": "2"}, "signal": None, "operatorCordoned": False},
    }

    def shown(health: Obj) -> Obj:
        return {
            "ready": health["ready"]["status"],
            "gpu": health["allocatable"]["gpu"],
            "rdma": health["allocatable"]["rdma"],
            "signal": health["signal"],
            "operatorCordoned": health["operatorCordoned"],
        }

    async with fleet_reader(admin, namespace, "viewer"), fleet_reader(admin, namespace, "stranger"):

        async def all_shown() -> bool:
            fleet = (await portal.get("/api/v1/fleet", viewer)).json()
            return {k: shown(v) for k, v in fleet.get("nodes", {}).items()} == expected

        await eventually(all_shown, timeout=30, what="the fleet view's Node health")

        def ours(summary: Obj) -> Obj:
            """This test's check (profiles of earlier tests in the session cluster list theirs too)."""
            return next(c for c in summary["checks"] if c["profile"] == profile)

        for name, health in expected.items():
            summary = (await portal.get(f"/api/v1/nodes/{name}", viewer)).json()
            assert shown(summary["health"]) == health, name
            assert ours(summary)["state"] in {"Running", "Passed"}
        sick_summary = (await portal.get(f"/api/v1/nodes/{sick}", viewer)).json()
        assert sick_summary["health"]["ready"]["reason"] == "KubeletNotReady"
        assert sick_summary["uid"] == nodes[2]["metadata"]["uid"]
        # Whoever may list Nodes learns that Signal holds one, not which Run of which workspace.
        foreign = (await portal.get(f"/api/v1/nodes/{held}", stranger)).json()
        assert foreign["health"]["signal"] == {"cordoned": True, "run": None}
        assert ours(foreign)["state"] == "Unknown"
        assert running["metadata"]["name"] not in json.dumps(foreign)
    assert done["status"]["phase"] == "Succeeded"
