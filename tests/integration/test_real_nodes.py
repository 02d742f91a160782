"""Real nodes (localcluster.realnode): real kubelets with containerd, runc and CNI on this
machine, kube-proxy and CoreDNS, against the local API server.

One two-node cluster for the module: Nodes become Ready with GPUs, RDMA, zone and rack; a Pod
runs to Succeeded (timed); Pods on the two nodes reach each other by IP and by a headless
Service's DNS names, and the API server through the ``kubernetes`` Service; ``logs`` and
``exec`` go through the API server to the kubelet, whose API refuses anonymous and
unauthorised callers.
"""

import asyncio
import json
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from localcluster.binaries import kplane_binary
from localcluster.cluster import LocalCluster
from localcluster.controlplane import ControlPlane
from localcluster.fleet import RDMA_RESOURCE, SimNode
from localcluster.kube import KubeClient, Obj, resource_path
from localcluster.realnode.configs import KUBELET_PORT
from localcluster.realnode.images import TEST_IMAGE, oci_archive, static_binary
from localcluster.realnode.pki import KeyPair
from localcluster.realnode.pool import RealNodes
from shared import keys

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
async def real() -> AsyncIterator[LocalCluster]:
    """A local cluster with two real nodes (no Argo, no upstream CRDs)."""
    local = LocalCluster(plane=ControlPlane(), real_nodes=2, install_upstream=False, with_argo=False)
    await local.start()
    try:
        yield local
    finally:
        await local.stop()


def nodes_of(cluster: LocalCluster) -> RealNodes:
    assert cluster.realnodes is not None
    return cluster.realnodes


async def wait_for(check: Callable[[], Awaitable[object]], what: str, timeout: float = 60.0) -> object:
    """Poll ``check`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)


async def new_namespace(cluster: LocalCluster) -> str:
    name = f"rn-{uuid.uuid4().hex[:8]}"
    await cluster.create_namespace(name)

    async def has_default_account() -> bool:
        try:
            await cluster.admin.get(resource_path("v1", "serviceaccounts", name, "default"))
        except Exception:
            return False
        return True

    await wait_for(has_default_account, f"the default ServiceAccount of {name}")
    return name


def pod(name: str, node: str, args: list[str], **spec: object) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": TEST_IMAGE, "imagePullPolicy": "Never", "args": args}],
            **spec,
        },
    }


async def phase(admin: KubeClient, namespace: str, name: str) -> str:
    current = await admin.get(resource_path("v1", "pods", namespace, name))
    return str(current.get("status", {}).get("phase", ""))


def kubectl(cluster: LocalCluster, *args: str) -> str:
    binary = kplane_binary()
    argv = [str(binary), "kubectl", f"--kubeconfig={cluster.plane.admin_kubeconfig}", *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
    return result.stdout


async def test_real_nodes_are_ready_gpu_nodes_with_zone_and_rack(real: LocalCluster) -> None:
    pool = nodes_of(real)
    for shape in pool.shapes:
        node = await real.admin.get(resource_path("v1", "nodes", name=shape.name))
        status = node["status"]
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])
        assert status["allocatable"][keys.GPU_RESOURCE] == "8"
        assert status["allocatable"][RDMA_RESOURCE] == "8"
        labels = node["metadata"]["labels"]
        assert labels[keys.ZONE_LABEL] == shape.zone
        assert labels[keys.RACK_LABEL] == shape.rack
        assert status["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        assert status["nodeInfo"]["kubeletVersion"].startswith("v1.36.")
        assert {"type": "InternalIP", "address": pool.network.node_ip(pool.shapes.index(shape))} in status["addresses"]
    print(f"\nreal nodes: builds {pool.timings['builds']:.1f}s, all Ready {pool.timings['ready']:.1f}s after start")


async def test_a_pod_runs_to_succeeded_and_its_logs_come_through_the_api_server(real: LocalCluster) -> None:
    namespace = await new_namespace(real)
    began = time.monotonic()
    await real.admin.create(resource_path("v1", "pods", namespace), pod("once", "node-1", ["echo", "hello", "real"]))
    await wait_for(lambda: _is(real.admin, namespace, "once", "Succeeded"), "Pod once to succeed", 120)
    elapsed = time.monotonic() - began
    print(f"\nPod created -> Succeeded in {elapsed:.2f}s")
    assert kubectl(real, "-n", namespace, "logs", "once").strip() == "hello real"
    failing = pod("fails", "node-2", ["exit", "3"])
    await real.admin.create(resource_path("v1", "pods", namespace), failing)
    await wait_for(lambda: _is(real.admin, namespace, "fails", "Failed"), "Pod fails to fail", 120)
    status = (await real.admin.get(resource_path("v1", "pods", namespace, "fails")))["status"]
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


async def _is(admin: KubeClient, namespace: str, name: str, wanted: str) -> bool:
    return await phase(admin, namespace, name) == wanted


async def test_pods_on_two_nodes_reach_each_other_by_ip_dns_and_the_kubernetes_service(real: LocalCluster) -> None:
    namespace = await new_namespace(real)
    admin = real.admin
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "peers"},
        "spec": {"clusterIP": "None", "selector": {"app": "server"}, "ports": [{"name": "p", "port": 8080}]},
    }
    await admin.create(resource_path("v1", "services", namespace), service)
    server = pod("server", "node-1", ["serve", "8080"], hostname="server", subdomain="peers")
    await admin.create(resource_path("v1", "pods", namespace), server)
    await admin.create(resource_path("v1", "pods", namespace), pod("client", "node-2", ["sleep", "600"]))
    for name in ("server", "client"):
        await wait_for(lambda name=name: _is(admin, namespace, name, "Running"), f"Pod {name} running", 120)  # type: ignore[misc]
    server_ip = (await admin.get(resource_path("v1", "pods", namespace, "server")))["status"]["podIP"]
    client_ip = (await admin.get(resource_path("v1", "pods", namespace, "client")))["status"]["podIP"]
    pool = nodes_of(real)
    assert server_ip.startswith(pool.network.node_pod_cidr(0).rsplit(".", 2)[0])
    assert client_ip.startswith(pool.network.node_pod_cidr(1).rsplit(".", 2)[0])

    def exec_in_client(*args: str) -> str:
        return kubectl(real, "-n", namespace, "exec", "client", "--", "/nettest", *args)

    # By IP, across nodes: the server sees the client's own Pod IP (no NAT between nodes).
    answer = exec_in_client("dial", f"{server_ip}:8080").split()
    assert answer[0] == "server"
    assert answer[1].rsplit(":", 1)[0] == client_ip
    # By the headless Service's DNS names (as the MPI operator's hostfile uses them).
    hostname = f"server.peers.{namespace}.svc.cluster.local"
    assert exec_in_client("lookup", hostname).split() == [server_ip]
    assert exec_in_client("dial", f"{hostname}:8080").split()[0] == "server"
    assert exec_in_client("lookup", f"peers.{namespace}.svc.cluster.local").split() == [server_ip]
    # The API server through the kubernetes Service (kube-proxy), by name and by cluster IP.
    assert exec_in_client("lookup", "kubernetes.default.svc.cluster.local").split() == ["10.96.0.1"]
    assert exec_in_client("connect", "kubernetes.default.svc.cluster.local:443").startswith("connected")
    # In-cluster configuration: the Service's address from the environment, the CA and the
    # Pod's own ServiceAccount token the kubelet mounted; authenticated (403, not 401).
    status, _, body = exec_in_client("apiget", "/version").partition("\n")
    assert status == "200"
    assert json.loads(body)["gitVersion"].startswith("v1.36.")
    status, _, body = exec_in_client("apiget", f"/api/v1/namespaces/{namespace}/secrets").partition("\n")
    assert status == "403"
    assert f"system:serviceaccount:{namespace}:default" in body


async def test_kubelet_api_refuses_anonymous_and_unauthorised_callers(real: LocalCluster) -> None:
    pool = nodes_of(real)
    assert pool.pki is not None
    url = f"https://{pool.network.node_ip(0)}:{KUBELET_PORT}/pods"

    async def get(pair: KeyPair | None) -> httpx.Response:
        context = ssl.create_default_context(cafile=str(pool.pki.ca.cert))  # type: ignore[union-attr]
        if pair is not None:
            context.load_cert_chain(str(pair.cert), str(pair.key))
        async with httpx.AsyncClient(verify=context, timeout=10) as client:
            return await client.get(url)

    anonymous = await get(None)
    assert anonymous.status_code == 401, anonymous.text
    stranger = pool.pki.issue(f"stranger-{uuid.uuid4().hex[:6]}", "signal:stranger", client=True)
    refused = await get(stranger)
    assert refused.status_code == 403, refused.text
    apiserver = pool.pki.directory / "apiserver-kubelet-client"
    allowed = await get(KeyPair(apiserver.with_suffix(".crt"), apiserver.with_suffix(".key")))
    assert allowed.status_code == 200, allowed.text
    assert "items" in allowed.json()


async def test_exec_goes_through_the_api_server_to_the_kubelet(real: LocalCluster) -> None:
    namespace = await new_namespace(real)
    await real.admin.create(resource_path("v1", "pods", namespace), pod("sleeper", "node-2", ["sleep", "600"]))
    await wait_for(lambda: _is(real.admin, namespace, "sleeper", "Running"), "Pod sleeper running", 120)
    out = kubectl(real, "-n", namespace, "exec", "sleeper", "--", "/nettest", "hostname")
    assert out.strip() == "sleeper"


async def test_node_processes_use_modest_memory(real: LocalCluster) -> None:
    pool = nodes_of(real)
    for node in pool.nodes:
        rss = {p.name: _rss_mib(p.process.pid) for p in node.processes if p.name in ("containerd", "kubelet")}
        print(f"\n{node.name}: RSS " + ", ".join(f"{k} {v:.0f} MiB" for k, v in rss.items()))
        assert sum(rss.values()) < 512


def _rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` (the process the wrapper exec'd into) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


async def test_an_imported_archive_runs_on_every_node(real: LocalCluster, tmp_path: Path) -> None:
    """import_archive loads an OCI archive into every node's containerd (no registry)."""
    name = f"localcluster.projectsignal.dev/imported-{uuid.uuid4().hex[:6]}:v1"
    archive = oci_archive(name, {"tool": (static_binary().read_bytes(), 0o755)}, ["/tool"], tmp_path / "i.tar")
    seconds = await nodes_of(real).import_archive(archive)
    print(f"\nimported a {archive.stat().st_size / 2**20:.1f} MiB archive into 2 nodes in {seconds:.2f}s")
    namespace = await new_namespace(real)
    for node in ("node-1", "node-2"):
        body = pod(f"imported-{node}", node, ["echo", "from", node])
        body["spec"]["containers"][0]["image"] = name
        await real.admin.create(resource_path("v1", "pods", namespace), body)
    for node in ("node-1", "node-2"):
        await wait_for(lambda node=node: _is(real.admin, namespace, f"imported-{node}", "Succeeded"), node, 120)  # type: ignore[misc]
        assert kubectl(real, "-n", namespace, "logs", f"imported-{node}").strip() == f"from {node}"


async def test_simulated_nodes_still_run_beside_real_ones(real: LocalCluster) -> None:
    """The process kubelet keeps serving simulated Nodes, and the API server (which now verifies
    every kubelet's certificate against the cluster CA) still reaches it for ``pods/exec``."""
    namespace = await new_namespace(real)
    assert real.kubelet is not None
    node = SimNode("sim-1").manifest()
    node["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": real.kubelet.api_port}}
    real.simulated.add("sim-1")
    await real.admin.create(resource_path("v1", "nodes"), node)
    body = pod("simulated", "sim-1", [])
    body["spec"]["containers"][0] = {"name": "main", "image": "busybox", "command": ["sleep", "300"]}
    await real.admin.create(resource_path("v1", "pods", namespace), body)
    await wait_for(lambda: _is(real.admin, namespace, "simulated", "Running"), "the simulated Pod running", 60)
    binary = kplane_binary()
    argv = [str(binary), "kubectl", f"--kubeconfig={real.plane.admin_kubeconfig}", "-n", namespace]
    # The process kubelet delivers the signal, then refuses the stream (it has none to attach).
    command = [*argv, "exec", "simulated", "--", "/bin/sh", "-c", "kill -15 1"]
    # Off the event loop: the process kubelet answering this exec runs on it.
    answer = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60, check=False)
    assert "x509" not in answer.stderr
    await wait_for(
        lambda: _is(real.admin, namespace, "simulated", "Failed"), f"the signalled Pod ({answer.stderr})", 60
    )
    await real.remove_node("sim-1")


async def test_pods_reach_only_the_api_server_and_dns_on_the_host(real: LocalCluster) -> None:
    """The host's bridge address is the Pods' way to the API server and CoreDNS, and nothing
    else: a service listening on the host (on all addresses, as many do) stays out of reach."""
    pool = nodes_of(real)
    namespace = await new_namespace(real)
    await real.admin.create(resource_path("v1", "pods", namespace), pod("prober", "node-1", ["sleep", "600"]))
    await wait_for(lambda: _is(real.admin, namespace, "prober", "Running"), "Pod prober running", 120)
    with socket.create_server(("0.0.0.0", 0)) as listener:
        port = listener.getsockname()[1]
        target = f"{pool.network.host_ip}:{port}"
        argv = [str(kplane_binary()), "kubectl", f"--kubeconfig={real.plane.admin_kubeconfig}", "-n", namespace]
        command = [*argv, "exec", "prober", "--", "/nettest", "connect", target, "3"]
        answer = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=60, check=False
        )
    assert answer.returncode != 0, f"a Pod reached a host service at {target}: {answer.stdout}"
    assert "connect" in answer.stderr
    assert kubectl(
        real,
        "-n",
        namespace,
        "exec",
        "prober",
        "--",
        "/nettest",
        "connect",
        f"{pool.network.host_ip}:{real.plane.apiserver_port}",
        "5",
    ).startswith("connected")
