"""Where ``signalctl demo`` runs Signal: :class:`ProcessSignal` (the controller and the portal
as local processes beside simulated GPU Nodes and the process kubelet) or :class:`PodSignal`
(``--real-nodes``: a system node and four GPU nodes that are real kubelets and containerd, with
Signal, Argo's workflow-controller and the Kubeflow MPI operator running there as Pods of the
images built from this repository, installed as an operator would: ``localcluster.incluster``).
Both give the demo the same few things: the GPU fleet, Signal installed, the controller's
health and log, and the portal's address and credentials."""

import asyncio
import contextlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from localcluster import install
from localcluster.binaries import argo_build_dir
from localcluster.cluster import LocalCluster
from localcluster.controlplane import free_port
from localcluster.crds import install_crds, upstream_crd_files
from localcluster.fleet import SimNode, standard_fleet
from localcluster.incluster import SIGNAL_NAMESPACE, InCluster, apply_all
from localcluster.kube import ApiError, Obj, resource_path

SYSTEM_NODE: Final = "system-1"
GPU_NODES: Final = ("gpu-001", "gpu-002", "gpu-003", "gpu-004")
VIEWER: Final = "signal-demo-viewer"
PORTAL_AUDIENCE: Final = "signal-portal"


@dataclass
class Portal:
    """How to reach the portal: its base URL and httpx client settings."""

    base: str
    client: dict[str, Any] = field(default_factory=dict)
    request: dict[str, Any] = field(default_factory=dict)
    """Per-request httpx arguments (e.g. the TLS server name)."""
    note: str = ""


class Signal(Protocol):
    cluster: LocalCluster

    async def fleet(self, nodes: int) -> None: ...
    async def install(self, say: Any) -> None: ...
    async def start_controller(self) -> None: ...
    async def controller_problem(self) -> str | None: ...
    async def controller_log(self) -> str: ...
    async def start_portal(self) -> Portal: ...
    async def portal_problem(self) -> str | None: ...
    def stop(self) -> None: ...


def real_shapes() -> list[SimNode]:
    """The system node (no GPUs) and gpu-001..gpu-004 over two zones (groups of two fit the
    demo profile's budget of two Nodes under test per zone)."""
    gpus = [SimNode(name, zone=f"zone-{'ab'[i % 2]}", rack=f"rack-{i % 2}") for i, name in enumerate(GPU_NODES)]
    return [SimNode(SYSTEM_NODE, gpus=0, rdma=0, cpu="16", memory="64Gi"), *gpus]


@dataclass
class ProcessSignal:
    cluster: LocalCluster
    namespace: str = SIGNAL_NAMESPACE
    controller: "subprocess.Popen[bytes] | None" = None
    portal: "subprocess.Popen[bytes] | None" = None

    async def fleet(self, nodes: int) -> None:
        await self.cluster.add_nodes(standard_fleet(nodes))

    async def install(self, say: Any) -> None:
        say(f"installing Signal into {self.namespace} (controller and adapter RBAC, the adapter WorkflowTemplate)")
        await install.install(self.cluster.admin, self.namespace)

    async def start_controller(self) -> None:
        plane = self.cluster.plane
        self.controller = await install.start_controller(
            plane,
            self.namespace,
            plane.workdir,
            instance_id=self.cluster.workflow_instance_id,
            metrics_port=free_port(),
        )

    async def controller_problem(self) -> str | None:
        return "controller exited" if self.controller is not None and self.controller.poll() is not None else None

    async def controller_log(self) -> str:
        path: Path = self.cluster.plane.workdir / "controller.log"
        try:
            text = await asyncio.to_thread(path.read_text, errors="replace")
        except OSError as error:
            return f"(no controller log: {error})"
        return text[-3000:]

    async def start_portal(self) -> Portal:
        port = free_port()
        plane = self.cluster.plane
        self.portal = await install.start_portal(plane, self.namespace, plane.workdir, port=port)
        return Portal(f"http://127.0.0.1:{port}", note="read-only, as signal-portal; --auth none for local use")

    async def portal_problem(self) -> str | None:
        if self.portal is not None and self.portal.poll() is not None:
            return "the portal exited; see portal.log in the demo's work directory"
        return None

    def stop(self) -> None:
        for process in (self.portal, self.controller):
            if process is not None and process.poll() is None:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(10)
                if process.poll() is None:
                    process.kill()


@dataclass
class PodSignal:
    cluster: LocalCluster
    namespace: str = SIGNAL_NAMESPACE
    timings: dict[str, float] = field(default_factory=dict)

    async def fleet(self, nodes: int) -> None:
        """The GPU Nodes are the real nodes the cluster started with."""

    async def install(self, say: Any) -> None:
        admin = self.cluster.admin
        assert self.cluster.realnodes is not None
        await install_crds(admin, upstream_crd_files(await asyncio.to_thread(argo_build_dir)))
        incluster = InCluster(admin, self.cluster.realnodes, SYSTEM_NODE, self.cluster.workflow_instance_id)
        self.timings = await incluster.install(say)
        await apply_all(admin, viewer_objects(self.namespace))

    async def start_controller(self) -> None:
        """The controller's Deployment is available once ``install`` returns."""

    async def _controller_pods(self) -> list[Obj]:
        selector = "app.kubernetes.io/component=controller"
        found = await self.cluster.admin.get(resource_path("v1", "pods", self.namespace), labelSelector=selector)
        return list(found["items"])

    async def controller_problem(self) -> str | None:
        for pod in await self._controller_pods():
            for status in pod.get("status", {}).get("containerStatuses", []):
                if status.get("restartCount", 0) > 0:
                    return f"the controller Pod {pod['metadata']['name']} restarted ({status.get('lastState')})"
        return None

    async def controller_log(self) -> str:
        logs = []
        for pod in await self._controller_pods():
            path = resource_path("v1", "pods", self.namespace, pod["metadata"]["name"], "log")
            with contextlib.suppress(ApiError):
                logs.append(await self.cluster.admin.text(path, tailLines="40"))
        return "\n".join(logs)

    async def _portal_pod(self) -> Obj | None:
        selector = "app.kubernetes.io/component=portal"
        found = await self.cluster.admin.get(resource_path("v1", "pods", self.namespace), labelSelector=selector)
        running = [p for p in found["items"] if p.get("status", {}).get("podIP")]
        return running[0] if running else None

    async def start_portal(self) -> Portal:
        """The portal runs as a Pod (HTTPS, TokenReview for its audience): reached at its Pod's
        address from the host, verified against the cluster CA by its Service name, as the
        ServiceAccount signal-demo-viewer (may list Runs, profiles and Nodes)."""
        pod = await self._portal_pod()
        if pod is None:
            raise RuntimeError(f"no running portal Pod in {self.namespace}; see `kubectl -n {self.namespace} get pods`")
        assert self.cluster.realnodes is not None
        assert self.cluster.realnodes.pki is not None
        token = await self.cluster.admin.create(
            resource_path("v1", "serviceaccounts", self.namespace, VIEWER, "token"),
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"audiences": [PORTAL_AUDIENCE], "expirationSeconds": 3600},
            },
        )
        ca = str(self.cluster.realnodes.pki.ca.cert)
        return Portal(
            f"https://{pod['status']['podIP']}:8080",
            client={"verify": ca, "headers": {"Authorization": f"Bearer {token['status']['token']}"}},
            request={"extensions": {"sni_hostname": f"signal-portal.{self.namespace}.svc"}},
            note=f"Pod {pod['metadata']['name']} on {pod['spec'].get('nodeName')}, HTTPS, as {VIEWER}",
        )

    async def portal_problem(self) -> str | None:
        return None if await self._portal_pod() is not None else "the portal Pod is not running"

    def stop(self) -> None:
        """Signal's Pods stop with the real nodes."""


def viewer_objects(namespace: str) -> list[Obj]:
    """A ServiceAccount that may read what the portal shows (the demo's portal caller)."""
    rbac = "rbac.authorization.k8s.io"
    rules = [
        {
            "apiGroups": ["projectsignal.dev"],
            "resources": ["certificationruns", "certificationprofiles"],
            "verbs": ["get", "list"],
        },
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
    ]
    subject = {"kind": "ServiceAccount", "name": VIEWER, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": VIEWER, "namespace": namespace}},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": {"name": VIEWER}, "rules": rules},
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": VIEWER},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": VIEWER},
            "subjects": [subject],
        },
    ]
