"""Signal, Argo's workflow-controller and the Kubeflow MPI operator as Pods of a cluster with
real nodes (``localcluster.realnode``), the way an operator installs them:

* **Images:** the archives ``localcluster.images`` builds from this repository's Dockerfiles
  (and Argo's and the MPI operator's binaries), imported into each node's containerd by their
  references; the system node gets every image, a GPU node only the runner's.
* **Argo:** the workflow-controller's own manifests, rendered at run time from the Argo module
  the Argo build downloads (``manifests/cluster-install-no-crds``: its ServiceAccount, RBAC,
  PriorityClass, ConfigMap and Deployment; argo-server is left out), never copied here, with
  the local images, our ConfigMap (:func:`argoworkflows.controller_config`) and the Pod pinned to
  the system node.
* **MPI operator:** ``kubeflowmpi.deployment`` with its RBAC (``kubeflowmpi.install_rbac``).
* **Signal:** ``kubectl kustomize deploy/overlays/local`` (the CRDs, deploy/base and
  node-events), the Deployments pinned to the system node, and the portal's serving certificate
  (the Secret ``signal-portal-tls`` an operator creates) issued by the cluster's CA.

Decisions (what to keep and how to change a rendered object) are pure functions; the rest
applies them and waits for every Deployment to be available.
"""

import asyncio
import base64
import copy
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog
import yaml

from localcluster import images, kubeflowmpi
from localcluster.argoworkflows import ARGO_NAMESPACE, ARGO_VERSION, CONFIGMAP, SYSTEM_NODE_LABEL, controller_config
from localcluster.binaries import argo_build_dir, kplane_binary
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.realnode.pool import RealNodes
from shared import keys

log = structlog.get_logger("localcluster")

REPO: Final = Path(__file__).resolve().parent.parent
SIGNAL_OVERLAY: Final = REPO / "deploy" / "overlays" / "local"
SIGNAL_NAMESPACE: Final = "signal-system"
PORTAL_TLS_SECRET: Final = "signal-portal-tls"
ARGO_MODULE: Final = f"github.com/argoproj/argo-workflows/v4@{ARGO_VERSION}"
SYSTEM_IMAGES: Final = ("controller", "portal", "adapter", "runner", "argoexec", "workflow-controller", "mpi-operator")
NODE_IMAGES: Final = ("runner",)

# kind -> (API path group/version is the object's own; plural, namespaced)
KINDS: Final[dict[str, tuple[str, bool]]] = {
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "ConfigMap": ("configmaps", True),
    "Secret": ("secrets", True),
    "Service": ("services", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Deployment": ("deployments", True),
    "PodDisruptionBudget": ("poddisruptionbudgets", True),
    "PriorityClass": ("priorityclasses", False),
    "NetworkPolicy": ("networkpolicies", True),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False),
    "WorkflowTemplate": ("workflowtemplates", True),
}


class InstallError(RuntimeError):
    """Rendering, applying or starting the in-cluster components failed."""


# -- pure decisions ------------------------------------------------------------------------


def object_path(doc: Obj) -> str:
    """The API path of a rendered object (its kind must be in :data:`KINDS`)."""
    kind, meta = doc.get("kind"), doc.get("metadata") or {}
    if kind not in KINDS:
        raise InstallError(f"{kind} {meta.get('name')}: not a kind the local install knows; add it to KINDS")
    plural, namespaced = KINDS[kind]
    return resource_path(doc["apiVersion"], plural, meta.get("namespace") if namespaced else None, meta["name"])


def pin_to_system_node(doc: Obj) -> Obj:
    """A Deployment whose Pods run only on the system node (a copy; other kinds unchanged)."""
    if doc.get("kind") != "Deployment":
        return doc
    pinned = copy.deepcopy(doc)
    spec = pinned["spec"]["template"]["spec"]
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), SYSTEM_NODE_LABEL: "true"}
    return pinned


def argo_objects(rendered: Iterable[Obj], workflow_controller: str, executor: str, instance_id: str = "") -> list[Obj]:
    """What of Argo's rendered cluster install runs here: everything but argo-server, with the
    workflow-controller's image, flags and configuration set for the local cluster. Pure."""
    kept: list[Obj] = []
    for original in rendered:
        name = (original.get("metadata") or {}).get("name", "")
        if "argo-server" in name:
            continue
        doc = copy.deepcopy(original)
        if doc["kind"] == "ConfigMap" and name == CONFIGMAP:
            # As docs/operator-guide.md asks of an operator's Argo: a Workflow may only reference
            # a template (the controller may create Workflows; this keeps out inline containers).
            config = {**controller_config(instance_id), "workflowRestrictions": {"templateReferencing": "Secure"}}
            doc["data"] = {"config": yaml.safe_dump(config, sort_keys=True)}
        if doc["kind"] == "Deployment" and name == "workflow-controller":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container["image"] = workflow_controller
            container["imagePullPolicy"] = "Never"
            container["args"] = [
                f"--configmap={CONFIGMAP}",
                f"--executor-image={executor}",
                "--executor-image-pull-policy=Never",
                "--loglevel=info",
                "--workflow-workers=8",
            ]
            # One replica: no leader election to wait out; re-reconcile 1 s after a change.
            container["env"] = [
                *container.get("env", []),
                {"name": "LEADER_ELECTION_DISABLE", "value": "true"},
                {"name": "DEFAULT_REQUEUE_TIME", "value": "1s"},
            ]
            doc = pin_to_system_node(doc)
        kept.append(doc)
    return kept


def signal_objects(rendered: Iterable[Obj]) -> list[Obj]:
    """deploy/overlays/local as rendered, its Deployments pinned to the system node. Pure."""
    return [pin_to_system_node(doc) for doc in rendered]


def portal_tls_secret(cert_pem: bytes, key_pem: bytes, namespace: str = SIGNAL_NAMESPACE) -> Obj:
    def encoded(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": PORTAL_TLS_SECRET, "namespace": namespace},
        "data": {"tls.crt": encoded(cert_pem), "tls.key": encoded(key_pem)},
    }


def deployment_available(deployment: Obj) -> bool:
    """Every wanted replica of the current generation is updated and available. Pure."""
    status = deployment.get("status") or {}
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    return bool(
        status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 1)
        and status.get("updatedReplicas", 0) >= wanted
        and status.get("availableReplicas", 0) >= wanted
    )


# -- I/O -----------------------------------------------------------------------------------


def render(directory: Path) -> list[Obj]:
    """``kubectl kustomize DIRECTORY`` (the kubectl in the kplane binary)."""
    done = subprocess.run(
        [str(kplane_binary()), "kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise InstallError(f"kubectl kustomize {directory} failed (exit {done.returncode}): {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def argo_manifests(build_dir: Path) -> Path:
    """The Argo module's cluster install, extracted by localcluster/argo/build.sh."""
    path = build_dir.parent / f"src-{ARGO_VERSION}" / ARGO_MODULE / "manifests" / "cluster-install-no-crds"
    if not path.is_dir():
        raise InstallError(f"{path} is missing: run localcluster/argo/build.sh (make argo) to extract the Argo module")
    return path


async def apply_all(admin: KubeClient, docs: Iterable[Obj]) -> None:
    for doc in docs:
        try:
            await admin.apply(object_path(doc), doc)
        except ApiError as error:
            raise InstallError(
                f"applying {doc['kind']} {doc['metadata'].get('namespace', '')}/{doc['metadata']['name']} "
                f"failed: {error}"
            ) from error


async def wait_available(
    admin: KubeClient, namespace: str, name: str, timeout: float, why: Callable[[], str] = lambda: ""
) -> float:
    """Wait until Deployment ``namespace/name`` is available; returns the seconds it took."""
    began = time.monotonic()
    path = resource_path("apps/v1", "deployments", namespace, name)
    while True:
        if deployment_available(await admin.get(path)):
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            pods = await admin.get(resource_path("v1", "pods", namespace))
            states = [
                f"{p['metadata']['name']}: {p.get('status', {}).get('phase')} "
                f"{[c.get('state') for c in p.get('status', {}).get('containerStatuses', [])]}"
                for p in pods["items"]
            ]
            raise InstallError(
                f"Deployment {namespace}/{name} not available after {timeout:.0f}s; its namespace's Pods: "
                f"{states}\n{why()}"
            )
        await asyncio.sleep(0.5)


@dataclass
class InCluster:
    """Installs and starts everything as Pods; ``system`` is the system node's name."""

    admin: KubeClient
    nodes: RealNodes
    system: str
    instance_id: str = ""

    async def install(self, say: Callable[[str], None] = lambda _m: None, timeout: float = 180.0) -> dict[str, float]:
        timings: dict[str, float] = {}
        began = time.monotonic()
        say("building (or finding) the images: " + ", ".join(SYSTEM_IMAGES))
        built = await asyncio.to_thread(images.Builder().build, list(SYSTEM_IMAGES))
        timings["images"] = time.monotonic() - began
        say("importing them into the nodes' containerd")
        await self._import(built)
        timings["import"] = time.monotonic() - began
        await self.admin.merge_patch(
            resource_path("v1", "nodes", name=self.system),
            # The adapter's step Pods run only on Nodes an admin labelled trusted (issue 42 M-C).
            {"metadata": {"labels": {SYSTEM_NODE_LABEL: "true", keys.TRUSTED_NODE_LABEL: "true"}}},
        )
        say("installing Argo's workflow-controller (its own manifests, from the Argo module) and the MPI operator")
        build_dir = await asyncio.to_thread(argo_build_dir)
        argo = argo_objects(
            await asyncio.to_thread(render, argo_manifests(build_dir)),
            built["workflow-controller"].reference,
            built["argoexec"].reference,
            self.instance_id,
        )
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ARGO_NAMESPACE}}
        await apply_all(self.admin, [namespace, *argo])
        rules, _source = kubeflowmpi.operator_rules()
        await kubeflowmpi.install_rbac(self.admin, rules)
        await apply_all(self.admin, [pin_to_system_node(kubeflowmpi.deployment(built["mpi-operator"].reference))])
        say("installing Signal: kubectl kustomize deploy/overlays/local, pinned to the system node")
        signal = signal_objects(await asyncio.to_thread(render, SIGNAL_OVERLAY))
        first = [d for d in signal if d["kind"] in ("Namespace", "CustomResourceDefinition")]
        await apply_all(self.admin, first)
        # As an operator names Argo's executor image on the Signal Namespace: the only image
        # besides the adapter's that signal-identities lets a signal-adapter step Pod run.
        executor = {keys.EXECUTOR_IMAGE_ANNOTATION: built["argoexec"].reference}
        await self.admin.merge_patch(
            resource_path("v1", "namespaces", name=SIGNAL_NAMESPACE), {"metadata": {"annotations": executor}}
        )
        await self._portal_certificate()
        await apply_all(self.admin, [d for d in signal if d not in first])
        waits = {
            "argo": (ARGO_NAMESPACE, "workflow-controller"),
            "mpi_operator": (kubeflowmpi.NAMESPACE, "mpi-operator"),
            "controller": (SIGNAL_NAMESPACE, "signal-controller"),
            "portal": (SIGNAL_NAMESPACE, "signal-portal"),
        }
        say("waiting for " + ", ".join(f"{ns}/{name}" for ns, name in waits.values()) + " to be available")
        for key, (ns, name) in waits.items():
            timings[key] = await wait_available(self.admin, ns, name, timeout, lambda: self.nodes.logs(10))
        timings["total"] = time.monotonic() - began
        log.info("in-cluster components available", **{k: round(v, 2) for k, v in timings.items()})
        return timings

    async def _import(self, built: dict[str, images.Image]) -> None:
        directory = images.images_dir()

        async def one(node: Any) -> None:
            names = SYSTEM_IMAGES if node.name == self.system else NODE_IMAGES
            for name in names:
                await asyncio.to_thread(node.import_archive, directory / built[name].archive)

        await asyncio.gather(*(one(node) for node in self.nodes.nodes))

    async def _portal_certificate(self) -> None:
        assert self.nodes.pki is not None
        service = f"signal-portal.{SIGNAL_NAMESPACE}.svc"
        pair = await asyncio.to_thread(
            self.nodes.pki.issue,
            "signal-portal",
            service,
            server=True,
            dns_names=(service, f"{service}.cluster.local", "signal-portal", "localhost"),
            ips=("127.0.0.1",),
        )
        await apply_all(self.admin, [portal_tls_secret(pair.cert.read_bytes(), pair.key.read_bytes())])
