"""The network of a local cluster with real nodes.

Addressing (pure): a cluster takes a free *slot* ``k`` (0..31) on this machine; its host bridge
``signal-br<k>`` holds ``10.250.<k>.1/24`` (the API server and CoreDNS listen there), node ``i``
is ``10.250.<k>.<i+2>`` and its Pods get ``10.251.<8k+i>.0/24`` from the CNI bridge and
host-local plugins inside the node's own network namespace. Every node routes the other nodes'
Pod ranges to those nodes over the bridge, and the host routes each Pod range to its node (for
the replies of the API server and CoreDNS), so Pods of different nodes reach each other by IP.
The host itself forwards nothing (``ip_forward`` stays as it was): node-to-node traffic is
bridged, and only the nodes' own namespaces forward.

Host state (the bridge and, with it, its addresses, routes and the host ends of the nodes'
veths, and the nftables table that lets Pods reach only the API server and CoreDNS on the host)
is made here and removed by ``hoststate.clean``; each node namespace dies with the node's
processes. Used by ``localcluster.realnode.node`` and ``.pool``.
"""

import json
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_SLOTS = 32
MAX_NODES = 8
BRIDGE_PREFIX = "signal-br"
NODE_LINK_PREFIX = "sn"
"""A node's host link is ``sn<slot>-<index>`` (``attach_node``)."""
CLUSTER_DOMAIN = "cluster.local"
SERVICE_CIDR = "10.96.0.0/16"
DNS_SERVICE_IP = "10.96.0.10"


class NetworkError(RuntimeError):
    """An ``ip`` or ``sysctl`` step failed."""


@dataclass(frozen=True)
class ClusterNetwork:
    """The addresses of cluster slot ``slot`` (pure)."""

    slot: int

    def __post_init__(self) -> None:
        if not 0 <= self.slot < MAX_SLOTS:
            raise ValueError(f"cluster slot {self.slot} is outside 0..{MAX_SLOTS - 1}")

    @property
    def bridge(self) -> str:
        return f"{BRIDGE_PREFIX}{self.slot}"

    @property
    def nft_table(self) -> str:
        """The host's nftables table (family ``inet``) that guards the bridge."""
        return f"signal_br{self.slot}"

    @property
    def host_ip(self) -> str:
        """The host's address on the bridge: the API server and CoreDNS bind here."""
        return f"10.250.{self.slot}.1"

    @property
    def node_cidr(self) -> str:
        return f"10.250.{self.slot}.0/24"

    @property
    def pod_cidr(self) -> str:
        """Every Pod range of this cluster (kube-proxy's ``clusterCIDR``)."""
        return f"10.251.{self.slot * MAX_NODES}.0/21"

    def node_ip(self, index: int) -> str:
        self._check(index)
        return f"10.250.{self.slot}.{index + 2}"

    def node_pod_cidr(self, index: int) -> str:
        self._check(index)
        return f"10.251.{self.slot * MAX_NODES + index}.0/24"

    def _check(self, index: int) -> None:
        if not 0 <= index < MAX_NODES:
            raise ValueError(f"node index {index} is outside 0..{MAX_NODES - 1}")


def cni_config(network: ClusterNetwork, index: int, ipam_dir: Path) -> str:
    """The CNI configuration list of node ``index``: a bridge ``cni0`` in the node's namespace
    (the Pods' gateway), host-local addresses from the node's Pod range kept in ``ipam_dir``."""
    subnet = network.node_pod_cidr(index)
    config = {
        "cniVersion": "1.0.0",
        "name": f"signal-{network.slot}-{index}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }
    return json.dumps(config, indent=2)


def run_ip(*args: str, netns_pid: int | None = None) -> str:
    """Run ``ip`` on the host, or inside the network namespace of process ``netns_pid``."""
    prefix = ["nsenter", f"--net=/proc/{netns_pid}/ns/net", "--"] if netns_pid else []
    result = subprocess.run([*prefix, "ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        where = f" in the namespace of pid {netns_pid}" if netns_pid else ""
        raise NetworkError(f"ip {' '.join(args)}{where} failed: {result.stderr.strip()}")
    return result.stdout


def bridge_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def create_bridge(network: ClusterNetwork) -> None:
    """Create the host bridge with the host's address (the slot must be free)."""
    run_ip("link", "add", network.bridge, "type", "bridge")
    run_ip("addr", "add", f"{network.host_ip}/24", "dev", network.bridge)
    run_ip("link", "set", network.bridge, "up")


def guard_rules(network: ClusterNetwork, api_port: int, dns_port: int) -> str:
    """An nftables script (pure): from the bridge, the host accepts only the API server's and
    CoreDNS's ports on its bridge address (and replies to what it started); everything else a
    node or Pod sends to the host is dropped, so the host's other services stay out of reach."""
    bridge, host = network.bridge, network.host_ip
    return (
        f"table inet {network.nft_table} {{\n"
        "  chain input {\n"
        "    type filter hook input priority -10; policy accept;\n"
        f'    iifname "{bridge}" ct state established,related accept\n'
        f'    iifname "{bridge}" ip daddr {host} tcp dport {api_port} accept\n'
        f'    iifname "{bridge}" ip daddr {host} meta l4proto {{ tcp, udp }} th dport {dns_port} accept\n'
        f'    iifname "{bridge}" drop\n'
        "  }\n"
        "}\n"
    )


def guard_host(network: ClusterNetwork, api_port: int, dns_port: int) -> None:
    """Install :func:`guard_rules` as the cluster's own nftables table (removed with
    ``nft delete table``; see ``hoststate.clean``)."""
    result = subprocess.run(
        ["nft", "-f", "-"], input=guard_rules(network, api_port, dns_port), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise NetworkError(f"installing nftables table {network.nft_table} failed: {result.stderr.strip()}")


def delete_bridge(name: str) -> None:
    """Remove a host bridge (its addresses and routes go with it); absent is fine."""
    if bridge_exists(name):
        run_ip("link", "del", name)


def _sysctl_in(pid: int, key: str, value: str) -> None:
    """Set a per-namespace sysctl in the network namespace of process ``pid``."""
    command = f"echo {value} > /proc/sys/{key.replace('.', '/')}"
    result = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "--", "sh", "-c", command],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise NetworkError(f"setting {key}={value} in the network namespace of pid {pid} failed: {result.stderr}")


def attach_node(network: ClusterNetwork, index: int, holder_pid: int, node_count: int) -> None:
    """Connect the network namespace of ``holder_pid`` as node ``index``: a veth whose node end
    is ``eth0`` with the node's address, a default route via the host, routes to the other
    nodes' Pod ranges, forwarding inside the node, and the host's route to this node's Pods."""
    host_end = f"{NODE_LINK_PREFIX}{network.slot}-{index}"
    run_ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", str(holder_pid))
    run_ip("link", "set", host_end, "master", network.bridge, "up")
    inside = holder_pid
    run_ip("link", "set", "lo", "up", netns_pid=inside)
    run_ip("addr", "add", f"{network.node_ip(index)}/24", "dev", "eth0", netns_pid=inside)
    run_ip("link", "set", "eth0", "up", netns_pid=inside)
    run_ip("route", "add", "default", "via", network.host_ip, netns_pid=inside)
    for other in range(node_count):
        if other != index:
            run_ip("route", "add", network.node_pod_cidr(other), "via", network.node_ip(other), netns_pid=inside)
    _sysctl_in(inside, "net.ipv4.ip_forward", "1")
    _sysctl_in(inside, "net.bridge.bridge-nf-call-iptables", "1")
    run_ip("route", "add", network.node_pod_cidr(index), "via", network.node_ip(index), "dev", network.bridge)


def used_slots() -> set[int]:
    """Slots whose bridge, or any node link (``sn<slot>-<index>``), exists on this machine.

    A node's host link goes when its network namespace is destroyed, which the kernel does
    asynchronously after the namespace's last process exits: just after an earlier cluster of
    this slot stopped, its bridge is gone but a link may remain for a moment, and a cluster
    taking the slot then would fail to add a link of the same name (``File exists``)."""
    return slots_of(path.name for path in Path("/sys/class/net").iterdir())


def slots_of(links: Iterable[str]) -> set[int]:
    """The slots that the host's links named ``links`` hold (``used_slots``). Pure."""
    found = set()
    for name in links:
        suffix = name.removeprefix(BRIDGE_PREFIX)
        if name.startswith(BRIDGE_PREFIX) and suffix.isdigit():
            found.add(int(suffix))
        slot, dash, index = name.removeprefix(NODE_LINK_PREFIX).partition("-")
        if name.startswith(NODE_LINK_PREFIX) and dash and slot.isdigit() and index.isdigit():
            found.add(int(slot))
    return found
