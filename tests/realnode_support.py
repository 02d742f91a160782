"""Checks on real nodes (localcluster.realnode): one local cluster with three real nodes (Runs
use ``node-1`` and ``node-2``; ``node-3`` is never requested: it is the Node not under test
where a ``crossNode`` MPI launcher runs and reaches the workers over SSH), the runner image
built from this repository (localcluster.images) and imported into every node's containerd,
the real Kubeflow MPI operator v0.8.0 with its RBAC, and a namespace under Pod Security
``restricted`` with the adapter's RBAC and Signal's admission policies from deploy/.
The adapter runs as a local process with its ServiceAccount's kubeconfig (tests.adapter_support),
against Runs over the real Nodes. What runs on a node is read from that node's containerd."""

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import yaml

from adapter.placement import TRUSTED_SELECTOR_ENV
from controller.rules.manifests import snapshot_manifest
from localcluster import images
from localcluster.argoworkflows import SYSTEM_NODE, SYSTEM_NODE_LABEL
from localcluster.binaries import argo_build_dir
from localcluster.cluster import LocalCluster
from localcluster.controlplane import ControlPlane
from localcluster.crds import install_crds, upstream_crd_files
from localcluster.install import install_policies
from localcluster.kube import KubeClient, Obj, resource_path
from localcluster.kubeflowmpi import KubeflowMPIOperator
from localcluster.realnode import containerd
from localcluster.realnode.node import RealNode
from shared import keys
from shared.digests import bundle_digest
from tests.adapter_support import AdapterWorld
from tests.controller_support import REPO, eventually, install_rbac

POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_NAME_LABEL = "io.kubernetes.pod.name"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
REAL_NODES = ("node-1", "node-2", "node-3")
"""Runs take the first two; the third is never requested (a crossNode launcher's Node)."""
SPARE_NODE = REAL_NODES[-1]
LAUNCHER_LABEL = "node-restriction.kubernetes.io/signal.test-launchers"
"""With Argo: the label (one no kubelet can set) an admin puts on the spare real node, where the
crossNode launchers must run (they need the runner image and SSH to the workers); the adapter's
steps stay on the system node (the template's own trusted-node selector). The template installed
here points the adapter's launcher selector (SIGNAL_TRUSTED_NODE_SELECTOR) at it."""
SYSTEM_TAINT = {"key": SYSTEM_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
"""With Argo, the simulated system node (the process kubelet's) is tainted and the adapter's
WorkflowTemplate tolerates it, as docs/security.md tells operators to reserve trusted Nodes for
the steps: no crossNode launcher lands there, only on a real node not under test."""


@dataclass
class RealCluster:
    """The module's cluster: three real nodes, the real MPI operator, the runner image."""

    cluster: LocalCluster
    operator: KubeflowMPIOperator
    runner: images.Image
    namespace: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def admin(self) -> KubeClient:
        return self.cluster.admin

    @property
    def nodes(self) -> list[RealNode]:
        assert self.cluster.realnodes is not None
        return self.cluster.realnodes.nodes

    def logs(self) -> str:
        assert self.cluster.realnodes is not None
        operator = self.operator.component.tail() if self.operator.component else ""
        return f"{self.cluster.realnodes.logs(15)}\n--- mpi-operator ---\n{operator}"


async def start_real_cluster(keep: bool = False, *, argo: bool = False) -> RealCluster:
    """Build (or find) the runner image, start the cluster with three real nodes, import the
    image, start the real MPI operator and prepare a restricted namespace for the adapter.
    With ``argo``, Argo's real workflow-controller runs too (its step Pods on the cluster's
    simulated system node, the checks' Pods on the real nodes) and the namespace holds the
    adapter's WorkflowTemplate: the whole path, controller to containers."""
    timings: dict[str, float] = {}
    began = time.monotonic()
    runner = (await asyncio.to_thread(images.Builder().build, ["runner"]))["runner"]
    timings["runner_image"] = time.monotonic() - began
    local = LocalCluster(
        plane=ControlPlane(keep_workdir=keep), real_nodes=len(REAL_NODES), install_upstream=argo, with_argo=argo
    )
    await local.start()
    operator = KubeflowMPIOperator(local.plane, local.admin)
    try:
        timings["cluster"] = local.timings["total"]
        assert local.realnodes is not None
        if argo:
            await local.admin.merge_patch(
                resource_path("v1", "nodes", name=SYSTEM_NODE), {"spec": {"taints": [SYSTEM_TAINT]}}
            )
            trusted = {"metadata": {"labels": {LAUNCHER_LABEL: "true"}}}
            await local.admin.merge_patch(resource_path("v1", "nodes", name=SPARE_NODE), trusted)
        else:
            # Argo's CRDs (the controller submits Workflows; Argo itself does not run here) and
            # the MPIJob CRD of the operator's source tree.
            await install_crds(local.admin, upstream_crd_files(await asyncio.to_thread(argo_build_dir)))
        timings["import_runner"] = await local.realnodes.import_archive(images.images_dir() / runner.archive)
        started = time.monotonic()
        await operator.start()
        timings["mpi_operator"] = time.monotonic() - started
        namespace = await prepare_namespace(local.admin, argo=argo)
    except BaseException:
        await operator.stop()
        await local.stop()
        raise
    timings["total"] = time.monotonic() - began
    return RealCluster(local, operator, runner, namespace, timings)


async def prepare_namespace(admin: KubeClient, *, argo: bool) -> str:
    """A new namespace under Pod Security ``restricted`` with the adapter's RBAC, Signal's
    admission policies and, with ``argo``, the adapter's WorkflowTemplate; its name."""
    namespace = f"real-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": RESTRICTED}}
    await admin.create(resource_path("v1", "namespaces"), body)
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    await install_policies(admin, namespace)
    if argo:
        await install_workflow_template(admin, namespace, tolerations=[{**SYSTEM_TAINT, "operator": "Equal"}])
    return namespace


async def install_workflow_template(admin: KubeClient, namespace: str, tolerations: Sequence[Obj] = ()) -> None:
    """deploy/'s adapter WorkflowTemplate, in ``namespace``; with ``tolerations`` for the
    trusted Nodes' own taints, as an operator's overlay sets ``spec.tolerations``."""
    template = yaml.safe_load((REPO / "deploy" / "base" / "adapter-workflowtemplate.yaml").read_text())
    template["metadata"]["namespace"] = namespace
    if tolerations:
        template["spec"]["tolerations"] = list(tolerations)
    for step in template["spec"]["templates"]:
        for env in (step.get("container") or {}).get("env") or []:
            if env["name"] == TRUSTED_SELECTOR_ENV:
                env["value"] = f"{LAUNCHER_LABEL}=true"
    path = resource_path("argoproj.io/v1alpha1", "workflowtemplates", namespace, template["metadata"]["name"])
    await admin.apply(path, template)


async def stop_real_cluster(real: RealCluster) -> None:
    try:
        await real.operator.stop()
    finally:
        await real.cluster.stop()


@dataclass
class RealWorld(AdapterWorld):
    """An AdapterWorld whose Run's participants are the real Nodes (never created or
    removed here)."""

    async def setup_real(self, nodes: Sequence[str], scripts: dict[str, str], checks: Sequence[Obj]) -> Obj:
        self.nodes = list(nodes)
        uids = {n: (await self.admin.get(resource_path("v1", "nodes", name=n)))["metadata"]["uid"] for n in nodes}
        name = f"run-{uuid.uuid4().hex[:6]}"
        body = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.RUN_KIND,
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "profile": {"name": "real-nodes", "uid": str(uuid.uuid4()), "generation": 1},
                "checks": list(checks),
                "source": {"digest": bundle_digest(scripts, {}), "snapshotConfigMap": f"{name}-scripts"},
                "participants": [{"index": i, "nodeName": n, "nodeUID": uids[n]} for i, n in enumerate(self.nodes)],
                "suiteDeadlineSeconds": 3600,
            },
        }
        runs = resource_path(keys.API_VERSION, keys.RUN_PLURAL, self.namespace)
        await self.admin.create(runs, body)
        run = await self.admin.merge_patch(f"{runs}/{name}/status", {"status": {"phase": "Running"}})
        # As the controller makes it (controller/rules/manifests.py): the signal-scripts policy admits no other shape.
        snapshot = snapshot_manifest(run, {"data": scripts})
        await self.admin.create(resource_path("v1", "configmaps", self.namespace), snapshot)
        self.run = run
        return run

    async def cleanup(self) -> None:
        """Remove what the Run left (a failed test's workloads), never the Nodes."""
        selector = f"{keys.RUN_UID_LABEL}={self.run['metadata']['uid']}" if self.run else ""
        if not selector:
            return
        with contextlib.suppress(Exception):
            jobs = await self.admin.get(
                resource_path("kubeflow.org/v2beta1", "mpijobs", self.namespace), labelSelector=selector
            )
            for job in jobs["items"]:
                path = resource_path("kubeflow.org/v2beta1", "mpijobs", self.namespace, job["metadata"]["name"])
                await self.admin.delete(path, {"propagationPolicy": "Background"})
            for pod in await self.pods(selector):
                path = resource_path("v1", "pods", self.namespace, pod["metadata"]["name"])
                await self.admin.delete(path, {"gracePeriodSeconds": 0})


@dataclass(frozen=True, order=True)
class Container:
    """A container the node's containerd runs (a task in state RUNNING)."""

    node: str
    pod: str
    container: str  # "" for the Pod's sandbox (pause) container


def _running_on(node: RealNode, namespace: str) -> list[Container]:
    enter, paths = node.enter(), node.runtime
    tasks = containerd.running_tasks(enter, paths)
    ids = containerd.ctr(enter, paths, "containers", "ls", "-q", f'labels."{POD_NAMESPACE_LABEL}"=={namespace}')
    found = []
    for container_id in ids.split():
        if tasks.get(container_id) != "RUNNING":
            continue
        info = json.loads(containerd.ctr(enter, paths, "containers", "info", container_id))
        labels = info.get("Labels") or {}
        found.append(Container(node.name, labels.get(POD_NAME_LABEL, "?"), labels.get(CONTAINER_NAME_LABEL, "")))
    return found


async def running_containers(real: RealCluster, namespace: str, pod_prefix: str = "") -> list[Container]:
    """Every running container (sandboxes included) of Pods of ``namespace`` on every real
    node, read from each node's containerd; only Pods named ``pod_prefix...`` when given."""
    per_node = await asyncio.gather(*(asyncio.to_thread(_running_on, n, namespace) for n in real.nodes))
    return sorted(c for found in per_node for c in found if c.pod.startswith(pod_prefix))


def keep_cluster_dir() -> bool:
    return os.environ.get("SIGNAL_KEEP_CLUSTER_DIR") == "1"


async def leftovers(world: RealWorld) -> list[str]:
    """Every Run-labelled Pod and MPIJob that still exists."""
    selector = f"{keys.RUN_UID_LABEL}={world.run['metadata']['uid']}"
    jobs = await world.admin.get(
        resource_path("kubeflow.org/v2beta1", "mpijobs", world.namespace), labelSelector=selector
    )
    names = [f"Pod/{p['metadata']['name']}" for p in await world.pods()]
    return names + [f"MPIJob/{j['metadata']['name']}" for j in jobs["items"]]


async def assert_stopped(real: RealCluster, world: RealWorld, prefixes: list[str]) -> None:
    """Nothing of the check runs on any node (each node's containerd), right now."""
    for prefix in prefixes:
        still = await running_containers(real, world.namespace, prefix)
        assert still == [], f"reported gone but still running on the nodes: {still}"


async def containers_of(real: RealCluster, world: RealWorld, prefix: str, count: int) -> list[Container]:
    """Wait until ``count`` runner containers of Pods ``prefix...`` run (positive control)."""

    async def enough() -> list[Container] | None:
        found = [c for c in await running_containers(real, world.namespace, prefix) if c.container == "runner"]
        return found if len(found) >= count else None

    found: list[Container] = await eventually(
        enough, timeout=120, what=f"{count} running runner containers of {prefix}"
    )
    return found


class PodClock:
    """Watches the Run's Pods: when each was first seen and when its container first started
    (running or already terminated), on this process's monotonic clock."""

    def __init__(self, world: RealWorld) -> None:
        self.world = world
        self.seen: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.deleted_versions: list[int] = []
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "PodClock":
        listing = await self.world.admin.get(resource_path("v1", "pods", self.world.namespace))
        self.task = asyncio.create_task(self._watch(listing["metadata"]["resourceVersion"]))
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def _watch(self, version: str) -> None:
        selector = f"{keys.RUN_UID_LABEL}={self.world.run['metadata']['uid']}"
        path = resource_path("v1", "pods", self.world.namespace)
        async for event in self.world.admin.watch(path, resourceVersion=version, labelSelector=selector):
            pod = event["object"]
            if event["type"] == "BOOKMARK":
                continue
            name, now = pod["metadata"]["name"], time.monotonic()
            self.seen.setdefault(name, now)
            states = [s.get("state", {}) for s in pod.get("status", {}).get("containerStatuses") or []]
            if any("running" in s or "terminated" in s for s in states):
                self.started.setdefault(name, now)
            if event["type"] == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                self.deleted_versions.append(int(pod["metadata"]["resourceVersion"]))

    def start_seconds(self) -> list[float]:
        return [self.started[n] - self.seen[n] for n in self.started if n in self.seen]
