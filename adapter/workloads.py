"""The backend workloads of one check, as plain dicts. Pure; no I/O.

Names are deterministic so a retried step finds (and adopts) what an earlier attempt
created: Pods ``<run>-c<check index>-p<participant index>``; one MPIJob
``sig-<12 hex of sha256(run uid)>-c<check index>`` (short, so that its workers'
hostnames ``<job>-worker-<i>`` stay DNS labels).

Every backend Pod: no API token, the Run's cordon tolerated, the check's deadline as
``activeDeadlineSeconds``, the script mounted read-only from the Run's snapshot, a
restricted security context (non-root, no privilege escalation, all capabilities dropped,
RuntimeDefault seccomp, read-only root filesystem) with only the capabilities and host
network the check's workload policy allows, and Run, check and participant labels.
"""

import hashlib
from typing import Any, Final

from adapter.inputs import Inputs
from shared import keys
from shared.durations import parse_duration
from shared.profile import Check

RESERVED_TAINT_KEY: Final = keys.RESERVED_TAINT_KEY
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
CONTAINER: Final = "runner"
SCRIPT_DIR: Final = "/signal/scripts"
SCRIPT_PATH: Final = f"{SCRIPT_DIR}/script"
WORKDIR: Final = "/signal/work"
TERMINATION_LOG: Final = "/dev/termination-log"
RUN_AS_USER: Final = 65532
MPI_API: Final = "kubeflow.org/v2beta1"
MPI_JOB_LABEL: Final = "training.kubeflow.org/job-name"
MPI_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
DEFAULT_RUNNER_IMAGE: Final = "projectsignal.dev/runner:0.1.0"
DEFAULT_SSHD: Final = "/usr/sbin/sshd"


def deadline_seconds(check: Check) -> int:
    return max(1, int(parse_duration(check.backend_active_deadline).total_seconds()))


def runner_deadline(check: Check) -> int:
    """The runner stops the script a little before the Pod's deadline, so that it can
    still report the timeout itself."""
    total = deadline_seconds(check)
    return max(1, total - max(1, min(5, total // 10)))


def pod_name(inputs: Inputs, participant_index: int) -> str:
    return f"{inputs.run_name}-c{inputs.check_index}-p{participant_index}"


def mpijob_name(inputs: Inputs) -> str:
    return f"sig-{hashlib.sha256(inputs.run_uid.encode()).hexdigest()[:12]}-c{inputs.check_index}"


def results_name(inputs: Inputs) -> str:
    return f"{inputs.run_name}-c{inputs.check_index}-results"


def evidence_name(inputs: Inputs) -> str:
    return f"{inputs.run_name}-c{inputs.check_index}-evidence"


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


def _identity_env(inputs: Inputs) -> list[dict[str, Any]]:
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
    ]


def _pod_spec(inputs: Inputs, container: dict[str, Any], *, deadline: bool = True) -> dict[str, Any]:
    check = inputs.check
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": check.workload.host_network,
        "tolerations": [
            {"key": RESERVED_TAINT_KEY, "operator": "Equal", "value": inputs.run_uid, "effect": "NoSchedule"}
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
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
    if deadline:
        spec["activeDeadlineSeconds"] = deadline_seconds(check)
    return spec


def _container(inputs: Inputs, image: str, args: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
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
    resources = _resources(inputs.check)
    if resources:
        container["resources"] = resources
    return container


def backend_pod(inputs: Inputs, participant_index: int, node_name: str, image: str) -> dict[str, Any]:
    """The Pod that runs the check's script on one participant's Node."""
    args = [
        "run",
        "--script",
        SCRIPT_PATH,
        "--deadline-seconds",
        str(runner_deadline(inputs.check)),
        "--workdir",
        WORKDIR,
        "--termination-log",
        TERMINATION_LOG,
    ]
    env = [*_identity_env(inputs), {"name": "SIGNAL_PARTICIPANT_INDEX", "value": str(participant_index)}]
    spec = _pod_spec(inputs, _container(inputs, image, args, env))
    spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(inputs, participant_index),
            "namespace": inputs.run_namespace,
            "labels": {**check_labels(inputs), keys.PARTICIPANT_LABEL: str(participant_index)},
            "ownerReferences": [run_owner(inputs)],
        },
        "spec": spec,
    }


def mpijob(inputs: Inputs, image: str, *, sshd: str = DEFAULT_SSHD) -> dict[str, Any]:
    """One MPIJob: a launcher on participant 0's Node and exactly one worker per
    participant, placed by required node affinity (the participants) and required pod
    anti-affinity (one worker per Node). ``cleanPodPolicy: None`` keeps the workers
    until the adapter has taken the evidence."""
    name = mpijob_name(inputs)
    nodes = [p.node_name for p in sorted(inputs.participants, key=lambda p: p.index)]
    labels = check_labels(inputs)
    worker_labels = {**labels, MPI_ROLE_LABEL: "worker"}

    def affinity(hosts: list[str]) -> dict[str, Any]:
        term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": hosts}]}
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}

    worker_spec = _pod_spec(
        inputs, _container(inputs, image, ["worker", "--sshd", sshd], _identity_env(inputs)), deadline=False
    )
    worker_spec["affinity"] = {
        **affinity(nodes),
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {MPI_JOB_LABEL: name, MPI_ROLE_LABEL: "worker"}},
                    "topologyKey": HOSTNAME_LABEL,
                }
            ]
        },
    }
    launcher_args = [
        "launcher",
        "--script",
        SCRIPT_PATH,
        "--deadline-seconds",
        str(runner_deadline(inputs.check)),
        "--workdir",
        WORKDIR,
        "--termination-log",
        TERMINATION_LOG,
        "--hostfile",
        "/etc/mpi/hostfile",
    ]
    launcher_container = _container(inputs, image, launcher_args, _identity_env(inputs))
    launcher_container.pop("resources", None)
    launcher_spec = _pod_spec(inputs, launcher_container)
    launcher_spec["affinity"] = affinity(nodes[:1])
    return {
        "apiVersion": MPI_API,
        "kind": "MPIJob",
        "metadata": {
            "name": name,
            "namespace": inputs.run_namespace,
            "labels": labels,
            "ownerReferences": [run_owner(inputs)],
        },
        "spec": {
            "slotsPerWorker": 1,
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {
                "cleanPodPolicy": "None",
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline_seconds(inputs.check),
            },
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {"metadata": {"labels": {**labels, MPI_ROLE_LABEL: "launcher"}}, "spec": launcher_spec},
                },
                "Worker": {
                    "replicas": len(nodes),
                    "restartPolicy": "Never",
                    "template": {"metadata": {"labels": worker_labels}, "spec": worker_spec},
                },
            },
        },
    }
