"""A check's MPIJobs, as plain dicts. Pure; no I/O. The shapes every backend Pod shares (and
the names) are adapter/workloads.py's; what is MPI's is here: OpenMPI's environment, the
launcher's and workers' placement (docs in adapter/workloads.py's "MPI over SSH"), and the
MPIJob's run policy."""

from collections.abc import Mapping
from typing import Any, Final

from adapter.inputs import Inputs
from adapter.placement import node_affinity, off_nodes_under_test
from adapter.workloads import (
    DEFAULT_SSHD,
    HOSTNAME_LABEL,
    MPI_API,
    MPI_JOB_LABEL,
    MPI_ROLE_LABEL,
    RESERVED_TAINT_KEY,
    WORKDIR,
    WORKER_GRACE_SECONDS,
    check_labels,
    deadline_seconds,
    identity_env,
    mpijob_name,
    mpijob_names,
    pod_annotations,
    pod_spec,
    run_owner,
    runner_args,
    runner_container,
)
from shared import keys
from shared.profile import Check

MPI_NO_SHARED_TOPOLOGY: Final = ("OMPI_MCA_rtc_hwloc_vmhole", "none")
"""OpenMPI 4.1's daemons share their hwloc topology with the ranks through a shared-memory
segment mapped at a fixed address in the "biggest" hole of the address space, which can lie
just below the stack: a daemon then segfaults in ``hwloc_shmem_topology_write`` as its stack
grows into it ("ORTE was unable to reliably start one or more daemons", mpirun exit 139),
depending on where ASLR put things. Seen in about one MPIJob check in four here. ``none``
turns the sharing off; each rank reads its own topology."""


def _mpi_env(inputs: Inputs) -> list[dict[str, Any]]:
    """OpenMPI's session directory on the writable scratch volume (the root filesystem is
    read-only), and no shared-memory topology (``MPI_NO_SHARED_TOPOLOGY``). ``mpirun``
    passes ``OMPI_MCA_`` variables of its environment to the daemons it starts over ssh. The
    workers' sshd port (``keys.SSHD_PORT``) is the runner image's ssh client configuration's:
    the MPI operator appends its own ``OMPI_MCA_plm_rsh_args`` after the template's env, so a
    port set here would be overridden."""
    name, value = MPI_NO_SHARED_TOPOLOGY
    return [
        *identity_env(inputs),
        {"name": "OMPI_MCA_orte_tmpdir_base", "value": WORKDIR},
        {"name": name, "value": value},
    ]


def mpijob(
    inputs: Inputs,
    image: str,
    *,
    sshd: str = DEFAULT_SSHD,
    participant_index: int | None = None,
    worker_grace_seconds: int = WORKER_GRACE_SECONDS,
    trusted: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One MPIJob. ``crossNode`` (``participant_index`` None): a launcher on a Node that is
    not under test (``off_nodes_under_test``; no Signal taint tolerated) and exactly one
    worker per participant, placed by required node affinity (the participants) and required pod
    anti-affinity (one worker per Node). ``perNode`` (``participant_index`` given): a launcher
    and one worker, both on that participant's Node. ``slotsPerWorker`` ranks per worker; the
    launcher requests no resources. ``cleanPodPolicy: None`` keeps the workers
    until the adapter has taken the evidence; their own deadline bounds them if it never
    does."""
    name = mpijob_name(inputs, participant_index)
    ordered = sorted(inputs.participants, key=lambda p: p.index)
    if participant_index is None:
        nodes = [p.node_name for p in ordered]
    else:
        nodes = [next(p.node_name for p in ordered if p.index == participant_index)]
    labels = check_labels(inputs)
    if participant_index is not None:
        labels[keys.PARTICIPANT_LABEL] = str(participant_index)
    worker_labels = {**labels, MPI_ROLE_LABEL: "worker"}
    env = _mpi_env(inputs)
    worker_deadline = deadline_seconds(inputs.check) + worker_grace_seconds
    worker_spec = pod_spec(
        inputs, runner_container(inputs, image, ["worker", "--sshd", sshd], env), deadline=worker_deadline
    )
    worker_spec["affinity"] = {
        **node_affinity(nodes),
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
        *runner_args("launcher", inputs),
        "--hostfile",
        "/etc/mpi/hostfile",
        "--slots",
        str(inputs.check.slots_per_worker),
    ]
    if sshd:
        # Kueue's suspended MPIJobs get their launcher as early as their workers (runner/mpi.py).
        launcher_args += ["--worker-port", str(keys.SSHD_PORT)]
    launcher_container = runner_container(inputs, image, launcher_args, env)
    launcher_container.pop("resources", None)
    launcher_spec = pod_spec(inputs, launcher_container)
    launcher_spec.pop("runtimeClassName", None)  # the ranks run in the workers; mpirun needs no GPU
    if participant_index is None:
        launcher_spec["affinity"] = off_nodes_under_test(nodes, trusted)
        launcher_spec["tolerations"] = [t for t in launcher_spec["tolerations"] if t["key"] != RESERVED_TAINT_KEY]
    else:
        launcher_spec["affinity"] = node_affinity(nodes)
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
            "slotsPerWorker": inputs.check.slots_per_worker,
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "WaitForWorkersReady",
            "sshAuthMountPath": keys.RUNNER_SSH_DIR,
            "runPolicy": {
                "cleanPodPolicy": "None",
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline_seconds(inputs.check),
            },
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"labels": {**labels, MPI_ROLE_LABEL: "launcher"}},
                        "spec": launcher_spec,
                    },
                },
                "Worker": {
                    "replicas": len(nodes),
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"labels": worker_labels, **_annotated(inputs.check)},
                        "spec": worker_spec,
                    },
                },
            },
        },
    }


def _annotated(check: Check) -> dict[str, Any]:
    """An MPI worker template's annotations (its secondary networks), when there are any."""
    annotations = pod_annotations(check)
    return {"annotations": annotations} if annotations else {}


def mpijobs(
    inputs: Inputs, image: str, *, sshd: str = DEFAULT_SSHD, trusted: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Every MPIJob of the check: one (crossNode, its launcher on a ``trusted`` Node when an
    operator marked them) or one per participant (perNode)."""
    return [
        mpijob(inputs, image, sshd=sshd, participant_index=index, trusted=trusted) for _, index in mpijob_names(inputs)
    ]
