"""One real node: a holder process owning the node's private mount and network namespaces, and
in them the node's containerd, kubelet and kube-proxy.

The holder (``unshare --mount --net``, then the static program as ``pause``) mounts fresh tmpfs
over ``/run``, ``/var/lib`` and ``/var/log`` in the node's mount namespace, so what containerd
1.6 and the kubelet write to fixed host paths (``/run/containerd``, ``/run/netns/cni-*``,
``/var/lib/cni``, ``/var/log/containers``) and every mount the kubelet makes stay private to the
node and vanish with its last process. Each process joins the node's cgroup (its own subtree of
the cluster's, in every hierarchy) before it runs, so :mod:`localcluster.realnode.hoststate`
finds and kills every process of the node, containerd's shims and the containers included.
Every process is started with :func:`localcluster.procs.popen` (it dies with its starter).
"""

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from localcluster import procs
from localcluster.realnode import configs, containerd, hoststate, network
from localcluster.realnode.pki import ClusterPKI, client_kubeconfig

PRIVATE_MOUNTS = ("/run", "/var/lib", "/var/log")
# Joins the cgroups named in $SIGNAL_CGROUP_PROCS (cgroup.procs files), then runs its arguments.
_JOIN = 'for f in $SIGNAL_CGROUP_PROCS; do echo $$ > "$f"; done; exec "$@"'


class NodeError(RuntimeError):
    """A node process failed to start or stopped."""


def create_cgroup(relative: str) -> None:
    """Create ``relative`` (and its parents) in every hierarchy; in cpuset, copy ``cpuset.cpus``
    and ``cpuset.mems`` down from the parent at every level (a v1 cpuset without them takes no
    process)."""
    for hierarchy in hoststate.hierarchies():
        current = hierarchy
        for part in Path(relative).parts:
            parent, current = current, current / part
            current.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                source, target = parent / name, current / name
                if source.exists() and not target.read_text().strip():
                    target.write_text(source.read_text().strip())


@dataclass
class NodeProcess:
    name: str
    process: "subprocess.Popen[bytes]"
    log_path: Path

    def running(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


@dataclass
class RealNode:
    """Node ``index`` named ``name`` of a cluster; ``start`` after the cluster's bridge exists."""

    name: str
    index: int
    net: network.ClusterNetwork
    directory: Path
    cgroup: str
    """This node's cgroup subtree (relative), under the cluster's."""
    processes: list[NodeProcess] = field(default_factory=list)
    holder_pid: int = 0

    @property
    def ip(self) -> str:
        return self.net.node_ip(index=self.index)

    @property
    def runtime(self) -> containerd.ContainerdPaths:
        return containerd.ContainerdPaths(self.directory / "containerd")

    def enter(self) -> list[str]:
        """The nsenter prefix that runs a command in this node's mount and network namespaces."""
        return ["nsenter", f"--target={self.holder_pid}", "--mount", "--net", "--"]

    def _spawn(self, name: str, argv: list[str], cgroup: str, *, enter: bool = True) -> NodeProcess:
        create_cgroup(cgroup)
        procs_files = " ".join(str(d / "cgroup.procs") for d in hoststate.cgroup_dirs(cgroup))
        log_path = self.directory / f"{name}.log"
        command = ["sh", "-c", _JOIN, "sh", *(self.enter() if enter else []), *argv]
        with log_path.open("ab") as handle:
            process = procs.popen(
                command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={
                    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "SIGNAL_CGROUP_PROCS": procs_files,
                },
            )
        started = NodeProcess(name, process, log_path)
        self.processes.append(started)
        return started

    def start_holder(self, static_binary: Path, node_count: int) -> None:
        """Create the node's namespaces (held by the static program as ``pause``) and connect
        its network."""
        self.directory.mkdir(parents=True, exist_ok=True)
        mounts = " && ".join(f"mount -t tmpfs -o mode=755 tmpfs {path}" for path in PRIVATE_MOUNTS)
        script = f'{mounts} && exec "$0" pause'
        argv = ["unshare", "--mount", "--net", "--propagation", "private", "--", "sh", "-c", script, str(static_binary)]
        holder = self._spawn("holder", argv, f"{self.cgroup}/system", enter=False)
        deadline = time.monotonic() + 10
        while not self._holder_ready(holder):
            if not holder.running() or time.monotonic() > deadline:
                raise NodeError(f"node {self.name}: the namespace holder did not start:\n{holder.tail()}")
            time.sleep(0.02)
        network.attach_node(self.net, self.index, self.holder_pid, node_count)

    def _holder_ready(self, holder: NodeProcess) -> bool:
        """True once the holder runs the static program as ``pause`` (each step before it
        ``exec``s, so the pid stays the same): its namespaces and mounts are made."""
        try:
            ready = Path(f"/proc/{holder.process.pid}/exe").resolve().name.startswith("signal-static")
        except OSError:
            return False
        if ready:
            self.holder_pid = holder.process.pid
        return ready

    def start_containerd(self) -> NodeProcess:
        paths = self.runtime
        for directory in (paths.base, paths.cni_conf_dir, paths.ipam_dir):
            directory.mkdir(parents=True, exist_ok=True)
        (paths.cni_conf_dir / "10-signal.conflist").write_text(network.cni_config(self.net, self.index, paths.ipam_dir))
        system = f"{self.cgroup}/system"
        paths.config.write_text(containerd.config_toml(paths, "/" + system))
        process = self._spawn("containerd", ["containerd", "--config", str(paths.config)], system)
        deadline = time.monotonic() + 30
        while not paths.socket.exists():
            if not process.running() or time.monotonic() > deadline:
                raise NodeError(f"node {self.name}: containerd did not start:\n{process.tail()}")
            time.sleep(0.05)
        return process

    def import_archive(self, archive: Path) -> None:
        containerd.import_archive(self.enter(), self.runtime, archive)

    def start_kubelet(self, kplane: Path, pki: ClusterPKI, server: str) -> NodeProcess:
        """Issue the kubelet's certificates and start it (it registers its Node)."""
        root = self.directory / "kubelet"
        root.mkdir(parents=True, exist_ok=True)
        client = pki.issue(
            f"kubelet-{self.name}", f"system:node:{self.name}", organizations=("system:nodes",), client=True
        )
        serving = pki.issue(
            f"kubelet-{self.name}-serving",
            f"system:node:{self.name}",
            server=True,
            ips=(self.ip,),
            dns_names=(self.name,),
        )
        files = configs.KubeletFiles(
            kubeconfig=root / "kubeconfig",
            client_ca=pki.ca.cert,
            serving_cert=serving.cert,
            serving_key=serving.key,
            runtime_socket=self.runtime.socket,
            root_dir=root,
        )
        files.kubeconfig.write_text(client_kubeconfig(server, pki.ca.cert, client))
        config = root / "config.json"
        cgroup_root = f"/{self.cgroup}/pods"
        create_cgroup(cgroup_root.lstrip("/"))
        config.write_text(configs.kubelet_config(files, self.ip, cgroup_root))
        argv = [
            str(kplane), "kubelet",
            f"--config={config}",
            f"--kubeconfig={files.kubeconfig}",
            f"--root-dir={root}",
            f"--cert-dir={root / 'pki'}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.ip}",
            "--v=1",
        ]  # fmt: skip
        return self._spawn("kubelet", argv, f"{self.cgroup}/system")

    def start_kube_proxy(self, kplane: Path, kubeconfig: Path) -> NodeProcess:
        config = self.directory / "kube-proxy.json"
        config.write_text(configs.kube_proxy_config(kubeconfig, self.name, self.net.pod_cidr))
        argv = [str(kplane), "kube-proxy", f"--config={config}", "--v=1"]
        return self._spawn("kube-proxy", argv, f"{self.cgroup}/system")

    def check_running(self) -> None:
        for process in self.processes:
            if not process.running():
                raise NodeError(f"node {self.name}: {process.name} is not running:\n{process.tail()}")

    def stop_processes(self, timeout: float = 10.0) -> None:
        """SIGTERM kube-proxy, the kubelet and containerd (newest first), then the holder."""
        for process in reversed(self.processes):
            if process.running():
                process.process.terminate()
                try:
                    process.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.process.kill()
                    process.process.wait(timeout)
