"""Argo Workflows' real workflow-controller on the local cluster, and its executor's Pods
hosted by the process kubelet.

LOCAL TEST INFRASTRUCTURE ONLY. The binaries are built from the Go module proxy by
``localcluster/argo/build.sh``; the only Argo v4 release the proxy serves is v4.0.5, which has
reported security flaws, so it is never shipped in an image or a deployment. It runs here so
that the demo and the tests execute Workflows exactly as Argo does.

* The controller runs cluster-wide as a local process with the admin's credentials (it is
  test infrastructure, not part of Signal's least-privilege story; the Workflow Pods run as
  their own ServiceAccounts), configured by the ConfigMap ``workflow-controller-configmap`` in
  the namespace ``argo``: no metrics servers (several local clusters can share a machine),
  and every Workflow's Pods are placed on one simulated system Node (:data:`SYSTEM_NODE`),
  as a real cluster runs its adapter Pods on system Nodes, not on reserved GPU Nodes.
* The executor image :data:`EXECUTOR_IMAGE` stands for the built ``argoexec``: its containers
  find ``argoexec`` first on their PATH, and Pods using it run their containers in private
  mount namespaces with the real mount paths (``/var/run/argo``, ``/mainctrfs``, the
  ServiceAccount directory), see ``localcluster.podprocess``.
* Workflow Pods reach the API server through in-cluster config: the kubelet gives every
  container ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the projected ServiceAccount volume
  (token by TokenRequest, ``ca.crt`` from ``kube-root-ca.crt``).
"""

import asyncio
import contextlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import structlog
import yaml

from localcluster import podprocess, procs
from localcluster.controlplane import Component, ControlPlane, kubeconfig_text
from localcluster.fleet import SIMULATED_LABEL, SimNode
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys

log = structlog.get_logger("localcluster")

ARGO_VERSION = "v4.0.5"
EXECUTOR_IMAGE = f"quay.io/argoproj/argoexec:{ARGO_VERSION}"
EXECUTOR_IMAGE_NAME = "quay.io/argoproj/argoexec"
_IMAGE_HOLDERS: set[int] = set()
"""The ArgoControllers (by id) that registered the executor image with the process kubelet's
process-wide registry (podprocess): two local clusters may run Argo in one process (a test
session's and a real-node module's), and one stopping must not unregister the other's."""
ARGO_NAMESPACE = "argo"
CONFIGMAP = "workflow-controller-configmap"
SYSTEM_NODE = "signal-system-0"
SYSTEM_NODE_LABEL = "projectsignal.dev/local-system"


# Argo's executor containers (``init``, ``wait``) take their securityContext from the
# controller's configuration only. Signal's namespace enforces Pod Security ``restricted``
# (deploy/base/namespace.yaml), which refuses a step Pod whose executor containers do not drop
# every capability, forbid privilege escalation, run as non-root with the runtime's seccomp
# profile: an operator's Argo needs this setting (docs/operator-guide.md).
EXECUTOR_SECURITY_CONTEXT: Obj = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def controller_config(instance_id: str = "") -> Obj:
    """The workflow-controller's configuration (the ConfigMap's ``config`` key). With an
    ``instance_id`` it runs only Workflows labelled ``workflows.argoproj.io/controller-instanceid``
    with it (and without, only unlabelled ones)."""
    config: Obj = {
        "metricsConfig": {"enabled": False},
        "telemetryConfig": {"enabled": False},
        "workflowDefaults": {"spec": {"nodeSelector": {SYSTEM_NODE_LABEL: "true"}}},
        "executor": {"securityContext": EXECUTOR_SECURITY_CONTEXT},
    }
    if instance_id:
        config["instanceID"] = instance_id
    return config


def system_node(kubelet_port: int) -> Obj:
    """The simulated Node that hosts Workflow Pods: no GPUs, not a Signal fleet Node. Its
    ``daemonEndpoints`` point the API server at the process kubelet's API (``pods/exec``, by
    which Argo signals a step's containers on shutdown or deadline)."""
    manifest = SimNode(SYSTEM_NODE, gpus=0, rdma=0, cpu="64", memory="256Gi").manifest()
    manifest["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": kubelet_port}}
    labels = manifest["metadata"]["labels"]
    for key in (SIMULATED_LABEL, "nvidia.com/gpu.product"):
        labels.pop(key, None)
    labels[SYSTEM_NODE_LABEL] = "true"
    labels[keys.TRUSTED_NODE_LABEL] = "true"  # the adapter's step Pods run only here (an admin's label)
    return manifest


class StartError(RuntimeError):
    """The workflow-controller exited during its start-up or did not start in time (e.g. the
    API server was unreachable meanwhile); stop it before starting it again."""


@dataclass
class ArgoController:
    """Runs workflow-controller for a local cluster. ``start`` after the CRDs are installed."""

    plane: ControlPlane
    admin: KubeClient
    build_dir: Path
    workers: int = 8
    instance_id: str = ""
    component: Component | None = field(default=None, repr=False)

    def register_images(self) -> None:
        podprocess.IMAGE_PATH_DIRS[EXECUTOR_IMAGE_NAME] = [str(self.build_dir)]
        podprocess.IMAGE_ENTRYPOINTS[EXECUTOR_IMAGE_NAME] = [str(self.build_dir / "argoexec")]
        podprocess.MOUNT_NAMESPACE_IMAGES.add(EXECUTOR_IMAGE_NAME)
        _IMAGE_HOLDERS.add(id(self))

    async def start(self) -> None:
        self.register_images()
        with contextlib.suppress(ApiError):
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ARGO_NAMESPACE}}
            await self.admin.create(resource_path("v1", "namespaces"), namespace)
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": ARGO_NAMESPACE},
            "data": {"config": yaml.safe_dump(controller_config(self.instance_id), sort_keys=True)},
        }
        await self.admin.apply(resource_path("v1", "configmaps", ARGO_NAMESPACE, CONFIGMAP), configmap)
        kubeconfig = self.plane.workdir / "argo.kubeconfig"
        kubeconfig.write_text(
            kubeconfig_text(self.plane.server, self.plane.ca_file, self.plane.admin_token, ARGO_NAMESPACE)
        )
        kubeconfig.chmod(0o600)
        args = [
            f"--kubeconfig={kubeconfig}",
            f"--configmap={CONFIGMAP}",
            f"--executor-image={EXECUTOR_IMAGE}",
            "--executor-image-pull-policy=IfNotPresent",
            "--loglevel=info",
            "--log-format=text",
            f"--workflow-workers={self.workers}",
            "--workflow-ttl-workers=1",
            "--pod-cleanup-workers=2",
            "--cron-workflow-workers=1",
            "--workflow-archive-workers=1",
            "--qps=200",
            "--burst=400",
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.plane.workdir),
            "LEADER_ELECTION_DISABLE": "true",
            # Re-reconcile a Workflow 1 s (not 10 s) after a change: short steps, quick tests.
            "DEFAULT_REQUEUE_TIME": "1s",
        }
        component = Component("workflow-controller", args, self.plane.workdir / "workflow-controller.log")
        # The log is appended to across restarts: only what this start wrote says it started.
        offset = component.log_path.stat().st_size if component.log_path.exists() else 0
        component.process = self._launch(component, env)
        self.component = component
        self.plane.components.append(component)
        await self._wait_started(offset)

    def _launch(self, component: Component, env: dict[str, str]) -> "subprocess.Popen[bytes]":
        with component.log_path.open("ab") as handle:
            return procs.popen(
                [str(self.build_dir / "workflow-controller"), *component.args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=env,
            )

    async def _wait_started(self, offset: int, timeout: float = 30.0) -> None:
        """Wait for the controller's workers to start (after its informers' caches synced), as
        its log says after ``offset``."""
        assert self.component is not None
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            if not self.component.running():
                raise StartError(f"workflow-controller exited during start-up:\n{self.component.tail()}")
            with self.component.log_path.open("rb") as handle:
                handle.seek(offset)
                text = handle.read().decode(errors="replace")
            if "Started workflow garbage collection" in text or "Starting workflow TTL controller" in text:
                log.info("argo workflow-controller started", version=ARGO_VERSION)
                return
            await asyncio.sleep(0.2)
        raise StartError(f"workflow-controller not started after {timeout}s:\n{self.component.tail()}")

    def stop(self) -> None:
        """Stop the controller (blocking: call it from a thread). It does not exit on SIGTERM,
        and it keeps no state worth a graceful stop, so it is killed after a second."""
        if self.component is not None:
            self.component.stop(timeout=1.0)
        _IMAGE_HOLDERS.discard(id(self))
        if not _IMAGE_HOLDERS:  # the last one running: else the others' step Pods would not start
            podprocess.IMAGE_PATH_DIRS.pop(EXECUTOR_IMAGE_NAME, None)
            podprocess.IMAGE_ENTRYPOINTS.pop(EXECUTOR_IMAGE_NAME, None)
            podprocess.MOUNT_NAMESPACE_IMAGES.discard(EXECUTOR_IMAGE_NAME)
