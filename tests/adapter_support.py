"""Running the real adapter against the local cluster, as its ServiceAccount with the RBAC
from deploy/, for a Run that the test creates (as an admin) on simulated Nodes."""

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.rules.manifests import snapshot_manifest
from localcluster import hooked, identities, podprocess
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.imageenv import image_env
from localcluster.install import install_policies
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from shared.digests import bundle_digest
from tests.controller_support import install_rbac

API = keys.API_VERSION
FAKE_RUNNER_IMAGE = "projectsignal.dev/fake-runner:test"
FAKE_RUNNER = Path(__file__).resolve().parent / "fake_runner.py"


@contextlib.contextmanager
def fake_runner_image() -> Iterator[str]:
    """Register an image whose entrypoint is tests/fake_runner.py (a misbehaving runner)."""
    podprocess.IMAGE_ENTRYPOINTS["projectsignal.dev/fake-runner"] = [sys.executable, str(FAKE_RUNNER)]
    try:
        yield FAKE_RUNNER_IMAGE
    finally:
        podprocess.IMAGE_ENTRYPOINTS.pop("projectsignal.dev/fake-runner", None)


@dataclass
class AdapterOutcome:
    code: int
    outputs: dict[str, str]
    log: str

    @property
    def verdict(self) -> str:
        return self.outputs.get("verdict", "")


def check(name: str, script_key: str, backend: str = "Pod", deadline: str = "30s", **extra: Any) -> Obj:
    return {"name": name, "scriptKey": script_key, "backend": backend, "backendActiveDeadline": deadline, **extra}


@dataclass
class AdapterWorld:
    cluster: LocalCluster
    admin: KubeClient
    namespace: str
    workdir: Path
    nodes: list[str] = field(default_factory=list)
    run: Obj = field(default_factory=dict)
    runs: int = 0

    async def setup(
        self,
        participants: int,
        scripts: dict[str, str],
        checks: Sequence[Obj],
        *,
        unmanaged: Sequence[int] = (),
    ) -> Obj:
        """Adapter RBAC, ``participants`` Nodes (those in ``unmanaged`` have no kubelet), a
        Running Run over them, and its snapshot ConfigMap."""
        await install_rbac(self.admin, self.namespace, "adapter-rbac.yaml")
        await install_policies(self.admin, self.namespace)  # the adapter refuses to run without them
        self.nodes = [f"{self.namespace}-n{i}" for i in range(participants)]
        managed = [SimNode(n) for i, n in enumerate(self.nodes) if i not in unmanaged]
        created = {n["metadata"]["name"]: n for n in await self.cluster.add_nodes(managed)}
        for i in unmanaged:
            node = await self.admin.create(resource_path("v1", "nodes"), SimNode(self.nodes[i]).manifest())
            created[node["metadata"]["name"]] = node
        name = f"run-{uuid.uuid4().hex[:6]}"
        body = {
            "apiVersion": API,
            "kind": keys.RUN_KIND,
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "profile": {"name": "adapter-test", "uid": str(uuid.uuid4()), "generation": 1},
                "checks": list(checks),
                "source": {"digest": bundle_digest(scripts, {}), "snapshotConfigMap": f"{name}-scripts"},
                "participants": [
                    {"index": i, "nodeName": n, "nodeUID": created[n]["metadata"]["uid"]}
                    for i, n in enumerate(self.nodes)
                ],
                "suiteDeadlineSeconds": 3600,
            },
        }
        run = await self.admin.create(resource_path(API, keys.RUN_PLURAL, self.namespace), body)
        run = await self.admin.merge_patch(
            resource_path(API, keys.RUN_PLURAL, self.namespace, name, "status"), {"status": {"phase": "Running"}}
        )
        # As the controller makes it (controller/rules/manifests.py): the signal-scripts policy admits no other shape.
        snapshot = snapshot_manifest(run, {"data": scripts})
        await self.admin.create(resource_path("v1", "configmaps", self.namespace), snapshot)
        self.run = run
        return run

    def parameters(self, check_index: int) -> list[str]:
        meta, spec = self.run["metadata"], self.run["spec"]
        compact = [
            {"index": p["index"], "nodeName": p["nodeName"], "nodeUID": p["nodeUID"]} for p in spec["participants"]
        ]
        return [
            "--run-namespace",
            meta["namespace"],
            "--run-name",
            meta["name"],
            "--run-uid",
            meta["uid"],
            "--participants-json",
            json.dumps(compact),
            "--snapshot",
            spec["source"]["snapshotConfigMap"],
            "--check-index",
            str(check_index),
            "--check-json",
            json.dumps(spec["checks"][check_index]),
        ]

    async def adapter(
        self, check_index: int, *extra: str, args: Sequence[str] | None = None, **env: str
    ) -> AdapterOutcome:
        """Run signal-adapter for one check as the signal-adapter ServiceAccount."""
        process, outputs = await self.spawn(check_index, *extra, args=args, **env)
        out, _ = await process.communicate()
        values = {p.name: p.read_text() for p in outputs.iterdir()} if outputs.exists() else {}
        return AdapterOutcome(process.returncode or 0, values, out.decode(errors="replace"))

    async def spawn(
        self, check_index: int, *extra: str, args: Sequence[str] | None = None, **env: str
    ) -> tuple[asyncio.subprocess.Process, Path]:
        """Start signal-adapter for one check (stdout piped); the process and its output directory."""
        sa = await identities.service_account(self.cluster.plane, self.namespace, "signal-adapter", create=False)
        self.runs += 1
        config = sa.kubeconfig(self.workdir / "adapter.kubeconfig", self.namespace)
        outputs = self.workdir / f"outputs-{self.runs}"
        argv = [
            *hooked.command("signal-adapter"),
            *(args if args is not None else self.parameters(check_index)),
            "--kubeconfig",
            str(config),
            "--output-dir",
            str(outputs),
            "--log-format",
            "console",
            *extra,
        ]
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **image_env(), **env},
        )
        return process, outputs

    async def pods(self, selector: str = "") -> list[Obj]:
        query = {"labelSelector": selector or f"{keys.RUN_UID_LABEL}={self.run['metadata']['uid']}"}
        return list((await self.admin.get(resource_path("v1", "pods", self.namespace), **query))["items"])

    async def config_map(self, name: str) -> Obj:
        return await self.admin.get(resource_path("v1", "configmaps", self.namespace, name))

    async def cleanup(self) -> None:
        for name in self.nodes:
            await self.cluster.remove_node(name)
        with contextlib.suppress(ApiError):
            for pod in await self.pods(""):
                if pod["metadata"].get("finalizers"):
                    path = resource_path("v1", "pods", self.namespace, pod["metadata"]["name"])
                    await self.admin.merge_patch(path, {"metadata": {"finalizers": None}})
