"""The backend workloads of one check, as plain dicts. Pure; no I/O.

Names are deterministic so a retried step finds (and adopts) what an earlier attempt
created: Pods ``<run>-c<check index>-p<participant index>``; a ``crossNode`` MPI check's
one MPIJob ``sig-<12 hex of sha256(run uid)>-c<check index>``, a ``perNode`` one's MPIJob
per participant ``...-c<check index>-p<participant index>`` (short, so that the workers'
hostnames ``<job>-worker-<i>`` stay DNS labels).

Every backend Pod: no API token, the Run's cordon (except a ``crossNode`` launcher) and the
check's own tolerations (the Nodes' taints an operator allowed) tolerated, a deadline (``activeDeadlineSeconds``: the
check's for Pods and launchers, the check's plus a grace for MPI workers, so a worker never
outlives a dead adapter for long), the script mounted read-only from the Run's snapshot, a
restricted security context (non-root, no privilege escalation, all capabilities dropped,
RuntimeDefault seccomp, read-only root filesystem) with only the capabilities and host
network the check's workload policy allows, and Run, check and participant labels.

Kueue: a check that names a queue labels its workloads ``kueue.x-k8s.io/queue-name``; a Pod check
with more than one participant is also one Kueue pod group (``pod_group``: all or nothing).

Placement: a Pod check's Pod is bound with ``nodeName``, except when it names a Kueue queue:
Kueue gates such Pods and the API server refuses a gated Pod with ``nodeName``, so it is
placed by required node affinity on ``metadata.name`` instead, as are MPI workers and a
``perNode`` launcher (on its participant's Node). A ``crossNode`` launcher speaks for every
participant, so it never runs on a Node under test (``off_nodes_under_test``), and, where an operator
marked trusted Nodes with ``node-restriction.kubernetes.io/`` labels (the adapter's
``--trusted-node-selector``, the step Pods' own), only on those (docs/security.md).

MPI over SSH on a real cluster: the MPI operator mounts its key Secret at the runner user's
``~/.ssh`` (``sshAuthMountPath``), the Pods' ``fsGroup`` lets that user read it, OpenMPI's
session directory is on the writable scratch volume, and the launcher reaches the workers'
non-root sshd on ``keys.SSHD_PORT`` (set in the runner image's ssh client configuration).
"""

import hashlib
from typing import Any, Final

from adapter.inputs import Inputs

# Re-exported (explicitly, for mypy): the adapter's tests name Kueue's marks as workloads'.
from adapter.kueue import KUEUE_POD_GROUP_COUNT as KUEUE_POD_GROUP_COUNT  # noqa: PLC0414
from adapter.kueue import KUEUE_POD_GROUP_LABEL as KUEUE_POD_GROUP_LABEL  # noqa: PLC0414
from adapter.kueue import KUEUE_QUEUE_LABEL as KUEUE_QUEUE_LABEL  # noqa: PLC0414
from adapter.kueue import KUEUE_RETRIABLE_IN_GROUP as KUEUE_RETRIABLE_IN_GROUP  # noqa: PLC0414
from adapter.kueue import add_pod_group
from adapter.kueue import pod_group as pod_group  # noqa: PLC0414
from adapter.placement import node_affinity
from shared import keys
from shared.durations import parse_duration
from shared.profile import Check
from shared.workload import parameter_env_name

RESERVED_TAINT_KEY: Final = keys.RESERVED_TAINT_KEY
"""``false`` on a group's Pods: Signal never replaces a Pod, so a Pod that ends or is deleted ends
the group (Kueue then releases its quota and removes its finalizers, also from Pods it never
admitted, which the adapter deletes at the check's deadline)."""
CONTAINER: Final = "runner"
SCRIPT_DIR: Final = "/signal/scripts"
SCRIPT_PATH: Final = f"{SCRIPT_DIR}/script"
WORKDIR: Final = "/signal/work"
TERMINATION_LOG: Final = "/dev/termination-log"
RUN_AS_USER: Final = keys.RUNNER_UID
MPI_API: Final = keys.MPIJOB_API_VERSION
MPI_JOB_LABEL: Final = "training.kubeflow.org/job-name"
MPI_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
NETWORKS_ANNOTATION: Final = keys.MULTUS_NETWORKS_ANNOTATION
SHM_DIR: Final = "/dev/shm"
INJECT_CONTAINER: Final = "signal-runner-inject"
INJECTED_DIR: Final = "/signal/runner"
"""Where the init container copies Signal's runner for a check's own image (read-only there)."""
INJECTED_LAUNCH: Final = f"{INJECTED_DIR}/runner/launch.py"
CHECK_IMAGE_PYTHON: Final = "python3"
"""What a check's own image must have on its PATH (3.10 or newer) to run the injected runner."""
DEFAULT_RUNNER_IMAGE: Final = keys.DEFAULT_RUNNER_IMAGE
DEFAULT_SSHD: Final = "/usr/sbin/sshd"
WORKER_GRACE_SECONDS: Final = 120
"""How long an MPI worker may outlive the check's deadline (its launcher may start late)."""


def deadline_seconds(check: Check) -> int:
    return max(1, int(parse_duration(check.backend_active_deadline).total_seconds()))


def runner_deadline(check: Check) -> int:
    """The runner stops the script a little before the Pod's deadline, so that it can
    still report the timeout itself."""
    total = deadline_seconds(check)
    return max(1, total - max(1, min(5, total // 10)))


def pod_name(inputs: Inputs, participant_index: int) -> str:
    return f"{inputs.run_name}-c{inputs.check_index}-p{participant_index}"


def mpijob_name(inputs: Inputs, participant_index: int | None = None) -> str:
    """The crossNode MPIJob's name, or (``participant_index``) a perNode one's."""
    base = f"sig-{hashlib.sha256(inputs.run_uid.encode()).hexdigest()[:12]}-c{inputs.check_index}"
    return base if participant_index is None else f"{base}-p{participant_index}"


def mpijob_names(inputs: Inputs) -> list[tuple[str, int | None]]:
    """(name, participant index or None) of every MPIJob of the check, in order."""
    if inputs.check.mpi_scope == "crossNode":
        return [(mpijob_name(inputs), None)]
    return [(mpijob_name(inputs, p.index), p.index) for p in sorted(inputs.participants, key=lambda p: p.index)]


def results_name(inputs: Inputs) -> str:
    return keys.check_results_name(inputs.run_name, inputs.check_index)


def evidence_name(inputs: Inputs) -> str:
    return keys.check_evidence_name(inputs.run_name, inputs.check_index)


def run_owner(inputs: Inputs) -> dict[str, Any]:
    """Owner reference to the Run. No blockOwnerDeletion: that would need update on the
    Run's finalizers, which the adapter is deliberately not granted."""
    return {"apiVersion": keys.API_VERSION, "kind": keys.RUN_KIND, "name": inputs.run_name, "uid": inputs.run_uid}


def check_labels(inputs: Inputs) -> dict[str, str]:
    labels = {
        keys.RUN_NAME_LABEL: inputs.run_name,
        keys.RUN_UID_LABEL: inputs.run_uid,
        keys.CHECK_LABEL: inputs.check.name,
        keys.COMPONENT_LABEL: "backend",
    }
    if inputs.check.workload.kueue_queue_name:
        labels[KUEUE_QUEUE_LABEL] = inputs.check.workload.kueue_queue_name
    return labels


def check_selector(inputs: Inputs) -> str:
    return f"{keys.RUN_UID_LABEL}={inputs.run_uid},{keys.CHECK_LABEL}={inputs.check.name}"


def _resources(check: Check) -> dict[str, Any]:
    amounts: dict[str, str] = {}
    if check.workload.cpu:
        amounts["cpu"] = check.workload.cpu
    if check.workload.memory:
        amounts["memory"] = check.workload.memory
    if check.gpu_count:
        amounts[keys.GPU_RESOURCE] = str(check.gpu_count)
    amounts.update({k: str(v) for k, v in check.workload.extended_resources.items()})
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def _security(check: Check) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {
            "drop": ["ALL"],
            **({"add": list(check.workload.capabilities)} if check.workload.capabilities else {}),
        },
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def identity_env(inputs: Inputs) -> list[dict[str, Any]]:
    def field(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    return [
        field("SIGNAL_NODE_NAME", "spec.nodeName"),
        field("SIGNAL_POD_NAME", "metadata.name"),
        field("SIGNAL_POD_UID", "metadata.uid"),
        field("SIGNAL_NAMESPACE", "metadata.namespace"),
        {"name": "SIGNAL_RUN_NAME", "value": inputs.run_name},
        {"name": "SIGNAL_RUN_UID", "value": inputs.run_uid},
        {"name": "SIGNAL_CHECK", "value": inputs.check.name},
        {"name": "SIGNAL_SCRIPT", "value": SCRIPT_PATH},
        # The root filesystem is read-only: temporary files (OpenMPI's session directory,
        # an MPI rank's scratch space) go to the Pod's writable scratch volume.
        {"name": "TMPDIR", "value": WORKDIR},
        *parameter_env(inputs.check),
    ]


def parameter_env(check: Check) -> list[dict[str, Any]]:
    """The check's parameters, each as ``SIGNAL_PARAM_<NAME upper-cased>`` (sorted by name)."""
    return [{"name": parameter_env_name(k), "value": v} for k, v in sorted(check.parameters.items())]


def container_image(check: Check, runner_image: str) -> str:
    """The image of the runner container: the check's own, or the runner image."""
    return check.image or runner_image


def tolerations(inputs: Inputs) -> list[dict[str, Any]]:
    """The Run's cordon, the quarantine the Run adopted (shared/quarantine.py: read from the
    Run, which only the controller writes), then the check's own tolerations (validated by the
    profile model)."""
    own: list[dict[str, Any]] = [
        {"key": RESERVED_TAINT_KEY, "operator": "Equal", "value": inputs.run_uid, "effect": "NoSchedule"}
    ]
    own += [dict(t) for t in inputs.quarantine_tolerations]
    for toleration in inputs.check.workload.tolerations:
        entry = {"key": toleration.key, "operator": toleration.operator, "effect": toleration.effect}
        if toleration.operator == "Equal":
            entry["value"] = toleration.value
        own.append(entry)
    return own


def pod_spec(inputs: Inputs, container: dict[str, Any], *, deadline: int | None = None) -> dict[str, Any]:
    check = inputs.check
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": check.workload.host_network,
        "tolerations": tolerations(inputs),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            # The MPI operator's key Secret is mounted root-owned; fsGroup lets the runner's
            # user read it (ssh accepts a key it does not own that is group-readable).
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {
                "name": "scripts",
                "configMap": {
                    "name": inputs.snapshot,
                    "items": [{"key": check.script_key, "path": "script"}],
                    "defaultMode": 0o555,
                },
            },
            {"name": "work", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
    }
    if check.workload.shm_size:
        spec["volumes"].append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": check.workload.shm_size}})
    if check.workload.runtime_class_name:
        spec["runtimeClassName"] = check.workload.runtime_class_name
    spec["activeDeadlineSeconds"] = deadline if deadline is not None else deadline_seconds(check)
    return spec


def runner_container(inputs: Inputs, image: str, args: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "args": args,
        "env": env,
        "securityContext": _security(inputs.check),
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"name": "scripts", "mountPath": SCRIPT_DIR, "readOnly": True},
            {"name": "work", "mountPath": WORKDIR},
        ],
    }
    if inputs.check.workload.shm_size:
        container["volumeMounts"].append({"name": "shm", "mountPath": SHM_DIR})
    resources = _resources(inputs.check)
    if resources:
        container["resources"] = resources
    return container


def pod_annotations(check: Check) -> dict[str, str]:
    """The Multus secondary networks of the check, if any (its only annotation)."""
    return {NETWORKS_ANNOTATION: ",".join(check.workload.networks)} if check.workload.networks else {}


def _inject(spec: dict[str, Any], container: dict[str, Any], check_image: str, runner_image: str) -> None:
    """Run the check's own image with Signal's runner injected: an init container of the runner
    image copies the runner (standard-library Python only) into a Pod-local volume, and the
    check's container starts it with its own ``python3``, isolated and without ``site``."""
    spec["volumes"].append({"name": "signal-runner", "emptyDir": {"sizeLimit": "64Mi"}})
    init = {
        "name": INJECT_CONTAINER,
        "image": runner_image,
        "args": ["inject", "--to", INJECTED_DIR],
        "securityContext": container["securityContext"],
        "volumeMounts": [{"name": "signal-runner", "mountPath": INJECTED_DIR}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
    }
    container["image"] = check_image
    container["command"] = [CHECK_IMAGE_PYTHON, "-I", "-S", INJECTED_LAUNCH]
    container["volumeMounts"].append({"name": "signal-runner", "mountPath": INJECTED_DIR, "readOnly": True})
    spec["initContainers"] = [init]


def runner_args(role: str, inputs: Inputs) -> list[str]:
    """The runner's command line for ``role`` (``run``, ``launcher``): the script from the Run's
    snapshot, the runner's own deadline, its scratch directory and its termination log."""
    return [
        role,
        "--script",
        SCRIPT_PATH,
        "--deadline-seconds",
        str(runner_deadline(inputs.check)),
        "--workdir",
        WORKDIR,
        "--termination-log",
        TERMINATION_LOG,
    ]


def backend_pod(inputs: Inputs, participant_index: int, node_name: str, image: str) -> dict[str, Any]:
    """The Pod that runs the check's script on one participant's Node (``image``: the runner
    image; a check that names its own image gets the runner injected into it)."""
    args = runner_args("run", inputs)
    env = [*identity_env(inputs), {"name": "SIGNAL_PARTICIPANT_INDEX", "value": str(participant_index)}]
    container = runner_container(inputs, image, args, env)
    spec = pod_spec(inputs, container)
    if inputs.check.image:
        _inject(spec, container, inputs.check.image, image)
    if inputs.check.workload.kueue_queue_name:
        # Kueue gates the Pod; a gated Pod may not carry nodeName, so pin it by affinity.
        spec["affinity"] = node_affinity([node_name])
    else:
        spec["nodeName"] = node_name
    metadata: dict[str, Any] = {
        "name": pod_name(inputs, participant_index),
        "namespace": inputs.run_namespace,
        "labels": {**check_labels(inputs), keys.PARTICIPANT_LABEL: str(participant_index)},
        "ownerReferences": [run_owner(inputs)],
    }
    if annotations := pod_annotations(inputs.check):
        metadata["annotations"] = annotations
    add_pod_group(inputs, metadata)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
