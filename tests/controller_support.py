"""Running the real controller against the local cluster, as its ServiceAccount with the
RBAC from deploy/, in a namespace of its own; and building the world it acts on."""

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from localcluster import hooked, identities
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.imageenv import image_env
from localcluster.install import apply_file, install_policies
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.rbac import rbac_in_effect
from shared import keys
from shared.digests import bundle_digest

REPO = Path(__file__).resolve().parents[1]
API = keys.API_VERSION
SCRIPTS = {"inventory.sh": "#!/bin/sh\necho gpus=8\n", "nccl.sh": "#!/bin/sh\nexit 0\n"}


async def install_rbac(admin: KubeClient, namespace: str, file: str = "controller-rbac.yaml") -> None:
    """Apply a deploy/ RBAC file into ``namespace`` as the demo's install does (bindings outside
    it get a per-namespace name) and wait until it takes effect; the controller's also brings
    deploy/node-events (Events about Nodes)."""
    docs = await apply_file(admin, file, namespace)
    if file == "controller-rbac.yaml":
        docs += await apply_file(admin, "../node-events/rbac.yaml", namespace)
    await rbac_in_effect(admin, docs)


@dataclass
class ControllerProcess:
    cluster: LocalCluster
    namespace: str
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    resync: float = 2.0
    identity: str = ""
    metrics_port: int = 0
    workflow_instance_id: str = ""
    """Set to the local Argo's instanceID for tests whose Workflows should run."""
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    policies: bool = True
    """Install Signal's admission policies for the namespace before the first start (the
    controller refuses to run without them)."""

    async def kubeconfig(self) -> Path:
        sa = await identities.service_account(self.cluster.plane, self.namespace, "signal-controller", create=False)
        return sa.kubeconfig(self.workdir / "controller.kubeconfig", self.namespace)

    async def start(self, **env: str) -> None:
        if self.policies and not self.starts:
            await install_policies(self.cluster.admin, self.namespace)
        config = await self.kubeconfig()
        self.starts += 1
        log = (self.workdir / f"controller-{self.identity}{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [
                # The hooks launcher: the same entry point, with the test hooks (crash points,
                # faults, request log) armed from this process's environment.
                *hooked.command("signal-controller"),
                "--kubeconfig",
                str(config),
                "--namespace",
                self.namespace,
                "--identity",
                # Each replica its own identity (as POD_NAME gives each Pod), so that two
                # replicas compete for the Lease; a restarted replica keeps its identity.
                f"controller-{self.namespace}" + (f"-{self.identity}" if self.identity else ""),
                "--profile-selector",
                f"test={self.namespace}",
                "--resync",
                str(self.resync),
                "--metrics-port",
                str(self.metrics_port),
                "--workflow-instance-id",
                self.workflow_instance_id,
                "--log-format",
                "console",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **image_env(), **self.env, **env},
        )
        log.close()

    def logs(self, tail: int | None = 3000) -> str:
        """The controller's log files, each cut to its last ``tail`` characters (None: whole)."""
        texts = [p.read_text(errors="replace") for p in sorted(self.workdir.glob("controller-*.log"))]
        return "\n".join(t if tail is None else t[-tail:] for t in texts)

    async def wait_exit(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.process.poll() is None:
            raise AssertionError(f"controller did not exit within {timeout}s:\n{self.logs()}")
        return self.process.returncode

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: "subprocess.Popen[bytes] | None", grace: float = 10.0) -> None:
    """SIGTERM a service process, then SIGKILL it if it has not exited within ``grace`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def profile_body(
    name: str,
    namespace: str,
    count: int,
    *,
    digest: str | None = None,
    checks: Sequence[Obj] | None = None,
    budget: Obj | None = None,
    selector: Obj | None = None,
) -> Obj:
    spec: Obj = {
        "source": {"namespace": namespace, "name": "scripts", "digest": digest or bundle_digest(SCRIPTS, {})},
        "participants": {"selector": selector or {"matchLabels": {"pool": "gpu"}}, "count": count},
        "checks": list(
            checks
            or [
                {
                    "name": "inventory",
                    "scriptKey": "inventory.sh",
                    "backend": "Pod",
                    "gpuCount": 8,
                    "backendActiveDeadline": "5m",
                },
                {
                    "name": "nccl",
                    "scriptKey": "nccl.sh",
                    "backend": "MPIJob",
                    "gpuCount": 1,
                    "backendActiveDeadline": "10m",
                    "workload": {"extendedResources": {"rdma/ib": 1}, "capabilities": ["IPC_LOCK"]},
                },
            ]
        ),
        "evidenceReserve": "2m",
    }
    if budget:
        spec["failureDomainBudget"] = budget
    return {
        "apiVersion": API,
        "kind": "CertificationProfile",
        "metadata": {"name": name, "labels": {"test": namespace}},
        "spec": spec,
    }


@dataclass
class World:
    """One test's slice of the cluster: a namespace, its controller RBAC, scripts, Nodes, profiles."""

    cluster: LocalCluster
    admin: KubeClient
    namespace: str
    profiles: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    """Nodes this world created (removed by ``cleanup``): left behind, every later test of the
    session would pay for them, the heartbeat patching each every few seconds and each
    controller under test watching those patches (the crash file alone made about 1,000)."""

    async def setup(self, *, immutable: bool = True, scripts: dict[str, str] | None = None) -> None:
        await install_rbac(self.admin, self.namespace)
        cm: Obj = {"metadata": {"name": "scripts"}, "data": scripts or SCRIPTS}
        if immutable:
            cm["immutable"] = True
        await self.admin.create(resource_path("v1", "configmaps", self.namespace), cm)

    def node_names(self, count: int, prefix: str = "n") -> list[str]:
        return [f"{self.namespace}-{prefix}{i}" for i in range(count)]

    async def add_nodes(
        self, names: Sequence[str], *, requested_for: str | None, zones: Sequence[str] = ("zone-a",), **node: Any
    ) -> None:
        labels = {"pool": "gpu"}
        if requested_for:
            labels[keys.CERTIFY_LABEL] = requested_for
        self.added.extend(names)
        await self.cluster.add_nodes(
            [SimNode(n, zone=zones[i % len(zones)], labels=dict(labels), **node) for i, n in enumerate(names)]
        )

    async def add_profile(self, body: Obj) -> Obj:
        created = await self.admin.create(resource_path(API, keys.PROFILE_PLURAL), body)
        self.profiles.append(body["metadata"]["name"])
        return created

    async def request(self, profile: str, names: Sequence[str]) -> None:
        for name in names:
            await self.admin.merge_patch(
                resource_path("v1", "nodes", name=name), {"metadata": {"labels": {keys.CERTIFY_LABEL: profile}}}
            )

    async def runs(self) -> list[Obj]:
        return (await self.admin.get(resource_path(API, keys.RUN_PLURAL, self.namespace)))["items"]

    async def nodes(self, names: Sequence[str]) -> list[Obj]:
        return [await self.admin.get(resource_path("v1", "nodes", name=n)) for n in names]

    async def profile(self, name: str) -> Obj:
        return await self.admin.get(resource_path(API, keys.PROFILE_PLURAL, name=name))

    async def cleanup(self) -> None:
        for name in self.profiles:
            with contextlib.suppress(ApiError):
                await self.admin.delete(resource_path(API, keys.PROFILE_PLURAL, name=name))
        added, self.added = self.added, []
        await asyncio.gather(*(self.cluster.remove_node(name) for name in added))


async def eventually(
    check: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "",
    explain: Callable[[], Awaitable[str]] | None = None,
) -> Any:
    """Await ``check()`` until it returns a truthy value (returned) or ``timeout`` passes (then
    fail, with ``explain()``'s text when given: logs gathered at the time of the failure). The
    one deadline loop of the tests."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    more = f"\n{await explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}: last={last!r}{more}")


async def metrics_text(port: int) -> str:
    """The controller's Prometheus metrics page (``--metrics-port``)."""
    async with httpx.AsyncClient() as http:
        return (await http.get(f"http://127.0.0.1:{port}/metrics")).text


def reconciles(text: str, kind: str) -> float:
    """``signal_reconciles_total`` of ``kind`` (every result) on a metrics page: how many
    passes the controller has made over objects of that kind, the evidence a negative check
    waits for."""
    pattern = rf'signal_reconciles_total\{{kind="{kind}",result="[a-z]+"\}} ([0-9.e+]+)'
    return sum(float(m.group(1)) for m in re.finditer(pattern, text))


def reserved_by(node: Obj) -> str | None:
    labels: dict[str, str] = node["metadata"].get("labels") or {}
    return labels.get(keys.RESERVED_BY_LABEL)


async def ledger_groups(admin: KubeClient, namespace: str) -> dict[str, dict[str, Any]] | None:
    """The admission ledger's groups as the API server holds them (Run -> profile and Node
    names), its head and segments read and verified as the controller reads them; None
    while there is no ledger. A head that changed while its segments were listed (a group
    dropped, its segment deleted) is read again."""
    from controller.rules.ledger import LEDGER_NAME, SEGMENT_COMPONENT, assemble, parse_head, parse_segment  # noqa: PLC0415

    path = resource_path("v1", "configmaps", namespace, LEDGER_NAME)
    selector = f"{keys.COMPONENT_LABEL}={SEGMENT_COMPONENT}"
    while True:
        try:
            head = parse_head(await admin.get(path))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        listed = await admin.get(resource_path("v1", "configmaps", namespace), labelSelector=selector)
        if (await admin.get(path))["metadata"]["resourceVersion"] == head.resource_version:
            segments = dict(parse_segment(c) for c in listed["items"])
            return {run: g.to_json() for run, g in assemble(head, segments).groups.items()}
