"""The pure parts of real nodes: addressing, the CNI, containerd, kubelet and kube-proxy
configurations, and the OCI archives written for the pause and test images."""

import hashlib
import ipaddress
import json
import shutil
import tarfile
import tempfile
import tomllib
from pathlib import Path

import pytest

from localcluster.realnode import configs, containerd, network, pool
from localcluster.realnode.images import PAUSE_IMAGE, oci_archive
from localcluster.realnode.pki import ClusterPKI


@pytest.mark.parametrize(
    ("slot", "index", "host", "node", "pods"),
    [
        pytest.param(0, 0, "10.250.0.1", "10.250.0.2", "10.251.0.0/24", id="first-slot-first-node"),
        pytest.param(0, 7, "10.250.0.1", "10.250.0.9", "10.251.7.0/24", id="first-slot-last-node"),
        pytest.param(3, 2, "10.250.3.1", "10.250.3.4", "10.251.26.0/24", id="fourth-slot"),
        pytest.param(31, 7, "10.250.31.1", "10.250.31.9", "10.251.255.0/24", id="last-slot-last-node"),
    ],
)
def test_addresses_of_a_slot_and_node(slot: int, index: int, host: str, node: str, pods: str) -> None:
    net = network.ClusterNetwork(slot)
    assert net.host_ip == host
    assert net.node_ip(index) == node
    assert net.node_pod_cidr(index) == pods
    assert ipaddress.ip_network(pods).subnet_of(ipaddress.ip_network(net.pod_cidr))  # type: ignore[arg-type]


def test_no_two_nodes_of_any_clusters_share_a_pod_range() -> None:
    ranges = [
        ipaddress.ip_network(network.ClusterNetwork(slot).node_pod_cidr(index))
        for slot in range(network.MAX_SLOTS)
        for index in range(network.MAX_NODES)
    ]
    assert len(set(ranges)) == len(ranges)
    clusters = [ipaddress.ip_network(network.ClusterNetwork(slot).pod_cidr) for slot in range(network.MAX_SLOTS)]
    assert not any(a.overlaps(b) for i, a in enumerate(clusters) for b in clusters[i + 1 :])


@pytest.mark.parametrize(
    ("slot", "index"),
    [
        pytest.param(-1, 0, id="negative-slot"),
        pytest.param(32, 0, id="slot-too-big"),
        pytest.param(0, 8, id="node-too-big"),
    ],
)
def test_out_of_range_addresses_are_refused(slot: int, index: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        network.ClusterNetwork(slot).node_ip(index)


def test_the_host_guard_lets_pods_reach_only_the_api_server_and_dns() -> None:
    rules = network.guard_rules(network.ClusterNetwork(4), 6443, 53).splitlines()
    assert "table inet signal_br4 {" in rules
    assert '    iifname "signal-br4" ip daddr 10.250.4.1 tcp dport 6443 accept' in rules
    assert '    iifname "signal-br4" ip daddr 10.250.4.1 meta l4proto { tcp, udp } th dport 53 accept' in rules
    assert rules[-3] == '    iifname "signal-br4" drop'  # the last rule: everything else from the bridge


def test_cni_config_is_a_bridge_with_the_nodes_range_kept_in_its_directory(tmp_path: Path) -> None:
    config = json.loads(network.cni_config(network.ClusterNetwork(2), 1, tmp_path))
    (bridge,) = config["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["isGateway"] is True
    assert bridge["ipMasq"] is False  # Pods keep their own address across nodes
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.251.17.0/24"}]]
    assert bridge["ipam"]["dataDir"] == str(tmp_path)


def test_containerd_config_keeps_everything_under_the_node_and_pulls_nothing(tmp_path: Path) -> None:
    paths = containerd.ContainerdPaths(tmp_path)
    config = tomllib.loads(containerd.config_toml(paths, "/signal-realnodes-0/node-1/system"))
    assert config["root"].startswith(str(tmp_path))
    assert config["state"].startswith(str(tmp_path))
    assert config["grpc"]["address"] == str(paths.socket)
    assert config["cgroup"]["path"] == "/signal-realnodes-0/node-1/system"
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == PAUSE_IMAGE
    assert cri["restrict_oom_score_adj"] is True
    assert cri["cni"]["conf_dir"] == str(paths.cni_conf_dir)
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["options"]["Root"].startswith(str(tmp_path))
    assert runc["options"]["SystemdCgroup"] is False


def test_kubelet_config_never_allows_anonymous_access(tmp_path: Path) -> None:
    files = configs.KubeletFiles(
        kubeconfig=tmp_path / "kubeconfig",
        client_ca=tmp_path / "ca.crt",
        serving_cert=tmp_path / "s.crt",
        serving_key=tmp_path / "s.key",
        runtime_socket=tmp_path / "containerd.sock",
        root_dir=tmp_path,
    )
    config = json.loads(configs.kubelet_config(files, "10.250.0.2", "/signal-realnodes-0/node-1/pods"))
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == str(tmp_path / "ca.crt")
    assert config["authorization"]["mode"] == "Webhook"
    assert config["readOnlyPort"] == 0
    assert config["failCgroupV1"] is False
    assert config["cgroupRoot"] == "/signal-realnodes-0/node-1/pods"
    assert config["clusterDNS"] == [network.DNS_SERVICE_IP]
    assert config["podLogsDir"].startswith(str(tmp_path))
    assert config["volumePluginDir"].startswith(str(tmp_path))


def test_kube_proxy_leaves_the_machine_wide_conntrack_table_alone(tmp_path: Path) -> None:
    config = json.loads(configs.kube_proxy_config(tmp_path / "kubeconfig", "node-1", "10.251.0.0/21"))
    assert config["mode"] == "iptables"
    assert config["clusterCIDR"] == "10.251.0.0/21"
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["conntrack"]["min"] == 0


def test_oci_archive_is_reproducible_and_content_addressed(tmp_path: Path) -> None:
    files = {"pause": (b"\x7fELF-not-really", 0o755)}
    first = oci_archive(PAUSE_IMAGE, files, ["/pause"], tmp_path / "a.tar").read_bytes()
    second = oci_archive(PAUSE_IMAGE, files, ["/pause"], tmp_path / "b.tar").read_bytes()
    assert first == second
    with tarfile.open(tmp_path / "a.tar") as tar:
        names = tar.getnames()
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        for name in names:
            if name.startswith("blobs/sha256/"):
                data = tar.extractfile(name).read()  # type: ignore[union-attr]
                assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    (manifest,) = index["manifests"]
    assert manifest["annotations"]["io.containerd.image.name"] == PAUSE_IMAGE
    assert manifest["platform"] == {"architecture": "amd64", "os": "linux"}
    assert "oci-layout" in names


def test_a_server_certificate_must_name_its_addresses(tmp_path: Path) -> None:
    pki = ClusterPKI(tmp_path)
    with pytest.raises(ValueError, match="at least one IP address or DNS name"):
        pki.issue("kubelet", "system:node:n", server=True)
    with pytest.raises(ValueError, match="client, a server or both"):
        pki.issue("nothing", "x")


def test_a_short_nodes_directory_is_used_as_it_is() -> None:
    parent = Path(tempfile.mkdtemp(prefix="rn-"))
    try:
        wanted = parent / "realnodes"
        assert len(str(wanted)) <= pool.SOCKET_ROOM
        assert pool.nodes_directory(wanted) == wanted
        assert wanted.is_dir()
        assert not wanted.is_symlink()
    finally:
        shutil.rmtree(parent)


def test_a_long_nodes_directory_becomes_a_short_one_it_links_to(tmp_path: Path) -> None:
    """A long --workdir made containerd fail: 'unix socket path too long (> 104)'."""
    wanted = tmp_path / ("long-" * 12) / "realnodes"
    directory = pool.nodes_directory(wanted)
    try:
        assert len(str(directory)) <= pool.SOCKET_ROOM
        assert directory.is_dir()
        assert wanted.is_symlink()
        assert wanted.resolve() == directory.resolve()
        socket = directory / "system-1" / "containerd" / "containerd.sock.ttrpc"
        assert len(str(socket)) < 104
    finally:
        shutil.rmtree(directory)


@pytest.mark.parametrize(
    ("links", "slots"),
    [
        (["lo", "eth0", "docker0"], set()),
        (["signal-br0", "sn0-0", "sn0-1"], {0}),
        # An earlier cluster of slot 1 has stopped: its bridge is gone, but the kernel has not
        # yet destroyed a node's namespace, whose host link sn1-2 remains for a moment.
        (["signal-br0", "sn1-2"], {0, 1}),
        (["signal-br3"], {3}),
        (["snap0", "sn-1", "snx-1", "sn2-", "signal-brx"], set()),
    ],
)
def test_a_slot_is_held_while_its_bridge_or_any_node_link_remains(links: list[str], slots: set[int]) -> None:
    assert network.slots_of(links) == slots
