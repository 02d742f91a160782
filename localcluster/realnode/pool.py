"""The real nodes of one local cluster, from the host's side: the slot, bridge and state record
(with its janitor), the PKI and API server settings, CoreDNS, and N :class:`RealNode` s that
become Ready Nodes with GPU, RDMA, zone and rack like the simulated fleet's.

Order (driven by ``localcluster.cluster.LocalCluster``): :meth:`RealNodes.prepare` before the
API server starts (it must listen on the bridge and trust the CA), :meth:`RealNodes.start` once
the controllers run, :meth:`RealNodes.stop` before the control plane stops and
:meth:`RealNodes.release` after. A start first
sweeps what killed clusters left on the host (``hoststate.sweep``).
"""

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import structlog

from localcluster.binaries import kplane_binary
from localcluster.controlplane import ControlPlane
from localcluster.fleet import RDMA_RESOURCE, SIMULATED_LABEL, SimNode
from localcluster.kube import KubeClient, Obj, resource_path
from localcluster.realnode import dns, hoststate, images, network
from localcluster.realnode.containerd import CNI_BIN_DIR
from localcluster.realnode.node import RealNode
from localcluster.realnode.pki import APISERVER_KUBELET_CLIENT, KUBE_PROXY_USER, ClusterPKI, KeyPair, client_kubeconfig
from shared import keys

log = structlog.get_logger("localcluster.realnode")
CONTROLLERS = ("endpointslice-controller", "deployment-controller", "replicaset-controller")
"""kube-controller-manager controllers real nodes need besides the local cluster's own (the
Deployments of ``localcluster.incluster``: Signal, Argo and the MPI operator as Pods)."""


TOOLS = (
    "containerd",
    "containerd-shim-runc-v2",
    "runc",
    "ctr",
    "iptables",
    "nft",
    "ip",
    "unshare",
    "nsenter",
    "openssl",
)


def missing_requirements() -> list[str]:
    """What this machine lacks for real nodes (empty when it has everything)."""
    missing = [] if os.geteuid() == 0 else ["root (real nodes make namespaces, cgroups and a bridge)"]
    missing += [f"the command {tool}" for tool in TOOLS if shutil.which(tool) is None]
    missing += [
        f"the CNI plugin {p}" for p in ("bridge", "host-local", "loopback") if not Path(CNI_BIN_DIR, p).exists()
    ]
    if not hoststate.hierarchies():
        missing.append("a mounted cgroup hierarchy")
    return missing


SOCKET_ROOM = 48
"""The longest nodes' directory whose sockets (containerd's ``<node>/containerd/containerd.sock.ttrpc``,
the kubelet's under its root) stay within a Unix socket path's 108 bytes."""


def nodes_directory(wanted: Path) -> Path:
    """Create and return the nodes' directory: ``wanted`` when short enough for their Unix
    sockets (:data:`SOCKET_ROOM`), else a short one under the system's temporary directory that
    ``wanted`` links to (a long ``--workdir`` would otherwise make containerd fail with "unix
    socket path too long")."""
    if len(str(wanted)) <= SOCKET_ROOM:
        wanted.mkdir(parents=True, exist_ok=True)
        return wanted
    short = Path(tempfile.mkdtemp(prefix="signal-rn-"))
    wanted.parent.mkdir(parents=True, exist_ok=True)
    wanted.unlink(missing_ok=True)
    wanted.symlink_to(short, target_is_directory=True)
    return short


def gpu_nodes(count: int, prefix: str = "node") -> list[SimNode]:
    """``count`` GPU Node shapes (8 GPUs, 8 RDMA) over two zones and racks: ``node-1``..."""
    return [
        SimNode(f"{prefix}-{i + 1}", zone=f"zone-{'ab'[i % 2]}", rack=f"rack-{i % 2}{i // 2}") for i in range(count)
    ]


@dataclass
class RealNodes:
    """N real nodes (``shapes`` give their names, labels, GPUs and RDMA)."""

    shapes: list[SimNode]
    timings: dict[str, float] = field(default_factory=dict)
    nodes: list[RealNode] = field(default_factory=list)
    net: network.ClusterNetwork | None = None
    pki: ClusterPKI | None = None
    directory: Path = Path()
    keep: bool = False
    """Keep the nodes' directory (logs, containerd's root) after release, like the control
    plane's ``keep_workdir`` (``SIGNAL_KEEP_CLUSTER_DIR=1`` in the tests)."""
    _record: Path | None = None
    _janitor: "subprocess.Popen[bytes] | None" = None
    _janitor_pipe: int = -1
    _coredns: "subprocess.Popen[bytes] | None" = None
    _server: str = ""

    @property
    def network(self) -> network.ClusterNetwork:
        if self.net is None:
            raise RuntimeError("real nodes are not prepared")
        return self.net

    @property
    def cgroup(self) -> str:
        return f"{hoststate.CGROUP_PREFIX}{self.network.slot}"

    # -- before the API server -----------------------------------------------------------

    def prepare(self, plane: ControlPlane) -> None:
        """Take a slot (after sweeping dead clusters), create the bridge, record the host state,
        start the janitor, make the PKI and set the API server's address and flags."""
        if not 0 < len(self.shapes) <= network.MAX_NODES:
            raise ValueError(f"{len(self.shapes)} real nodes asked for: between 1 and {network.MAX_NODES} fit")
        if missing := missing_requirements():
            raise RuntimeError(
                f"real nodes cannot run on this machine, it lacks: {', '.join(missing)}; "
                "run hack/install-system-deps.sh as root (or use simulated Nodes only)"
            )
        self.keep = self.keep or plane.keep_workdir
        self.directory = nodes_directory(plane.workdir / "realnodes")
        with hoststate.locked() as state:
            for bridge in hoststate.sweep():
                log.warning("removed the host state of a killed cluster", bridge=bridge)
            taken = network.used_slots() | {int(p.stem.split("-")[1]) for p in state.glob("slot-*.json")}
            free = [k for k in range(network.MAX_SLOTS) if k not in taken]
            if not free:
                raise RuntimeError(f"all {network.MAX_SLOTS} real-node cluster slots are in use on this machine")
            self.net = network.ClusterNetwork(free[0])
            self._record = state / f"slot-{self.net.slot}.json"
            self._write_record()
            self._start_janitor()
            network.create_bridge(self.net)
        self.pki = ClusterPKI(plane.workdir / "pki")
        ca = self.pki.create_ca()
        host = self.net.host_ip
        serving = self.pki.issue(
            "apiserver", "kube-apiserver", server=True,
            ips=("127.0.0.1", host, "10.96.0.1"),
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                       f"kubernetes.default.svc.{network.CLUSTER_DOMAIN}"),
        )  # fmt: skip
        kubelet_client = self.pki.issue("apiserver-kubelet-client", APISERVER_KUBELET_CLIENT, client=True)
        plane.host = host
        plane.ca_override = ca.cert
        plane.extra_controllers = [*plane.extra_controllers, *CONTROLLERS]
        plane.apiserver_args = [
            *plane.apiserver_args,
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={ca.cert}",
            f"--kubelet-client-certificate={kubelet_client.cert}",
            f"--kubelet-client-key={kubelet_client.key}",
            f"--kubelet-certificate-authority={ca.cert}",
            "--kubelet-preferred-address-types=InternalIP",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement,NodeRestriction",
        ]

    def _write_record(self) -> None:
        assert self._record is not None
        body: dict[str, object] = {
            "owner": [os.getpid(), hoststate.start_time(os.getpid())],
            "janitor": None,
            "bridge": self.network.bridge,
            "nftTable": self.network.nft_table,
            "cgroup": self.cgroup,
            "workdir": str(self.directory),
            "removeWorkdir": not self.keep,
        }
        hoststate.write_record(self._record, body)

    def _start_janitor(self) -> None:
        read_end, write_end = os.pipe()
        os.set_inheritable(write_end, False)
        argv = [sys.executable, "-m", "localcluster.realnode.hoststate", str(self._record)]
        root = Path(__file__).resolve().parent.parent.parent
        try:
            # Not procs.popen: the janitor must outlive its owner to clean up after it, so it is
            # no descendant of the owner either (``setsid --fork``: its parent exits at once and
            # the run's watchdog, which kills the owner's descendants, leaves it alone). It
            # writes its own pid into the record.
            self._janitor = subprocess.Popen(["setsid", "--fork", *argv], stdin=read_end, close_fds=True, cwd=root)
            self._janitor.wait(10)
        finally:
            os.close(read_end)
        self._janitor_pipe = write_end

    def serving_pair_for_process_kubelet(self) -> KeyPair:
        """A serving certificate for 127.0.0.1, so the process kubelet of simulated Nodes passes
        the API server's kubelet verification too."""
        assert self.pki is not None
        return self.pki.issue("process-kubelet", "signal-process-kubelet", server=True, ips=("127.0.0.1",))

    # -- once the controllers run ---------------------------------------------------------

    async def start(self, admin: KubeClient, server: str, say: Callable[[str], None]) -> None:
        """Start CoreDNS and every node, import the node images, label the Nodes and give them
        their GPUs and RDMA, and wait until every Node is Ready."""
        assert self.pki is not None
        began = time.monotonic()
        self._server = server
        port = urlsplit(server).port
        if port is None:
            raise ValueError(f"API server address {server} names no port")
        network.guard_host(self.network, port, dns.DNS_PORT)
        await dns.install(admin, self.network)
        await admin.apply(*self._apiserver_kubelet_binding())
        say("building (or finding) the node programs, CoreDNS and the kubelet")
        static = await asyncio.to_thread(images.static_binary)
        archives = await asyncio.to_thread(images.node_images)
        kplane = await asyncio.to_thread(kplane_binary)
        await asyncio.to_thread(dns.coredns_binary)
        self.timings["builds"] = time.monotonic() - began
        self._coredns, _ = dns.start_coredns(self.directory / "coredns", self.pki, server, self.network)
        proxy_pair = self.pki.issue("kube-proxy", KUBE_PROXY_USER, client=True)
        proxy_kubeconfig = self.directory / "kube-proxy.kubeconfig"
        proxy_kubeconfig.write_text(client_kubeconfig(server, self.pki.ca.cert, proxy_pair))
        say(f"starting {len(self.shapes)} real nodes (containerd, kubelet, kube-proxy)")
        for index, shape in enumerate(self.shapes):
            node = RealNode(shape.name, index, self.network, self.directory / shape.name, f"{self.cgroup}/{shape.name}")
            self.nodes.append(node)
            node.start_holder(static, len(self.shapes))
            node.start_containerd()
        await asyncio.gather(*(self._import(archive.path) for archive in archives))
        for node in self.nodes:
            node.start_kubelet(kplane, self.pki, server)
            node.start_kube_proxy(kplane, proxy_kubeconfig)
        await asyncio.gather(*(self._register(admin, shape) for shape in self.shapes))
        self.timings["ready"] = time.monotonic() - began
        log.info("real nodes ready", **{k: round(v, 2) for k, v in self.timings.items()})

    def _apiserver_kubelet_binding(self) -> tuple[str, Obj]:
        rbac = "rbac.authorization.k8s.io"
        name = "signal:kube-apiserver-kubelet-client"
        body: Obj = {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
            "subjects": [{"apiGroup": rbac, "kind": "User", "name": APISERVER_KUBELET_CLIENT}],
        }
        return resource_path(f"{rbac}/v1", "clusterrolebindings", name=name), body

    async def _import(self, archive: Path) -> None:
        await asyncio.gather(*(asyncio.to_thread(node.import_archive, archive) for node in self.nodes))

    async def import_archive(self, archive: Path) -> float:
        """Import an OCI or Docker image archive (e.g. ``.cache/images/*.tar``) into every
        node's containerd; returns the seconds it took."""
        began = time.monotonic()
        await self._import(archive)
        return time.monotonic() - began

    async def _register(self, admin: KubeClient, shape: SimNode, timeout: float = 120.0) -> None:
        """Wait for the kubelet to register the Node, give it the shape's labels and extended
        resources (Node status capacity; the kubelet derives allocatable), wait until Ready."""
        path = resource_path("v1", "nodes", name=shape.name)
        node = next(n for n in self.nodes if n.name == shape.name)
        deadline = time.monotonic() + timeout
        labels = {k: v for k, v in shape.manifest()["metadata"]["labels"].items() if k != SIMULATED_LABEL}
        patched = False
        while True:
            node.check_running()
            current = None
            with contextlib.suppress(Exception):
                current = await admin.get(path)
            if current is not None and not patched:
                await admin.merge_patch(path, {"metadata": {"labels": labels}})
                capacity = {keys.GPU_RESOURCE: str(shape.gpus), RDMA_RESOURCE: str(shape.rdma)}
                await admin.merge_patch(path + "/status", {"status": {"capacity": capacity}})
                patched = True
            if current is not None and _ready(current) and _has(current, shape):
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name} ---\n{p.tail(15)}" for p in node.processes)
                raise RuntimeError(f"real node {shape.name} not Ready after {timeout}s:\n{logs}")
            await asyncio.sleep(0.2)

    def check_running(self) -> None:
        for node in self.nodes:
            node.check_running()

    def stop(self) -> None:
        """Stop every node process and CoreDNS and kill what the nodes' containerd started (the
        cgroup subtree). The bridge stays until :meth:`release`, so that the API server, which
        listens on it, can still shut down cleanly."""
        failures: list[BaseException] = []
        for node in reversed(self.nodes):
            try:
                node.stop_processes()
            except Exception as exc:
                failures.append(exc)
        if self._coredns is not None and self._coredns.poll() is None:
            self._coredns.terminate()
            self._coredns.wait(10)
        if self.net is not None:
            hoststate.kill_subtree(self.cgroup)
            hoststate.remove_cgroups(self.cgroup)
        if failures:
            raise failures[0]

    def release(self) -> None:
        """After the control plane stopped: remove all host state (``stop`` first if it was not
        called), the record and the nodes' directory, and dismiss the janitor."""
        if self._record is not None:
            with hoststate.locked():
                hoststate.clean(self._record)
        if self._janitor_pipe >= 0:
            with contextlib.suppress(OSError):
                os.write(self._janitor_pipe, b"stop")
            os.close(self._janitor_pipe)
            self._janitor_pipe = -1
        if not self.keep:
            shutil.rmtree(self.directory, ignore_errors=True)

    def logs(self, lines: int = 20) -> str:
        """The last lines of every node process's log."""
        return "\n".join(f"--- {n.name}/{p.name} ---\n{p.tail(lines)}" for n in self.nodes for p in n.processes)

    def pids(self) -> dict[str, int]:
        found = {f"{n.name}/{p.name}": p.process.pid for n in self.nodes for p in n.processes}
        if self._coredns is not None:
            found["coredns"] = self._coredns.pid
        return found


def _ready(node: Obj) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _has(node: Obj, shape: SimNode) -> bool:
    allocatable: dict[str, str] = node.get("status", {}).get("allocatable", {})
    return allocatable.get(keys.GPU_RESOURCE) == str(shape.gpus) and allocatable.get(RDMA_RESOURCE) == str(shape.rdma)
