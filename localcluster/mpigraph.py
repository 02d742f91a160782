"""The object graph of a Kubeflow MPI operator v0.8 ``MPIJob`` (kubeflow.org/v2beta1), as
pure functions: the headless Service, the hostfile ConfigMap, the SSH Secret, the worker
Pods and the launcher batch/v1 Job, each with a controller reference to the MPIJob, and
the MPIJob status the operator would report. Used by ``localcluster.mpioperator``.

Only the OpenMPI implementation is simulated (hostfile ``<host> slots=<n>``).
"""

import base64
import copy
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

API_VERSION = "kubeflow.org/v2beta1"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
OPERATOR_NAME = "mpi-operator"
CONFIG_MOUNT_PATH = "/etc/mpi"
CONFIG_VOLUME = "mpi-job-config"
SSH_VOLUME = "ssh-auth"
DEFAULT_SSH_MOUNT_PATH = "/root/.ssh"
FINISHED = ("Succeeded", "Failed")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _name(job: Obj) -> str:
    return str(job["metadata"]["name"])


def _namespace(job: Obj) -> str:
    return str(job["metadata"]["namespace"])


def _replica(job: Obj, role: str) -> Obj:
    spec: Obj = job["spec"].get("mpiReplicaSpecs", {}).get(role) or {}
    return spec


def worker_replicas(job: Obj) -> int:
    """``Worker.replicas``; the operator defaults it to 1 when a Worker spec is given."""
    worker = _replica(job, "Worker")
    return int(worker.get("replicas", 1)) if worker else 0


def slots_per_worker(job: Obj) -> int:
    return int(job["spec"].get("slotsPerWorker") or 1)


def run_policy(job: Obj) -> Obj:
    policy: Obj = job["spec"].get("runPolicy") or {}
    return policy


def clean_pod_policy(job: Obj) -> str:
    """``runPolicy.cleanPodPolicy``; the v0.8 code defaults it to ``None``."""
    return str(run_policy(job).get("cleanPodPolicy") or "None")


def worker_name(job: Obj, index: int) -> str:
    return f"{_name(job)}-worker-{index}"


def launcher_name(job: Obj) -> str:
    return f"{_name(job)}-launcher"


def worker_host(job: Obj, index: int) -> str:
    return f"{worker_name(job, index)}.{_name(job)}.{_namespace(job)}.svc"


def hostfile(job: Obj) -> str:
    """One ``<worker>.<job>.<ns>.svc slots=<slotsPerWorker>`` line per worker."""
    slots = slots_per_worker(job)
    return "".join(f"{worker_host(job, i)} slots={slots}\n" for i in range(worker_replicas(job)))


def discover_hosts(job: Obj, running: set[int]) -> str:
    """The script that lists the running workers as ``host:slots`` (for elastic Horovod)."""
    slots = slots_per_worker(job)
    lines = [f"echo {worker_host(job, i)}:{slots}\n" for i in sorted(running)]
    return "#!/bin/sh\n" + "".join(lines)


def owner_reference(job: Obj) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "name": _name(job),
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _labels(job: Obj, role: str | None = None) -> dict[str, str]:
    labels = {OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: _name(job)}
    if role:
        labels[JOB_ROLE_LABEL] = role
    return labels


def _metadata(job: Obj, name: str, labels: dict[str, str]) -> Obj:
    return {
        "name": name,
        "namespace": _namespace(job),
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }


def service(job: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, _name(job), _labels(job)),
        "spec": {"clusterIP": "None", "selector": _labels(job, "worker"), "publishNotReadyAddresses": True},
    }


def config_map(job: Obj, running: set[int]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, f"{_name(job)}-config", _labels(job)),
        "data": {"hostfile": hostfile(job), "discover_hosts.sh": discover_hosts(job, running)},
    }


def ssh_secret(job: Obj, private_key: bytes, public_key: bytes) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "metadata": _metadata(job, f"{_name(job)}-ssh", _labels(job)),
        "data": {
            "ssh-privatekey": base64.b64encode(private_key).decode(),
            "ssh-publickey": base64.b64encode(public_key).decode(),
        },
    }


def _ssh_volume(job: Obj) -> Obj:
    return {
        "name": SSH_VOLUME,
        "secret": {
            "secretName": f"{_name(job)}-ssh",
            "defaultMode": 0o600,
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa"},
                {"key": "ssh-publickey", "path": "id_rsa.pub"},
                {"key": "ssh-publickey", "path": "authorized_keys"},
            ],
        },
    }


def _pod_template(job: Obj, role: str, labels: dict[str, str], hostname: str | None) -> Obj:
    """A deep copy of the role's template with the operator's labels, hostname, subdomain
    and the SSH volume mounted in every container."""
    template = copy.deepcopy(_replica(job, role).get("template") or {})
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**meta.get("labels", {}), **labels}
    spec = template.setdefault("spec", {})
    if hostname:
        spec["hostname"] = hostname
    spec["subdomain"] = _name(job)
    spec["volumes"] = [*spec.get("volumes", []), _ssh_volume(job)]
    mount_path = job["spec"].get("sshAuthMountPath") or DEFAULT_SSH_MOUNT_PATH
    for container in spec.get("containers", []):
        container["volumeMounts"] = [*container.get("volumeMounts", []), {"name": SSH_VOLUME, "mountPath": mount_path}]
    restart = _replica(job, role).get("restartPolicy") or "Never"
    spec["restartPolicy"] = "OnFailure" if restart == "OnFailure" else "Never"
    return template


def worker_pod(job: Obj, index: int) -> Obj:
    labels = {**_labels(job, "worker"), REPLICA_INDEX_LABEL: str(index)}
    template = _pod_template(job, "Worker", labels, worker_name(job, index))
    metadata = {**template["metadata"], **_metadata(job, worker_name(job, index), template["metadata"]["labels"])}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def launcher_env() -> list[Obj]:
    return [
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
        {"name": "OMPI_MCA_orte_default_hostfile", "value": f"{CONFIG_MOUNT_PATH}/hostfile"},
        {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
    ]


def launcher_job(job: Obj) -> Obj:
    template = _pod_template(job, "Launcher", _labels(job, "launcher"), launcher_name(job))
    spec = template["spec"]
    spec["volumes"].append(
        {
            "name": CONFIG_VOLUME,
            "configMap": {
                "name": f"{_name(job)}-config",
                "items": [
                    {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                    {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
                ],
            },
        }
    )
    for container in spec.get("containers", []):
        container["env"] = [*container.get("env", []), *launcher_env()]
        container["volumeMounts"].append({"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH})
    policy = run_policy(job)
    job_spec: Obj = {"backoffLimit": int(policy.get("backoffLimit", 0)), "template": template}
    for key in ("activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if policy.get(key) is not None:
            job_spec[key] = policy[key]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(job, launcher_name(job), _labels(job, "launcher")),
        "spec": job_spec,
    }


def condition(job_status: Obj, kind: str) -> Obj | None:
    for item in job_status.get("conditions", []):
        if item.get("type") == kind:
            found: Obj = item
            return found
    return None


def set_condition(status: Obj, kind: str, value: bool, reason: str, message: str) -> None:
    """Set one condition (transition time only on a change). Succeeded or Failed turn
    Running to False, as the operator does."""
    conditions: list[Obj] = status.setdefault("conditions", [])
    wanted = "True" if value else "False"
    current = condition(status, kind)
    if current is not None and (current["status"], current.get("reason")) == (wanted, reason):
        return
    stamp = now()
    changed = current is None or current["status"] != wanted
    entry = {
        "type": kind,
        "status": wanted,
        "reason": reason,
        "message": message,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp if changed or current is None else current["lastTransitionTime"],
    }
    status["conditions"] = [c for c in conditions if c.get("type") != kind] + [entry]
    if kind in FINISHED and value:
        running = condition(status, "Running")
        if running is not None and running["status"] == "True":
            set_condition(status, "Running", False, reason, message)


def finished(status: Obj) -> str | None:
    for kind in FINISHED:
        found = condition(status, kind)
        if found is not None and found["status"] == "True":
            return kind
    return None
