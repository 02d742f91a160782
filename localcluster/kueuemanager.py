"""Kueue's real manager (v0.17.0: its controllers, scheduler and webhooks) on the local cluster.

LOCAL TEST INFRASTRUCTURE ONLY: built from the Go module proxy by ``localcluster/kueue/build.sh``;
Signal ships no Kueue. It runs as a local process with the admin's credentials, configured for
the Pod and MPIJob integrations (``pod``, ``kubeflow.org/mpijob``: Kueue suspends a queued MPIJob
and unsuspends it when its queue admits it; the MPI operator makes its Pods only then), no leader
election, no metrics or visibility server, and Kueue's own certificate management off: its
webhook server serves a certificate for ``127.0.0.1`` signed by a CA of this cluster's work
directory, and the API server calls it by URL (``/mutate--v1-pod``, ``/validate--v1-pod`` and
the MPIJob pair) with that CA as ``caBundle``. The webhooks see only Pods and MPIJobs that carry
``kueue.x-k8s.io/queue-name`` in namespaces labelled :data:`MANAGED_NAMESPACE_LABEL`
(``manage``), so the rest of the local cluster is never held up by Kueue (``failurePolicy:
Fail`` for those objects, as Kueue installs them).

``queues`` makes what an operator makes: a ResourceFlavor (optionally with ``nodeLabels``,
which Kueue adds as a node selector to what it admits), a ClusterQueue with a GPU quota and a
LocalQueue in the Runs' namespace."""

import asyncio
import base64
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import structlog
import yaml

from localcluster import procs
from localcluster.binaries import _build
from localcluster.controlplane import Component, ControlPlane, free_port, kubeconfig_text
from localcluster.crds import install_crds
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.realnode.pki import ClusterPKI

log = structlog.get_logger("localcluster")

BUILD_SCRIPT = Path(__file__).resolve().parent / "kueue" / "build.sh"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
ADMISSION = "admissionregistration.k8s.io/v1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_NAMESPACE_LABEL = "projectsignal.dev/local-kueue"
INTEGRATIONS = ["pod", "kubeflow.org/mpijob"]
"""Kueue's job frameworks here: Signal's Pod checks and MPIJob checks (Kueue waits for the MPIJob
CRD if it is not installed yet)."""
HOOKS = [
    ("pod", "", "v1", "pods", "/mutate--v1-pod", "/validate--v1-pod"),
    (
        "mpijob",
        "kubeflow.org",
        "v2beta1",
        "mpijobs",
        "/mutate-kubeflow-org-v2beta1-mpijob",
        "/validate-kubeflow-org-v2beta1-mpijob",
    ),
]
"""(name, API group, version, resource, mutating path, validating path) of Kueue's webhooks for
each integration (its paths, as v0.17's kubebuilder markers name them)."""
METRICS_CERTS = "/etc/kueue/metrics/certs"
"""Where Kueue v0.17 reads its metrics certificate when its certificate management is off."""


def kueue_build_dir(*, show_progress: bool = False) -> Path:
    """The built Kueue (``kueue`` and ``crds/``), building it once (cached by content)."""
    return _build(BUILD_SCRIPT, "Kueue", show_progress)


def manager_config(webhook_port: int, health_port: int, cert_dir: Path) -> Obj:
    """Kueue's Configuration for the local cluster (see the module docstring)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": INTEGRATIONS},
    }


def webhook_configurations(name: str, port: int, ca_pem: bytes) -> list[Obj]:
    """Kueue's Pod and MPIJob webhooks (mutating and validating), called by URL, for queued
    objects only."""
    bundle = base64.b64encode(ca_pem).decode()
    scope = {
        "namespaceSelector": {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}},
        "objectSelector": {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]},
    }

    def hook(name: str, group: str, version: str, resource: str, path: str, operations: list[str]) -> Obj:
        return {
            "name": f"{name}.kueue.x-k8s.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle},
            "rules": [
                {"apiGroups": [group], "apiVersions": [version], "operations": operations, "resources": [resource]}
            ],
            **scope,
        }

    mutating = {
        "apiVersion": ADMISSION,
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {**hook(f"m{kind}", group, version, resource, mutate, ["CREATE"]), "reinvocationPolicy": "Never"}
            for kind, group, version, resource, mutate, _ in HOOKS
        ],
    }
    validating = {
        "apiVersion": ADMISSION,
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            hook(f"v{kind}", group, version, resource, validate, ["CREATE", "UPDATE"])
            for kind, group, version, resource, _, validate in HOOKS
        ],
    }
    return [mutating, validating]


def queues(
    namespace: str, *, gpus: int, name: str = "gpu", node_labels: dict[str, str] | None = None
) -> list[tuple[str, Obj]]:
    """(path, object) of a ResourceFlavor (with ``node_labels`` as its ``nodeLabels``), a
    ClusterQueue with ``gpus`` of ``nvidia.com/gpu`` (and room for the runner's CPU and memory)
    and a LocalQueue ``name`` in ``namespace``."""
    flavor = f"{namespace}-flavor"
    flavor_spec = {"spec": {"nodeLabels": dict(node_labels)}} if node_labels else {}
    cluster_queue = f"{namespace}-{name}"
    return [
        (
            resource_path(KUEUE_API, "resourceflavors", name=flavor),
            {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor}, **flavor_spec},
        ),
        (
            resource_path(KUEUE_API, "clusterqueues", name=cluster_queue),
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": {"name": cluster_queue},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "64"},
                                        {"name": "memory", "nominalQuota": "256Gi"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
        ),
        (
            resource_path(KUEUE_API, "localqueues", namespace, name),
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": cluster_queue},
            },
        ),
    ]


@dataclass
class KueueManager:
    """Runs Kueue's manager for a local cluster (``manage`` the namespaces it queues in)."""

    plane: ControlPlane
    admin: KubeClient
    build_dir: Path | None = None
    component: Component | None = field(default=None, repr=False)
    name: str = "signal-local-kueue"
    started_seconds: float = 0.0

    async def start(self, timeout: float = 60.0) -> None:
        began = time.monotonic()
        build: Path = self.build_dir if self.build_dir is not None else await asyncio.to_thread(kueue_build_dir)
        await install_crds(self.admin, sorted((build / "crds").glob("*.yaml")))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}
        await self.admin.apply(resource_path("v1", "namespaces", name=KUEUE_NAMESPACE), namespace)
        workdir = self.plane.workdir / "kueue"
        pki = ClusterPKI(workdir / "pki")
        ca = await asyncio.to_thread(pki.create_ca)
        pair = await asyncio.to_thread(pki.issue, "webhook", "kueue-webhook", server=True, ips=("127.0.0.1",))
        certs = workdir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        (certs / "tls.crt").write_bytes(pair.cert.read_bytes())
        (certs / "tls.key").write_bytes(pair.key.read_bytes())
        (certs / "tls.key").chmod(0o600)
        port, health = free_port(), free_port()
        config = workdir / "config.yaml"
        config.write_text(yaml.safe_dump(manager_config(port, health, certs), sort_keys=True))
        kubeconfig = workdir / "kueue.kubeconfig"
        kubeconfig.write_text(kubeconfig_text(self.plane.server, self.plane.ca_file, self.plane.admin_token))
        kubeconfig.chmod(0o600)
        args = [f"--config={config}", "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=info"]
        component = Component("kueue", args, workdir / "kueue.log")
        # Without its own certificate management Kueue reads its metrics server's certificate
        # from a fixed path (METRICS_CERTS) even with metrics off: give it one in a private mount
        # namespace (an empty /etc of its own; it needs nothing else there), not on the host.
        script = (
            f'mount -t tmpfs signal-kueue-etc /etc && mkdir -p {METRICS_CERTS} && cp "$1"/tls.crt "$1"/tls.key '
            f'{METRICS_CERTS}/ && shift && exec "$@"'
        )
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(certs)]
        with component.log_path.open("ab") as handle:
            component.process = procs.popen(
                [*argv, str(build / "kueue"), *args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env={
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "KUBECONFIG": str(kubeconfig),
                    "HOME": str(workdir),  # controller-runtime asks for a user (CGO off)
                    "USER": "signal-local-kueue",
                },
            )
        self.component = component
        self.plane.components.append(component)
        await self._wait_ready(health, timeout)
        for document in webhook_configurations(self.name, port, ca.cert.read_bytes()):
            plural = (
                "mutatingwebhookconfigurations"
                if document["kind"].startswith("Mutating")
                else ("validatingwebhookconfigurations")
            )
            await self.admin.apply(resource_path(ADMISSION, plural, name=self.name), document)
        self.started_seconds = time.monotonic() - began
        log.info("kueue started", seconds=round(self.started_seconds, 1), webhook_port=port)

    async def _wait_ready(self, health: int, timeout: float) -> None:
        assert self.component is not None
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as http:
            while time.monotonic() < deadline:
                if not self.component.running():
                    raise RuntimeError(f"kueue exited during start-up:\n{self.component.tail(60)}")
                try:
                    if (await http.get(f"http://127.0.0.1:{health}/readyz", timeout=2.0)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.3)
        raise RuntimeError(f"kueue not ready after {timeout}s:\n{self.component.tail(60)}")

    async def manage(self, namespace: str, *, gpus: int, node_labels: dict[str, str] | None = None) -> None:
        """Queue Pods and MPIJobs of ``namespace`` through Kueue: label it for the webhooks, make
        its queues (``node_labels``: the flavor's)."""
        patch = {"metadata": {"labels": {MANAGED_NAMESPACE_LABEL: "true"}}}
        await self.admin.merge_patch(resource_path("v1", "namespaces", name=namespace), patch)
        for path, body in queues(namespace, gpus=gpus, node_labels=node_labels):
            await self.admin.apply(path, body)

    async def unmanage(self, namespace: str) -> None:
        """Delete what ``manage`` made cluster-wide (the ClusterQueue and ResourceFlavor)."""
        for path, body in queues(namespace, gpus=0)[:2][::-1]:
            try:
                await self.admin.delete(path)
            except ApiError as exc:
                if exc.status != 404:
                    raise
            del body

    def rss_bytes(self) -> int:
        """The manager's resident memory now (from /proc), 0 when not running."""
        if self.component is None or self.component.process is None:
            return 0
        status = Path(f"/proc/{self.component.process.pid}/status")
        for line in status.read_text().splitlines() if status.exists() else []:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    async def stop(self) -> None:
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            try:
                await self.admin.delete(resource_path(ADMISSION, plural, name=self.name))
            except ApiError as exc:
                if exc.status != 404:
                    raise
        if self.component is not None:
            await asyncio.to_thread(self.component.stop, 5.0)
