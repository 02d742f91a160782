"""Running the real controller against the local cluster, as its ServiceAccount with the
RBAC from deploy/, in a namespace of its own; and building the world it acts on."""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from shared.digests import bundle_digest

REPO = Path(__file__).resolve().parents[1]
API = keys.API_VERSION
SCRIPTS = {"inventory.sh": "#!/bin/sh\necho gpus=8\n", "nccl.sh": "#!/bin/sh\nexit 0\n"}


def _plural(kind: str) -> str:
    return {
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
    }[kind]


async def install_rbac(admin: KubeClient, namespace: str, file: str = "controller-rbac.yaml") -> None:
    """Apply a deploy/ RBAC file into ``namespace`` (bindings outside it get a per-namespace
    name); the controller's also brings deploy/node-events (Events about Nodes)."""
    if file == "controller-rbac.yaml":
        await install_rbac(admin, namespace, "../node-events/rbac.yaml")
    text = (REPO / "deploy" / "base" / file).read_text().replace("namespace: signal-system", f"namespace: {namespace}")
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        api = doc["apiVersion"]
        if doc["kind"] == "ClusterRoleBinding" or (
            doc["kind"] == "RoleBinding" and doc["metadata"]["namespace"] == "default"
        ):
            doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
        ns = doc["metadata"].get("namespace")
        await admin.apply(resource_path(api, _plural(doc["kind"]), ns, doc["metadata"]["name"]), doc)
    await rbac_in_effect(admin, docs)


async def rbac_in_effect(admin: KubeClient, docs: Sequence[Obj], timeout: float = 20.0) -> None:
    """Wait until the API server authorizes what each binding in ``docs`` grants (the first
    rule of its Role, for each ServiceAccount or User subject): RBAC reaches the authorizer through
    informers, so a process started right after the apply could otherwise meet a 403."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in {"Role", "ClusterRole"}}
    for binding in (d for d in docs if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}):
        role = roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        if role is None or not role.get("rules"):
            continue
        rule = role["rules"][0]
        resource, _, subresource = rule["resources"][0].partition("/")
        attributes = {"verb": rule["verbs"][0], "group": rule["apiGroups"][0], "resource": resource}
        if subresource:
            attributes["subresource"] = subresource
        if rule.get("resourceNames"):
            attributes["name"] = rule["resourceNames"][0]
        if binding["kind"] == "RoleBinding":
            attributes["namespace"] = binding["metadata"]["namespace"]
        for subject in binding.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                sa_ns = subject["namespace"]
                user = f"system:serviceaccount:{sa_ns}:{subject['name']}"
                groups = ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}", "system:authenticated"]
            elif subject["kind"] == "User":
                user, groups = subject["name"], ["system:authenticated"]
            else:
                continue
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "resourceAttributes": attributes},
            }

            async def allowed(review: Obj = review) -> bool:
                answer = await admin.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
                return bool(answer.get("status", {}).get("allowed"))

            await eventually(allowed, timeout=timeout, what=f"{binding['metadata']['name']} to take effect")


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

    async def kubeconfig(self) -> Path:
        sa = await identities.service_account(self.cluster.plane, self.namespace, "signal-controller", create=False)
        return sa.kubeconfig(self.workdir / "controller.kubeconfig", self.namespace)

    async def start(self, **env: str) -> None:
        config = await self.kubeconfig()
        self.starts += 1
        log = (self.workdir / f"controller-{self.identity}{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "signal-controller"),
                "--kubeconfig",
                str(config),
                "--namespace",
                self.namespace,
                "--identity",
                f"controller-{self.namespace}",
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
            env={**os.environ, **self.env, **env},
        )
        log.close()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.workdir.glob("controller-*.log")))

    async def wait_exit(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.process.poll() is None:
            raise AssertionError(f"controller did not exit within {timeout}s:\n{self.logs()}")
        return self.process.returncode

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


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


async def eventually(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2, what: str = "") -> Any:
    """Await ``check()`` until it returns a truthy value (returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}: last={last!r}")


def reserved_by(node: Obj) -> str | None:
    labels: dict[str, str] = node["metadata"].get("labels") or {}
    return labels.get(keys.RESERVED_BY_LABEL)
