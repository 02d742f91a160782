"""Every API group, label, annotation and condition key Project Signal writes.

One module so that no component spells a key on its own. Pure constants; no I/O.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from typing import Final

GROUP: Final = "projectsignal.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "projectsignal.dev/v1alpha1"  # GROUP/VERSION, spelled out for typing

PROFILE_KIND: Final = "CertificationProfile"
PROFILE_PLURAL: Final = "certificationprofiles"
RUN_KIND: Final = "CertificationRun"
RUN_PLURAL: Final = "certificationruns"

# Set by an operator (or the recurrence policy) to request certification of a Node
# by the named profile; only Nodes carrying it are candidates. Under the prefix NodeRestriction
# keeps from kubelets, so that no Node requests itself (or a group of its choice); the
# ``signal.`` form never collides with the per-profile result labels (``signal-<profile>``).
CERTIFY_LABEL: Final = "node-restriction.kubernetes.io/signal.certify"
# The request label of earlier versions: its own kubelet can write it, so it requests nothing;
# a Node carrying it gets a Warning Event saying which label to use.
LEGACY_CERTIFY_LABEL: Final = f"{GROUP}/certify"
# Reservation of a Node by a Run: label (Run uid) for selection, annotation for detail.
RESERVED_BY_LABEL: Final = f"{GROUP}/reserved-by"
RESERVATION_ANNOTATION: Final = f"{GROUP}/reservation"
# Set on Nodes released for a retry of an Inconclusive Run: "<profile>:<next attempt>";
# consumed by the next reservation, like the request label.
ATTEMPT_ANNOTATION: Final = f"{GROUP}/next-attempt"
# While Signal holds a Node (reserved, and after a Fail until its Run is released) autoscalers
# must not remove it: set by the reservation unless the Node has them already, and removed by
# the release only when the reservation set them (issue 43, item 5).
AUTOSCALER_SCALE_DOWN_DISABLED: Final = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
KARPENTER_DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
DO_NOT_DISRUPT_ANNOTATIONS: Final = (AUTOSCALER_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT)
# Signal's cordon: a NoSchedule taint whose value is the reserving Run's uid. Backend
# workloads of that Run tolerate exactly it.
RESERVED_TAINT_KEY: Final = f"{GROUP}/reserved"
NODE_RESTRICTION_PREFIX: Final = "node-restriction.kubernetes.io/"
"""Label keys under this prefix cannot be set by a kubelet on its own Node (NodeRestriction)."""
TRUSTED_NODE_LABEL: Final = f"{NODE_RESTRICTION_PREFIX}signal.trusted"
"""The default trusted-node label: adapter step Pods (and their admission policy,
deploy/base/identity-admission-policy.yaml) require it, so only an admin-labelled Node ever
holds the adapter's token (issue 42 M-C)."""
# Prefix of the per-profile result label: certified.projectsignal.dev/<profile>.
CERTIFIED_LABEL_PREFIX: Final = f"certified.{GROUP}/"

# A Node condition per profile that a remediator (e.g. a NodeHealthCheck) watches: type
# failed.projectsignal.dev/<profile>, True only when the Node's latest result is Fail (issue 43).
FAILED_CONDITION_PREFIX: Final = f"failed.{GROUP}/"

# Labels Signal puts on the objects it creates.
RUN_NAME_LABEL: Final = f"{GROUP}/run"
RUN_UID_LABEL: Final = f"{GROUP}/run-uid"
PROFILE_LABEL: Final = f"{GROUP}/profile"
CHECK_LABEL: Final = f"{GROUP}/check"
PARTICIPANT_LABEL: Final = f"{GROUP}/participant-index"
COMPONENT_LABEL: Final = f"{GROUP}/component"

# Simulated-fleet and topology labels used by the local control plane and examples.
GPU_RESOURCE: Final = "nvidia.com/gpu"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
RACK_LABEL: Final = f"{GROUP}/rack"

FIELD_MANAGER: Final = "signal-controller"

# The contract between the controller (which submits Workflows) and the adapter's fixed
# WorkflowTemplate: its name and its Workflow-level parameters, all strings.
WORKFLOW_TEMPLATE: Final = "signal-adapter"
WORKFLOW_PARAMETERS: Final = (
    "run-name",
    "run-namespace",
    "run-uid",
    "participants",
    "participants-json",
    "checks",
    "check-count",
    "snapshot",
)


# Argo Workflows' API (the controller creates Workflows; the adapter's template is one).
ARGO_API_VERSION: Final = "argoproj.io/v1alpha1"
WORKFLOW_PLURAL: Final = "workflows"
# The Kubeflow MPI operator's MPIJob (MPIJob checks only; a cluster may lack its CRD).
MPIJOB_API_VERSION: Final = "kubeflow.org/v2beta1"
MPIJOB_PLURAL: Final = "mpijobs"
MPIJOB_CRD: Final = "mpijobs.kubeflow.org"

# Where the MPI operator mounts the hostfile in an MPIJob's launcher.
MPI_HOSTFILE: Final = "/etc/mpi/hostfile"


def run_evidence_name(run_name: str) -> str:
    """The Run's evidence ConfigMap (the controller's decision and every check's evidence)."""
    return f"{run_name}-evidence"


def check_results_name(run_name: str, index: int) -> str:
    """A check's results ConfigMap (the adapter's, written before anything is deleted)."""
    return f"{run_name}-c{index}-results"


def check_evidence_name(run_name: str, index: int) -> str:
    """A check's evidence ConfigMap (the adapter's, with the cleanup outcome)."""
    return f"{run_name}-c{index}-evidence"


# Argo's own label: a workflow-controller configured with an instanceID only runs Workflows
# carrying it (set by the controller's --workflow-instance-id).
ARGO_INSTANCE_LABEL: Final = "workflows.argoproj.io/controller-instanceid"


def certified_label(profile_name: str) -> str:
    """The Node label that carries the latest result of ``profile_name``."""
    return f"{CERTIFIED_LABEL_PREFIX}{profile_name}"


def failed_condition(profile_name: str) -> str:
    """The Node condition type that says whether ``profile_name`` failed the Node."""
    return f"{FAILED_CONDITION_PREFIX}{profile_name}"


DEFAULT_RUNNER_IMAGE: Final = "projectsignal.dev/runner:0.1.0"
"""The runner image as released (deploy/ pins it by digest through kustomize's ``images:``)."""
RUNNER_IMAGE_ANNOTATION: Final = "projectsignal.dev/runner-image"
ADAPTER_IMAGE_ANNOTATION: Final = "projectsignal.dev/adapter-image"
"""On the Signal Namespace: the adapter image, the one a signal-adapter step Pod runs besides
Argo's executor (deploy/base/identity-admission-policy.yaml; kustomize's images: sets it)."""
EXECUTOR_IMAGE_ANNOTATION: Final = "projectsignal.dev/argo-executor-image"
"""On the Signal Namespace: Argo's executor image, set by the operator (the same policy)."""
"""On the Signal Namespace: the one runner image the adapter's Pods and MPIJobs may run. The
adapter's admission policy reads it (``namespaceObject``); kustomize's ``images:`` sets it
(deploy/base/kustomizeconfig.yaml), as it sets the adapter's --runner-image. Only cluster
admins can change a Namespace."""


# The runner image's user and its SSH set-up for MPIJob checks on a real cluster, shared by
# the adapter (the MPIJob's sshAuthMountPath, the launcher's ssh port) and the runner image
# (Dockerfile.runner writes the sshd and ssh client configurations to match).
RUNNER_UID: Final = 65532
RUNNER_HOME: Final = "/home/signal"
RUNNER_SSH_DIR: Final = f"{RUNNER_HOME}/.ssh"
# Non-root sshd listens above 1024; the launcher's ssh client (OpenMPI's rsh agent) uses it.
SSHD_PORT: Final = 2222

# Workload settings of a check (shared/profile.py WorkloadPolicy, Check.image; issue 44).
MULTUS_NETWORKS_ANNOTATION: Final = "k8s.v1.cni.cncf.io/networks"
"""Multus's secondary-network annotation: the one annotation a backend Pod may carry for its
check's ``workload.networks`` (deploy/base/adapter-admission-policy.yaml, variable ``networks``)."""
CHECK_IMAGES_ANNOTATION: Final = "projectsignal.dev/check-images"
"""On the Signal Namespace: the installation's allow-list of check images, comma-separated
``name@sha256:<digest>``; a check's ``image`` is admitted when its digest is one of these
(compared by digest, never by tag)."""
