"""The real Kubeflow MPI operator v0.8.0 on the local cluster.

Built by ``localcluster/mpi-operator/build.sh`` from its source tree (``SIGNAL_MPI_OPERATOR_SRC``,
default ``../shared/upstream-src/mpi-operator-v0.8.0``; elsewhere ``git clone --branch v0.8.0``
of github.com/kubeflow/mpi-operator). It runs as its own ServiceAccount ``mpi-operator/mpi-operator``
with a real token and RBAC:

* the upstream ClusterRole, read at run time from the source tree's
  ``manifests/base/cluster-role.yaml`` when the tree has it (a full clone does); never copied
  into this repository;
* otherwise :data:`OPERATOR_RULES`, our own least-privilege rules, written from what
  v0.8.0's controller calls (for a trimmed tree that holds the CRD and the Go sources only).

Two ways to run it:

* :class:`KubeflowMPIOperator`, a local process (for the process kubelet's cluster and the
  tests). It serves its health check on ``:8080`` on every interface and exits if that is
  taken, so it runs in a network namespace of its own (``localcluster/nsbridge.py``) that
  reaches only the API server.
* :func:`deployment`, the same operator as a Pod of the image ``localcluster.images`` builds
  (``localcluster.projectsignal.dev/mpi-operator:local``), for real nodes.
"""

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import structlog
import yaml

from localcluster import identities, procs
from localcluster.binaries import mpi_operator_src
from localcluster.buildah import ImageBuildError
from localcluster.controlplane import Component, ControlPlane, kubeconfig_text
from localcluster.kube import KubeClient, Obj, resource_path
from localcluster.nsbridge import HostRelay

log = structlog.get_logger("localcluster")

BUILD_SCRIPT: Final = Path(__file__).resolve().parent / "mpi-operator" / "build.sh"
REPO_ROOT: Final = Path(__file__).resolve().parent.parent
NAMESPACE: Final = "mpi-operator"
SERVICE_ACCOUNT: Final = "mpi-operator"
CLUSTER_ROLE: Final = "signal-local-mpi-operator"
UPSTREAM_CLUSTER_ROLE: Final = Path("manifests") / "base" / "cluster-role.yaml"

# What v0.8.0's controller does (pkg/controller/mpi_job_controller.go, cmd/mpi-operator/app):
# informers on pods, services, configmaps, secrets, jobs, priorityclasses and MPIJobs; it
# creates the launcher Job, the worker Pods (and deletes surplus ones), the headless Service,
# the hostfile ConfigMap and the SSH Secret, updates the MPIJob's status, records Events, owns
# its children with blocking owner references (mpijobs/finalizers under
# OwnerReferencesPermissionEnforcement), and elects a leader with a Lease.
OPERATOR_RULES: Final[list[Obj]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {
        "apiGroups": [""],
        "resources": ["services", "configmaps", "secrets"],
        "verbs": ["get", "list", "watch", "create", "update"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "create", "update"]},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["update"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs/status"], "verbs": ["update", "patch"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs/finalizers"], "verbs": ["update"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
]


class OperatorError(RuntimeError):
    """The MPI operator could not be built, installed or started."""


def operator_binary() -> Path:
    """``$SIGNAL_MPI_OPERATOR_BINARY`` or the cached build of localcluster/mpi-operator/build.sh."""
    override = os.environ.get("SIGNAL_MPI_OPERATOR_BINARY")
    if override:
        if not os.access(override, os.X_OK):
            raise ImageBuildError(f"SIGNAL_MPI_OPERATOR_BINARY={override} is not an executable file")
        return Path(override)
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageBuildError(
            f"building the Kubeflow MPI operator failed (exit {done.returncode}); run {BUILD_SCRIPT} "
            f"to see why:\n{done.stderr[-4000:]}"
        )
    return Path(done.stdout.strip().splitlines()[-1])


def operator_rules(src: Path | None = None) -> tuple[list[Obj], str]:
    """The operator's ClusterRole rules and where they came from: the source tree's upstream
    ``cluster-role.yaml`` when it has one, else :data:`OPERATOR_RULES`."""
    path = (src or mpi_operator_src()) / UPSTREAM_CLUSTER_ROLE
    if path.is_file():
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "ClusterRole":
                return list(document.get("rules") or []), str(path)
        raise OperatorError(f"{path} holds no ClusterRole; fix it or remove it to use Signal's own rules")
    return [dict(rule) for rule in OPERATOR_RULES], "localcluster/kubeflowmpi.py OPERATOR_RULES"


def rbac_objects(rules: list[Obj], namespace: str = NAMESPACE) -> list[Obj]:
    """Namespace, ServiceAccount, ClusterRole and its binding for the operator."""
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": CLUSTER_ROLE},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": CLUSTER_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
            "subjects": [subject],
        },
    ]


def operator_args(kubeconfig: str | None, namespace: str = NAMESPACE) -> list[str]:
    """Flags of v0.8.0's ``mpi-operator`` (cluster-scoped; gang scheduling off)."""
    args = [f"--lock-namespace={namespace}", "--threadiness=4", "--kube-api-qps=50", "--kube-api-burst=100"]
    if kubeconfig:
        args.insert(0, f"--kubeConfig={kubeconfig}")
    return args


def deployment(image: str, namespace: str = NAMESPACE) -> Obj:
    """The operator as one Pod of its image (real nodes), restricted and token-scoped to its
    ServiceAccount. ``image`` is best pinned by digest (``localcluster.images``' index)."""
    container: dict[str, Any] = {
        "name": "mpi-operator",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": operator_args(None, namespace),
        "ports": [{"name": "healthz", "containerPort": 8080}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "initialDelaySeconds": 15},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    labels = {"app.kubernetes.io/name": "mpi-operator"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "mpi-operator", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"serviceAccountName": SERVICE_ACCOUNT, "containers": [container]},
            },
        },
    }


async def install_rbac(admin: KubeClient, rules: list[Obj], namespace: str = NAMESPACE) -> None:
    """Server-side apply of :func:`rbac_objects` (safe to repeat)."""
    for obj in rbac_objects(rules, namespace):
        kind, meta = obj["kind"], obj["metadata"]
        api, plural = {
            "Namespace": ("v1", "namespaces"),
            "ServiceAccount": ("v1", "serviceaccounts"),
            "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles"),
            "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
        }[kind]
        await admin.apply(resource_path(api, plural, meta.get("namespace"), meta["name"]), obj)


@dataclass
class KubeflowMPIOperator:
    """The real operator as a local process in its own network namespace. ``start`` after
    the MPIJob CRD is installed (the operator exits without it)."""

    plane: ControlPlane
    admin: KubeClient
    namespace: str = NAMESPACE
    binary: Path | None = None
    component: Component | None = field(default=None, repr=False)
    rules_source: str = ""
    relay: HostRelay | None = field(default=None, repr=False)

    async def start(self, timeout: float = 60.0) -> None:
        binary = self.binary or await asyncio.to_thread(operator_binary)
        rules, self.rules_source = operator_rules()
        await install_rbac(self.admin, rules, self.namespace)
        identity = await identities.service_account(self.plane, self.namespace, SERVICE_ACCOUNT, create=False)
        workdir = self.plane.workdir
        kubeconfig = workdir / "mpi-operator.kubeconfig"
        server = f"https://127.0.0.1:{self.plane.apiserver_port}"
        kubeconfig.write_text(kubeconfig_text(server, self.plane.ca_file, identity.token, self.namespace))
        kubeconfig.chmod(0o600)
        self.relay = HostRelay(workdir / "mpi-operator-api.sock", self.plane.host, self.plane.apiserver_port)
        await self.relay.start()
        argv = [
            "unshare",
            "--net",
            "--",
            sys.executable,
            "-m",
            "localcluster.nsbridge",
            f"--unix={self.relay.socket_path}",
            f"--port={self.plane.apiserver_port}",
            "--",
            str(binary),
            *operator_args(str(kubeconfig), self.namespace),
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "PYTHONPATH": str(REPO_ROOT)}
        component = Component("mpi-operator", argv, workdir / "mpi-operator.log")
        with component.log_path.open("ab") as handle:
            component.process = procs.popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env)
        self.component = component
        self.plane.components.append(component)
        await self._wait_leading(timeout)
        log.info("kubeflow mpi-operator started", rules=self.rules_source)

    async def _wait_leading(self, timeout: float) -> None:
        assert self.component is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if not self.component.running():
                raise OperatorError(f"mpi-operator exited during start-up:\n{self.component.tail()}")
            if "Leading started" in self.component.log_path.read_text(errors="replace"):
                return
            await asyncio.sleep(0.2)
        raise OperatorError(f"mpi-operator not leading after {timeout}s:\n{self.component.tail()}")

    async def stop(self) -> None:
        if self.component is not None:
            await asyncio.to_thread(self.component.stop, 5.0)
            if self.component in self.plane.components:
                self.plane.components.remove(self.component)
        if self.relay is not None:
            await self.relay.stop()
