"""Cluster DNS for real nodes: CoreDNS (built by ``localcluster/coredns``) as a process on the
host's bridge address, its own identity (a client certificate for ``signal:coredns``) with a
ClusterRole that reads only what its ``kubernetes`` plugin watches, and the ``kube-dns``
Service at the kubelets' ``clusterDNS`` address, whose EndpointSlice points at CoreDNS, so
Pods resolve Service and headless-Service names (``<pod>.<service>.<ns>.svc.cluster.local``).
"""

import subprocess
import time
from pathlib import Path

import httpx

from localcluster import procs
from localcluster.binaries import BuildError
from localcluster.controlplane import free_port
from localcluster.kube import KubeClient, Obj, resource_path
from localcluster.realnode import configs
from localcluster.realnode.network import DNS_SERVICE_IP, ClusterNetwork
from localcluster.realnode.pki import COREDNS_USER, ClusterPKI, client_kubeconfig

BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "coredns" / "build.sh"
DNS_PORT = 53


def coredns_binary() -> Path:
    """CoreDNS, built and cached by ``localcluster/coredns/build.sh`` on first use."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"building CoreDNS failed (exit {result.returncode}); run {BUILD_SCRIPT} to see why:\n"
            + result.stderr[-3000:]
        )
    return Path(result.stdout.strip().splitlines()[-1])


def rbac_objects() -> list[tuple[str, Obj]]:
    """(path, object) of CoreDNS's ClusterRole and its binding to ``signal:coredns``."""
    rbac = "rbac.authorization.k8s.io"
    role: Obj = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "signal:coredns"},
        "rules": [
            {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    }
    binding: Obj = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "signal:coredns"},
        "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "signal:coredns"},
        "subjects": [{"apiGroup": rbac, "kind": "User", "name": COREDNS_USER}],
    }
    return [
        (resource_path(f"{rbac}/v1", "clusterroles", name="signal:coredns"), role),
        (resource_path(f"{rbac}/v1", "clusterrolebindings", name="signal:coredns"), binding),
    ]


def service_objects(net: ClusterNetwork) -> list[tuple[str, Obj]]:
    """(path, object) of the selector-less ``kube-system/kube-dns`` Service and its EndpointSlice."""
    ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
    service: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system"},
        "spec": {
            "clusterIP": DNS_SERVICE_IP,
            "ports": [{"name": n, "protocol": p, "port": DNS_PORT, "targetPort": DNS_PORT} for n, p in ports],
        },
    }
    endpoints: Obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kube-dns-coredns",
            "namespace": "kube-system",
            "labels": {"kubernetes.io/service-name": "kube-dns"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [net.host_ip], "conditions": {"ready": True}}],
        "ports": [{"name": n, "protocol": p, "port": DNS_PORT} for n, p in ports],
    }
    return [
        (resource_path("v1", "services", "kube-system", "kube-dns"), service),
        (resource_path("discovery.k8s.io/v1", "endpointslices", "kube-system", "kube-dns-coredns"), endpoints),
    ]


async def install(admin: KubeClient, net: ClusterNetwork) -> None:
    """Apply CoreDNS's RBAC and the kube-dns Service (repeatable)."""
    for path, body in [*rbac_objects(), *service_objects(net)]:
        await admin.apply(path, body)


def start_coredns(
    workdir: Path, pki: ClusterPKI, server: str, net: ClusterNetwork
) -> "tuple[subprocess.Popen[bytes], Path]":
    """Start CoreDNS on the bridge's host address (port 53) and wait until it is ready; returns
    the process and its log file."""
    workdir.mkdir(parents=True, exist_ok=True)
    pair = pki.issue("coredns", COREDNS_USER, client=True)
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(client_kubeconfig(server, pki.ca.cert, pair))
    health, ready = free_port(), free_port()
    corefile = workdir / "Corefile"
    corefile.write_text(configs.corefile(net.host_ip, DNS_PORT, kubeconfig, health, ready))
    log_path = workdir / "coredns.log"
    with log_path.open("ab") as handle:
        process = procs.popen(
            [str(coredns_binary()), "-conf", str(corefile)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
        )
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"CoreDNS exited during start-up:\n{log_path.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"http://{net.host_ip}:{ready}/ready", timeout=2).status_code == 200:
                return process, log_path
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"CoreDNS not ready after 60s:\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)
