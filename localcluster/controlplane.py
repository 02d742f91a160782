"""Starts and stops etcd, kube-apiserver, kube-controller-manager and kube-scheduler
as local processes of the kplane binary, all bound to 127.0.0.1 (with real nodes, the API
server binds their bridge's host address instead: see ``localcluster.realnode``).

Authentication: a static token file (an admin in system:masters and a few named users)
and real ServiceAccount tokens (TokenRequest), authorised by RBAC. Logs of every
component are kept in the work directory. Used by the pytest fixtures and the demo.
"""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx
import structlog

from localcluster import procs
from localcluster.binaries import kplane_binary

log = structlog.get_logger("localcluster")

# Named users in the static token file: name -> groups.
KUBELET_NODE = "signal-kubelet-node"
KUBELET_USER = f"system:node:{KUBELET_NODE}"
NAMED_USERS: dict[str, tuple[str, ...]] = {
    "alice": ("signal:operators",),
    "bob": ("signal:viewers",),
    "carol": (),
    # A kubelet's identity for the Node of that name (Node authorizer + NodeRestriction), so
    # tests can act as a compromised Node's own credentials (issue 12).
    KUBELET_USER: ("system:nodes",),
}
# root-ca-certificate-publisher-controller publishes the kube-root-ca.crt ConfigMap in every
# namespace: the ca.crt of projected ServiceAccount volumes (in-cluster config of Pods).
CONTROLLERS = (
    "garbage-collector-controller,namespace-controller,serviceaccount-controller,job-controller,"
    "root-ca-certificate-publisher-controller"
)


class ControlPlaneError(RuntimeError):
    """A component failed to start or stopped unexpectedly."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Component:
    name: str
    args: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, binary: Path, env: dict[str, str]) -> None:
        with self.log_path.open("ab") as handle:
            self.process = procs.popen(
                [str(binary), self.name, *self.args], stdout=handle, stderr=subprocess.STDOUT, env=env
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


@dataclass
class ControlPlane:
    """A running local control plane. Use as a context manager or call start()/stop()."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="signal-kplane-")))
    with_scheduler: bool = True
    keep_workdir: bool = False
    binary: Path | None = None
    """The kplane binary; default: the cached build (built on first use)."""
    admin_token: str = field(default_factory=lambda: secrets.token_hex(16))
    user_tokens: dict[str, str] = field(default_factory=dict)
    components: list[Component] = field(default_factory=list)
    apiserver_port: int = 0
    started_seconds: float = 0.0
    host: str = "127.0.0.1"
    """The address the API server binds and advertises (real nodes: their bridge's host address,
    see ``localcluster.realnode``)."""
    apiserver_args: list[str] = field(default_factory=list)
    """Extra kube-apiserver flags (``--name=value``); each replaces the default flag of that name."""
    extra_controllers: list[str] = field(default_factory=list)
    """kube-controller-manager controllers besides ``CONTROLLERS``."""
    ca_override: Path | None = None
    """The CA that signed the API server's certificate, when it is not self-signed."""
    _binary: Path = field(default=Path(), repr=False)
    _env: dict[str, str] = field(default_factory=dict, repr=False)
    _began: float = field(default=0.0, repr=False)
    _record: procs.RunRecord | None = field(default=None, repr=False)

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.apiserver_port}"

    @property
    def ca_file(self) -> Path:
        return self.ca_override or self.workdir / "certs" / "apiserver.crt"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def __enter__(self) -> "ControlPlane":
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- start -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start everything. Install CRDs between start_api() and start_controllers() instead
        when the garbage collector must know them from its first sync."""
        self.start_api()
        self.start_controllers()

    def start_api(self) -> None:
        """Start etcd and kube-apiserver and wait until the API server is ready."""
        self._binary = binary = self.binary or kplane_binary()
        self._began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._record is None:
            # Cleans up what killed runs left behind, and watches this one (localcluster/procs.py).
            self._record = procs.RunRecord.open(self.workdir, self.keep_workdir)
        (self.workdir / "certs").mkdir(exist_ok=True)
        env = self._env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        self._write_credentials()
        etcd_port, peer_port = free_port(), free_port()
        self.apiserver_port = free_port()
        etcd = self._component(
            "etcd",
            [
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--max-request-bytes=10485760",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )
        etcd.start(binary, env)
        self._wait_http(f"http://127.0.0.1:{etcd_port}/health", etcd, verify=False)
        apiserver = self._component("kube-apiserver", self._apiserver_args(etcd_port))
        apiserver.start(binary, env)
        self._wait_http(f"{self.server}/readyz", apiserver, verify=False, token=self.admin_token)
        self._write_kubeconfig(self.admin_kubeconfig, self.admin_token)

    def start_controllers(self) -> None:
        """Start kube-controller-manager (GC, namespaces, ServiceAccounts, Jobs, kube-root-ca.crt)
        and the scheduler."""
        binary, env = self._binary, self._env
        common = [
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--authentication-kubeconfig={self.admin_kubeconfig}",
            f"--authorization-kubeconfig={self.admin_kubeconfig}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "-v=1",
        ]
        kcm = self._component(
            "kube-controller-manager",
            [
                *common,
                f"--secure-port={free_port()}",
                f"--controllers={','.join([CONTROLLERS, *self.extra_controllers])}",
                f"--root-ca-file={self.ca_file}",
                "--concurrent-gc-syncs=5",
                f"--cert-dir={self.workdir / 'certs-kcm'}",
            ],
        )
        kcm.start(binary, env)
        if self.with_scheduler:
            scheduler = self._component("kube-scheduler", [*common, f"--secure-port={free_port()}"])
            scheduler.start(binary, env)
        self.started_seconds = time.monotonic() - self._began
        log.info(
            "control plane started",
            server=self.server,
            seconds=round(self.started_seconds, 2),
            workdir=str(self.workdir),
        )

    def _component(self, name: str, args: Sequence[str]) -> Component:
        component = Component(name, list(args), self.workdir / f"{name}.log")
        self.components.append(component)
        return component

    def _apiserver_args(self, etcd_port: int) -> list[str]:
        args = [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--bind-address={self.host}",
            f"--advertise-address={self.host}",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.workdir / 'certs'}",
            # Node: kubelets (system:node:<name> in system:nodes) as on a real cluster, with
            # NodeRestriction below limiting them to their own Node.
            "--authorization-mode=Node,RBAC",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.workdir / 'sa.pub'}",
            f"--service-account-signing-key-file={self.workdir / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            # Simulated Nodes' host names do not resolve; their InternalIP is 127.0.0.1.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--allow-privileged=true",
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement,NodeRestriction",
            # No node-lifecycle controller runs, so nothing would lift the not-ready taint.
            "--disable-admission-plugins=TaintNodesByCondition",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            "-v=1",
        ]
        overridden = {arg.split("=", 1)[0] for arg in self.apiserver_args}
        return [arg for arg in args if arg.split("=", 1)[0] not in overridden] + self.apiserver_args

    def _write_credentials(self) -> None:
        key, pub = self.workdir / "sa.key", self.workdir / "sa.pub"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
            subprocess.run(
                ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
                check=True,
                capture_output=True,
            )
        rows = [f'{self.admin_token},signal-admin,uid-admin,"system:masters"']
        for user, groups in NAMED_USERS.items():
            token = self.user_tokens.setdefault(user, secrets.token_hex(16))
            rows.append(f'{token},{user},uid-{user},"{",".join(groups)}"')
        tokens = self.workdir / "tokens.csv"
        tokens.write_text("\n".join(rows) + "\n")
        tokens.chmod(0o600)

    def _write_kubeconfig(self, path: Path, token: str, namespace: str = "default") -> None:
        path.write_text(kubeconfig_text(self.server, self.ca_file, token, namespace))
        path.chmod(0o600)

    def _wait_http(
        self,
        url: str,
        component: Component,
        *,
        verify: bool,
        token: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        deadline = time.monotonic() + timeout
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        last = ""
        while time.monotonic() < deadline:
            if not component.running():
                raise ControlPlaneError(f"{component.name} exited during start-up:\n{component.tail()}")
            try:
                response = httpx.get(url, verify=verify, headers=headers, timeout=2.0)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}: {response.text[:300]}"
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise ControlPlaneError(f"{component.name} not ready after {timeout}s ({last}):\n{component.tail()}")

    # -- state -----------------------------------------------------------------------------

    def check_running(self) -> None:
        """Raise if any component has exited."""
        for component in self.components:
            if not component.running():
                raise ControlPlaneError(f"{component.name} is not running:\n{component.tail()}")

    def logs(self, lines: int = 40) -> str:
        """The last lines of every component's log."""
        return "\n".join(f"--- {c.name} ({c.log_path}) ---\n{c.tail(lines)}" for c in self.components)

    def _apiserver(self) -> Component:
        return next(c for c in self.components if c.name == "kube-apiserver")

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (etcd and its data stay): clients see refused connections
        and dropped watches, as in an API server outage or upgrade."""
        self._apiserver().stop()

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same port, certificates and etcd, and wait until
        it is ready."""
        apiserver = self._apiserver()
        if apiserver.running():
            return
        apiserver.start(self._binary, self._env)
        self._wait_http(f"{self.server}/readyz", apiserver, verify=False, token=self.admin_token)

    def pids(self) -> dict[str, int]:
        return {c.name: c.process.pid for c in self.components if c.process is not None}

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self._record is not None:
            self._record.close()
            self._record = None


def kubeconfig_text(server: str, ca_file: Path, token: str, namespace: str = "default") -> str:
    """A kubeconfig for one bearer token against ``server``."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca_file}\n"
        f"users:\n- name: user\n  user:\n    token: {token}\n"
        f"contexts:\n- name: local\n  context:\n    cluster: local\n    user: user\n    namespace: {namespace}\n"
        "current-context: local\n"
    )
