"""The configuration files of a real node's kubelet and kube-proxy and of the cluster's CoreDNS
(pure: each function returns file text; callers write it).

* kubelet: cgroupfs driver with ``failCgroupV1: false`` (cgroup v1 hybrid hosts), its own cgroup
  root, node address and ports; x509 client certificates (the cluster CA) and webhook
  authorisation for its API, never anonymous access; no image garbage collection (images are
  imported, not pulled); every path under the node's directory.
* kube-proxy: iptables mode inside the node's network namespace, no host-wide sysctl
  (conntrack limits untouched).
* CoreDNS: the ``kubernetes`` plugin for the cluster domain (Services, headless Services and
  their Pods' names), nothing forwarded.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from localcluster.realnode.network import CLUSTER_DOMAIN, DNS_SERVICE_IP

KUBELET_PORT = 10250


@dataclass(frozen=True)
class KubeletFiles:
    """The files one kubelet reads."""

    kubeconfig: Path
    client_ca: Path
    serving_cert: Path
    serving_key: Path
    runtime_socket: Path
    root_dir: Path


def kubelet_config(files: KubeletFiles, node_ip: str, cgroup_root: str) -> str:
    """A KubeletConfiguration (JSON, which is YAML) for one node."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True, "cacheTTL": "10s"},
            "x509": {"clientCAFile": str(files.client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(files.serving_cert),
        "tlsPrivateKeyFile": str(files.serving_key),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{files.runtime_socket}",
        "clusterDNS": [DNS_SERVICE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "",
        "podLogsDir": str(files.root_dir / "pod-logs"),
        "volumePluginDir": str(files.root_dir / "volume-plugins"),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
        "nodeStatusReportFrequency": "1m",
        "registerNode": True,
        "maxPods": 110,
        "hairpinMode": "hairpin-veth",
        "protectKernelDefaults": False,
        "containerLogMaxSize": "10Mi",
        "shutdownGracePeriod": "0s",
    }
    return json.dumps(config, indent=2)


def kube_proxy_config(kubeconfig: Path, node_name: str, pod_cidr: str) -> str:
    """A KubeProxyConfiguration (iptables mode) for one node."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": pod_cidr,
        "hostnameOverride": node_name,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # Leave the machine-wide conntrack table size alone (0 = do not set).
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
    }
    return json.dumps(config, indent=2)


def corefile(listen_ip: str, port: int, kubeconfig: Path, health_port: int, ready_port: int) -> str:
    """CoreDNS's Corefile: answers for the cluster domain from the API server, nothing else."""
    return (
        f".:{port} {{\n"
        f"    bind {listen_ip}\n"
        "    errors\n"
        f"    health {listen_ip}:{health_port}\n"
        f"    ready {listen_ip}:{ready_port}\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig}\n"
        "        pods insecure\n"
        "        fallthrough in-addr.arpa ip6.arpa\n"
        "        ttl 5\n"
        "    }\n"
        "    cache 5\n"
        "}\n"
    )
