"""One node's containerd (Debian's 1.6, with runc and the CNI plugins): its configuration (pure)
and the ``ctr`` calls the cluster makes against it (importing OCI archives, listing tasks).

Each node's containerd has its own root, state directory, socket, runc root, CNI configuration
and IPAM directory under the node's directory, runs in the node's namespaces (see
``localcluster.realnode.node``), and uses the locally built static pause image as the Pod
sandbox image: nothing is ever pulled. ``restrict_oom_score_adj`` is required where the
machine's bounding set lacks CAP_SYS_RESOURCE (runc otherwise fails with "can't get final
child's PID from pipe").
"""

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from localcluster.realnode.images import PAUSE_IMAGE

CNI_BIN_DIR = "/usr/lib/cni"
NAMESPACE = "k8s.io"


class ContainerdError(RuntimeError):
    """A ``ctr`` call against a node's containerd failed."""


@dataclass(frozen=True)
class ContainerdPaths:
    """Where one node's containerd keeps everything (all under ``base``)."""

    base: Path

    @property
    def config(self) -> Path:
        return self.base / "config.toml"

    @property
    def socket(self) -> Path:
        return self.base / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.base / "cni" / "net.d"

    @property
    def ipam_dir(self) -> Path:
        return self.base / "cni" / "ipam"

    @property
    def log(self) -> Path:
        return self.base / "containerd.log"


def config_toml(paths: ContainerdPaths, cgroup: str) -> str:
    """containerd's configuration (version 2) for one node; ``cgroup`` is the cgroup path
    containerd moves itself (and so its shims) into."""

    def q(value: object) -> str:
        return json.dumps(str(value))

    cri = 'plugins."io.containerd.grpc.v1.cri"'
    disabled = [f"io.containerd.snapshotter.v1.{name}" for name in ("btrfs", "zfs", "devmapper", "aufs")]
    return "\n".join(
        [
            "version = 2",
            f"root = {q(paths.base / 'root')}",
            f"state = {q(paths.base / 'state')}",
            f"disabled_plugins = {json.dumps(disabled)}",
            "[grpc]",
            f"  address = {q(paths.socket)}",
            "[ttrpc]",
            f"  address = {q(paths.base / 'containerd.sock.ttrpc')}",
            "[cgroup]",
            f"  path = {q(cgroup)}",
            '[plugins."io.containerd.internal.v1.opt"]',
            f"  path = {q(paths.base / 'opt')}",
            f"[{cri}]",
            f"  sandbox_image = {q(PAUSE_IMAGE)}",
            "  restrict_oom_score_adj = true",
            '  stream_server_address = "127.0.0.1"',
            "  disable_apparmor = true",
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f"  Root = {q(paths.base / 'runc')}",
            f"[{cri}.cni]",
            f"  bin_dir = {q(CNI_BIN_DIR)}",
            f"  conf_dir = {q(paths.cni_conf_dir)}",
            "  max_conf_num = 1",
            "",
        ]
    )


def ctr(enter: list[str], paths: ContainerdPaths, *args: str, timeout: float = 300.0) -> str:
    """Run ``ctr -n k8s.io`` against the node's containerd (``enter``: the nsenter prefix into
    the node's namespaces); returns its output."""
    argv = [*enter, "ctr", "--address", str(paths.socket), "-n", NAMESPACE, *args]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if result.returncode != 0:
        raise ContainerdError(f"ctr {' '.join(args)} against {paths.socket} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout


def import_archive(enter: list[str], paths: ContainerdPaths, archive: Path) -> None:
    """Import an OCI (or Docker) image archive into the node's ``k8s.io`` namespace, where the
    kubelet finds it (no pull)."""
    if not archive.is_file():
        raise ContainerdError(f"image archive {archive} does not exist: build it first")
    ctr(enter, paths, "images", "import", str(archive))


def running_tasks(enter: list[str], paths: ContainerdPaths) -> dict[str, str]:
    """Container id -> task status (``RUNNING``, ``STOPPED``...) of every task on the node."""
    tasks = {}
    for line in ctr(enter, paths, "tasks", "ls").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3:
            tasks[parts[0]] = parts[2]
    return tasks
