"""The whole local cluster as one async context: control plane, Signal and upstream
CRDs (installed before the garbage collector starts), a proven garbage collector,
simulated GPU Nodes with a heartbeat, the process kubelet, optionally real nodes
(``localcluster.realnode``), and Argo Workflows' real workflow-controller (local test
infrastructure, see ``localcluster.argoworkflows``) with a simulated system Node for its Pods.
MPIJobs run only on real nodes, under the real Kubeflow MPI operator
(``localcluster.kubeflowmpi``, started beside the cluster): nothing here simulates it."""

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import structlog

from localcluster import identities
from localcluster.argoworkflows import ArgoController, system_node
from localcluster.binaries import argo_build_dir
from localcluster.controlplane import ControlPlane
from localcluster.crds import (
    install_crds,
    project_crd_files,
    prove_garbage_collection,
    upstream_crd_files,
)
from localcluster.fleet import SimNode, create_nodes, heartbeat
from localcluster.install import remove_policies
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.kubelet import ProcessKubelet
from localcluster.realnode.pool import RealNodes, gpu_nodes

log = structlog.get_logger("localcluster")


@dataclass
class LocalCluster:
    """Start with ``async with LocalCluster() as cluster``."""

    plane: ControlPlane = field(default_factory=ControlPlane)
    heartbeat_seconds: float = 10.0
    install_upstream: bool = True
    with_argo: bool = True
    """Run Argo's workflow-controller (needs ``install_upstream``)."""
    workflow_instance_id: str = ""
    """Argo's instanceID: when set, Argo runs only Workflows labelled with it (Signal's controller:
    ``--workflow-instance-id``)."""
    real_nodes: int | list[SimNode] = 0
    """Real nodes (``localcluster.realnode``): a count of GPU nodes (``node-1``...) or their
    shapes. Simulated Nodes and the process kubelet stay available beside them."""
    simulated: set[str] = field(default_factory=set)
    timings: dict[str, float] = field(default_factory=dict)
    admin_client: KubeClient | None = None
    kubelet: ProcessKubelet | None = None
    argo: ArgoController | None = None
    realnodes: RealNodes | None = None
    _heartbeat: asyncio.Task[None] | None = None

    @property
    def admin(self) -> KubeClient:
        if self.admin_client is None:
            raise RuntimeError("the local cluster is not started")
        return self.admin_client

    async def __aenter__(self) -> "LocalCluster":
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self, progress: Callable[[str], None] | None = None) -> None:
        """Start everything; on any failure, stop what was started and re-raise."""
        try:
            await self._start(progress)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, progress: Callable[[str], None] | None) -> None:
        say = progress or (lambda _message: None)
        began = time.monotonic()
        if self.real_nodes:
            shapes = gpu_nodes(self.real_nodes) if isinstance(self.real_nodes, int) else list(self.real_nodes)
            self.realnodes = RealNodes(shapes)
            self.realnodes.prepare(self.plane)
        say("starting etcd and kube-apiserver")
        self.plane.start_api()
        self.timings["api"] = time.monotonic() - began
        self.admin_client = identities.admin(self.plane).client()
        files = project_crd_files()
        argo_dir = None
        if self.install_upstream:
            say("building (or finding) Argo Workflows' workflow-controller and argoexec (and its CRDs)")
            argo_dir = await asyncio.to_thread(argo_build_dir)
            files += upstream_crd_files(argo_dir)
        say(f"installing {len(files)} CRDs")
        await install_crds(self.admin, files)
        self.timings["crds"] = time.monotonic() - began
        say("starting kube-controller-manager and kube-scheduler")
        self.plane.start_controllers()
        say("proving the garbage collector with a canary")
        self.timings["gc_canary"] = await prove_garbage_collection(self.admin)
        if self.realnodes is not None:
            await self.realnodes.start(self.admin, self.plane.server, say)
            self.timings["real_nodes"] = time.monotonic() - began
        # In-cluster config for Pods: the API server answers on its host (its certificate covers it).
        service_env = {
            "KUBERNETES_SERVICE_HOST": self.plane.host,
            "KUBERNETES_SERVICE_PORT": str(self.plane.apiserver_port),
        }
        self.kubelet = ProcessKubelet(
            self.admin,
            self.plane.workdir / "kubelet",
            lambda n: n in self.simulated,
            service_env=service_env,
            tls_files=self._process_kubelet_tls(),
        )
        await self.kubelet.start()
        if argo_dir is not None and self.with_argo:
            say("starting Argo's workflow-controller")
            node = system_node(self.kubelet.api_port)
            self.simulated.add(node["metadata"]["name"])
            await self.admin.create(resource_path("v1", "nodes"), node)
            self.argo = ArgoController(self.plane, self.admin, argo_dir, instance_id=self.workflow_instance_id)
            await self.argo.start()
            self.timings["argo"] = time.monotonic() - began
        self._heartbeat = asyncio.create_task(
            heartbeat(self.admin, lambda: sorted(self.simulated), self.heartbeat_seconds),
            name="node-heartbeat",
        )
        self.timings["total"] = time.monotonic() - began
        log.info("local cluster ready", **{k: round(v, 2) for k, v in self.timings.items()})

    async def stop(self) -> None:
        """Stop every part in reverse order of start. Each part is stopped even if an earlier
        one fails to stop, so the control plane's processes never outlive the cluster; the
        first failure is raised at the end."""
        failures: list[BaseException] = []

        async def attempt(step: Callable[[], Awaitable[object]]) -> None:
            try:
                await step()
            except Exception as exc:
                log.warning("a local cluster part failed to stop", error=repr(exc))
                failures.append(exc)

        if self.argo:
            argo = self.argo
            await attempt(lambda: asyncio.to_thread(argo.stop))
        if self._heartbeat:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        if self.kubelet:
            await attempt(self.kubelet.stop)
        if self.realnodes:
            realnodes = self.realnodes
            await attempt(lambda: asyncio.to_thread(realnodes.stop))
        if self.admin_client:
            await attempt(self.admin_client.close)
        await attempt(lambda: asyncio.to_thread(self.plane.stop))
        if self.realnodes:  # the bridge goes last: the API server listened on it
            await attempt(lambda: asyncio.to_thread(realnodes.release))
        if failures:
            raise failures[0]

    def _process_kubelet_tls(self) -> tuple[Path, Path]:
        """The process kubelet's serving certificate: the API server's self-signed one, or with
        real nodes one the cluster CA signed (the API server then verifies every kubelet)."""
        if self.realnodes is not None:
            pair = self.realnodes.serving_pair_for_process_kubelet()
            return pair.cert, pair.key
        return self.plane.ca_file, self.plane.ca_file.with_suffix(".key")

    async def add_nodes(
        self,
        nodes: Iterable[SimNode],
        *,
        concurrency: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> list[Obj]:
        """Create simulated Nodes; their Pods run under the process kubelet."""
        nodes = list(nodes)
        self.simulated.update(n.name for n in nodes)
        return await create_nodes(self.admin, nodes, concurrency=concurrency, progress=progress)

    async def remove_node(self, name: str) -> None:
        self.simulated.discard(name)
        with contextlib.suppress(ApiError):
            await self.admin.delete(resource_path("v1", "nodes", name=name))

    async def create_namespace(self, name: str) -> Obj:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        return await self.admin.create(resource_path("v1", "namespaces"), body)

    async def delete_namespace(self, name: str) -> None:
        """Delete the namespace and the per-namespace copies of Signal's admission policies
        made for it (cluster-scoped: left behind, the API server would go on evaluating them on
        every matching write of the session)."""
        with contextlib.suppress(ApiError):
            await self.admin.delete(resource_path("v1", "namespaces", name=name))
        with contextlib.suppress(ApiError):
            await remove_policies(self.admin, name)

    def workdir(self) -> Path:
        return self.plane.workdir
