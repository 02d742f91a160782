"""The adapter's pure logic: Workflow inputs against the Run (adapter/inputs.py), the backend
workloads it creates (adapter/workloads.py) and how it turns observed Pods into one result
per participant (adapter/collect.py). Pods are dicts shaped like the API server's."""

import copy
import json
import re
from typing import Any

import pytest

from adapter import mpispec, workloads
from adapter.collect import collect_mpi, collect_pods, foreign, pod_result, pod_workloads, terminal
from adapter.inputs import Inputs, Refusal, parse_inputs, validate_against_run
from adapter.kueue import KUEUE_ADMISSION_GATE, KUEUE_QUEUE_LABEL
from runner import mpi
from shared import keys
from shared.evidence import ParticipantResult
from shared.meta import DNS_LABEL_PATTERN
from shared.result import LauncherReport
from shared.run import Verdict
from tests.unit.runner_builders import launcher_model
from tests.unit.signal_builders import (
    NAMESPACE,
    RUN_NAME,
    RUN_UID,
    SCRIPT_DIGEST,
    SNAPSHOT,
    Obj,
    check_doc,
    make_inputs,
    make_pod,
    make_result,
    message_of,
    participant_docs,
    participant_pod,
    participants,
    run_doc,
)

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE


# ================================================================ parse_inputs


def parse(**overrides: str) -> Inputs:
    args = {
        "run_namespace": NAMESPACE,
        "run_name": RUN_NAME,
        "run_uid": RUN_UID,
        "participants_json": json.dumps(participant_docs(2)),
        "snapshot": SNAPSHOT,
        "check_index": "0",
        "check_json": json.dumps(check_doc()),
    }
    args.update(overrides)
    return parse_inputs(**args)


def test_parse_inputs() -> None:
    inputs = parse(check_index="3")
    assert inputs == make_inputs(2, check_index=3)
    assert inputs.participants[1].node_uid == "node-uid-1"
    assert inputs.check.script_key == "inventory.sh"


def test_parse_inputs_accepts_argo_to_json_key_order() -> None:
    check = json.dumps(check_doc(workload={"cpu": "1", "hostNetwork": False}), sort_keys=True)
    assert parse(check_json=check).check == make_inputs(workload={"cpu": "1", "hostNetwork": False}).check


@pytest.mark.parametrize(
    "overrides",
    [
        {"participants_json": "not json"},
        {"participants_json": "null"},
        {"participants_json": "7"},
        {"participants_json": '"abc"'},
        {"participants_json": "[1]"},
        {"participants_json": '[{"index": 0}]'},
        {"participants_json": '[{"index": 0, "nodeName": "Bad_Name", "nodeUID": "u"}]'},
        {"participants_json": '[{"index": 64, "nodeName": "n", "nodeUID": "u"}]'},
        {"participants_json": "[]"},
        {"participants_json": ""},
        {"check_json": "not json"},
        {"check_json": "{}"},
        {"check_json": "null"},
        {"check_json": json.dumps(check_doc(backend="Slurm"))},
        {"check_json": json.dumps(check_doc(name="Bad Name"))},
        {"check_json": json.dumps(check_doc(backendActiveDeadline="soon"))},
        {"check_json": json.dumps(check_doc(gpuCount=9))},
        {"check_index": "x"},
        {"check_index": "1.5"},
        {"check_index": ""},
    ],
    ids=lambda o: f"{next(iter(o))}={next(iter(o.values()))[:20]}",
)
def test_parse_inputs_refuses(overrides: dict[str, str]) -> None:
    with pytest.raises(Refusal, match=f"Run {NAMESPACE}/{RUN_NAME}"):
        parse(**overrides)


# ================================================================ validate_against_run


def mutate(path: str, value: Any) -> Obj:
    run = run_doc()
    *parents, last = path.split(".")
    node = run
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return run


DELETE = object()


@pytest.mark.parametrize(
    "run",
    [
        run_doc(),
        mutate("status.phase", "Pending"),
        mutate("status.phase", "Admitted"),
        mutate("status", None),
        mutate("status", DELETE),
        mutate("spec.cancel", False),
        mutate("spec.participants", list(reversed(participant_docs(2)))),
        mutate("spec.checks.0", json.loads(json.dumps(check_doc(gpuCount=0), sort_keys=True))),
        mutate("spec.checks.0.unknownField", "ignored"),
        mutate("spec.participants.0.capacity", {"nvidia.com/gpu": "8"}),
    ],
    ids=[
        "running",
        "pending",
        "admitted",
        "null-status",
        "no-status",
        "cancel-false",
        "participant-order",
        "explicit-defaults",
        "unknown-field",
        "capacity",
    ],
)
def test_validate_against_run_accepts(run: Obj) -> None:
    assert validate_against_run(make_inputs(), run) is None


@pytest.mark.parametrize(
    ("run", "fragment"),
    [
        (None, "does not exist"),
        (mutate("metadata.uid", "another-uid"), "it was replaced"),
        (mutate("metadata.uid", DELETE), "it was replaced"),
        (mutate("metadata.deletionTimestamp", "2025-01-01T00:00:00Z"), "is being deleted"),
        (mutate("spec.cancel", True), "is cancelled"),
        (mutate("status.phase", "Succeeded"), "is already Succeeded"),
        (mutate("status.phase", "Failed"), "is already Failed"),
        (mutate("status.phase", "Inconclusive"), "is already Inconclusive"),
        (mutate("status.phase", "Canceled"), "is already Canceled"),
        (mutate("spec.participants", participant_docs(1)), "participants-json does not match"),
        (mutate("spec.participants", participant_docs(3)), "participants-json does not match"),
        (mutate("spec.participants", []), "participants-json does not match"),
        (mutate("spec.participants.1.nodeUID", "replaced-node"), "participants-json does not match"),
        (mutate("spec.participants.1.nodeName", "gpu-999"), "participants-json does not match"),
        (mutate("spec.participants.1.index", 5), "participants-json does not match"),
        (mutate("spec.checks", []), "has 0 checks; check index 0 is out of range"),
        (mutate("spec.checks", DELETE), "out of range"),
        (mutate("spec.checks.0", {"name": "broken"}), "check 0 in the Run is invalid"),
        (mutate("spec.checks.0.backendActiveDeadline", "6m"), "the check parameter differs"),
        (mutate("spec.checks.0.gpuCount", 8), "the check parameter differs"),
        (mutate("spec.checks.0.scriptKey", "other.sh"), "the check parameter differs"),
        (mutate("spec.checks.0.backend", "MPIJob"), "the check parameter differs"),
        (mutate("spec.checks.0.workload", {"hostNetwork": True}), "the check parameter differs"),
        (mutate("spec.checks.0", check_doc(name="nccl")), "the check parameter differs"),
        (mutate("spec.source.snapshotConfigMap", "other-snapshot"), "is not the Run's snapshot ConfigMap"),
        (mutate("spec.source", {}), "is not the Run's snapshot ConfigMap"),
    ],
    ids=[
        "missing",
        "other-uid",
        "no-uid",
        "deleting",
        "cancelled",
        "succeeded",
        "failed",
        "inconclusive",
        "canceled",
        "fewer-participants",
        "more-participants",
        "no-participants",
        "node-uid",
        "node-name",
        "index",
        "no-checks",
        "checks-absent",
        "invalid-run-check",
        "deadline",
        "gpu",
        "script-key",
        "backend",
        "workload",
        "other-check",
        "snapshot",
        "no-snapshot",
    ],
)
def test_validate_against_run_refuses(run: Obj | None, fragment: str) -> None:
    with pytest.raises(Refusal) as caught:
        validate_against_run(make_inputs(), run)
    assert fragment in str(caught.value)
    assert str(caught.value).startswith(f"Run {NAMESPACE}/{RUN_NAME}")


@pytest.mark.parametrize("index", [1, 2, -1])
def test_validate_against_run_check_index_out_of_range(index: int) -> None:
    with pytest.raises(Refusal, match=f"check index {index} is out of range"):
        validate_against_run(make_inputs(check_index=index), run_doc())


def test_validate_against_run_second_check() -> None:
    run = run_doc(checks=[check_doc(), check_doc(name="nccl", scriptKey="nccl.sh", backend="MPIJob")])
    inputs = make_inputs(check_index=1, name="nccl", scriptKey="nccl.sh", backend="MPIJob")
    assert validate_against_run(inputs, run) is None
    with pytest.raises(Refusal, match="differs from the Run's check 0"):
        validate_against_run(make_inputs(check_index=0, name="nccl", scriptKey="nccl.sh", backend="MPIJob"), run)


# ================================================================ workloads

POLICY = {
    "cpu": "4",
    "memory": "16Gi",
    "extendedResources": {"rdma/ib": 2, "example.com/fpga": 1},
    "hostNetwork": True,
    "capabilities": ["IPC_LOCK", "SYS_NICE"],
    "kueueQueueName": "gpu-queue",
}


def container_of(pod_spec: Obj) -> Obj:
    (container,) = pod_spec["containers"]
    assert container["name"] == workloads.CONTAINER
    return container


def env_of(container: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_backend_pod_defaults() -> None:
    inputs = make_inputs(3, check_index=2)
    pod = workloads.backend_pod(inputs, 1, "gpu-001", "registry/runner:1")
    meta, spec = pod["metadata"], pod["spec"]
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert meta["name"] == f"{RUN_NAME}-c2-p1"
    assert meta["namespace"] == NAMESPACE
    assert meta["labels"] == {
        keys.RUN_NAME_LABEL: RUN_NAME,
        keys.RUN_UID_LABEL: RUN_UID,
        keys.CHECK_LABEL: "inventory",
        keys.COMPONENT_LABEL: "backend",
        keys.PARTICIPANT_LABEL: "1",
    }
    assert workloads.KUEUE_QUEUE_LABEL not in meta["labels"]
    assert meta["ownerReferences"] == [
        {"apiVersion": keys.API_VERSION, "kind": keys.RUN_KIND, "name": RUN_NAME, "uid": RUN_UID}
    ]
    assert "blockOwnerDeletion" not in meta["ownerReferences"][0]
    assert spec["nodeName"] == "gpu-001"
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["hostNetwork"] is False
    assert spec["tolerations"] == [
        {"key": "projectsignal.dev/reserved", "operator": "Equal", "value": RUN_UID, "effect": "NoSchedule"}
    ]
    assert spec["activeDeadlineSeconds"] == 300
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert "affinity" not in spec
    container = container_of(spec)
    assert container["image"] == "registry/runner:1"
    assert container["args"][0] == "run"
    assert flag(container["args"], "--script") == workloads.SCRIPT_PATH
    assert flag(container["args"], "--workdir") == workloads.WORKDIR
    assert flag(container["args"], "--termination-log") == container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert int(flag(container["args"], "--deadline-seconds")) < spec["activeDeadlineSeconds"]
    assert "resources" not in container
    security = container["securityContext"]
    assert security == {
        "runAsNonRoot": True,
        "runAsUser": workloads.RUN_AS_USER,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    env = env_of(container)
    assert env["SIGNAL_PARTICIPANT_INDEX"] == "1"
    assert env["SIGNAL_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["SIGNAL_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SIGNAL_POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert env["SIGNAL_RUN_UID"] == RUN_UID
    assert env["SIGNAL_RUN_NAME"] == RUN_NAME
    assert env["SIGNAL_CHECK"] == "inventory"
    assert env["SIGNAL_SCRIPT"] == workloads.SCRIPT_PATH


def test_backend_pod_script_mount_is_read_only_snapshot_with_only_the_checks_key() -> None:
    pod = workloads.backend_pod(make_inputs(scriptKey="gpu_burn.sh"), 0, "gpu-000", "img")
    spec = pod["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["scripts"]["configMap"] == {
        "name": SNAPSHOT,
        "items": [{"key": "gpu_burn.sh", "path": "script"}],
        "defaultMode": 0o555,
    }
    assert volumes["work"] == {"name": "work", "emptyDir": {"sizeLimit": "1Gi"}}
    mounts = {m["name"]: m for m in container_of(spec)["volumeMounts"]}
    assert mounts["scripts"] == {"name": "scripts", "mountPath": workloads.SCRIPT_DIR, "readOnly": True}
    assert mounts["work"].get("readOnly") is not True
    assert (
        f"{mounts['scripts']['mountPath']}/{volumes['scripts']['configMap']['items'][0]['path']}"
        == workloads.SCRIPT_PATH
    )
    assert set(volumes) == {"scripts", "work"}


def test_backend_pod_with_workload_policy() -> None:
    pod = workloads.backend_pod(make_inputs(gpuCount=8, workload=POLICY), 0, "gpu-000", "img")
    spec = pod["spec"]
    assert spec["hostNetwork"] is True
    assert pod["metadata"]["labels"][workloads.KUEUE_QUEUE_LABEL] == "gpu-queue"
    container = container_of(spec)
    amounts = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8", "rdma/ib": "2", "example.com/fpga": "1"}
    assert container["resources"] == {"requests": amounts, "limits": amounts}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK", "SYS_NICE"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize(
    ("check", "resources"),
    [
        ({}, None),
        ({"gpuCount": 0}, None),
        ({"gpuCount": 2}, {"nvidia.com/gpu": "2"}),
        ({"workload": {"cpu": "500m"}}, {"cpu": "500m"}),
        ({"workload": {"memory": "1Gi"}}, {"memory": "1Gi"}),
        ({"workload": {"extendedResources": {"rdma/ib": 1}}}, {"rdma/ib": "1"}),
    ],
)
def test_backend_pod_resources(check: Obj, resources: dict[str, str] | None) -> None:
    container = container_of(workloads.backend_pod(make_inputs(**check), 0, "n", "img")["spec"])
    if resources is None:
        assert "resources" not in container
    else:
        assert container["resources"] == {"requests": resources, "limits": resources}
        assert container["resources"]["requests"] is not container["resources"]["limits"]


@pytest.mark.parametrize(
    ("policy", "labels", "add"),
    [
        ({}, False, None),
        ({"kueueQueueName": "q"}, True, None),
        ({"capabilities": []}, False, None),
        ({"capabilities": ["SYS_RESOURCE"]}, False, ["SYS_RESOURCE"]),
    ],
)
def test_backend_pod_optional_fields(policy: Obj, labels: bool, add: list[str] | None) -> None:
    pod = workloads.backend_pod(make_inputs(workload=policy), 0, "n", "img")
    assert (workloads.KUEUE_QUEUE_LABEL in pod["metadata"]["labels"]) is labels
    capabilities = container_of(pod["spec"])["securityContext"]["capabilities"]
    assert capabilities.get("add") == add
    assert capabilities["drop"] == ["ALL"]


@pytest.mark.parametrize(
    ("deadline", "seconds"),
    [("30s", 30), ("5m", 300), ("1h", 3600), ("1m30s", 90), ("1500ms", 1), ("250ms", 1), ("10s", 10)],
)
def test_deadline_seconds(deadline: str, seconds: int) -> None:
    check = make_inputs(backendActiveDeadline=deadline).check
    assert workloads.deadline_seconds(check) == seconds
    pod = workloads.backend_pod(make_inputs(backendActiveDeadline=deadline), 0, "n", "img")
    assert pod["spec"]["activeDeadlineSeconds"] == seconds


@pytest.mark.parametrize(
    "deadline",
    [
        "10s",
        "11s",
        "30s",
        "1m",
        "10m",
        "1h",
        pytest.param(
            "9s",
        ),
        pytest.param(
            "5s",
        ),
    ],
)
def test_runner_deadline_is_before_the_pod_deadline(deadline: str) -> None:
    inputs = make_inputs(backendActiveDeadline=deadline)
    pod = workloads.backend_pod(inputs, 0, "n", "img")
    runner = int(flag(container_of(pod["spec"])["args"], "--deadline-seconds"))
    assert runner == workloads.runner_deadline(inputs.check)
    assert 1 <= runner < pod["spec"]["activeDeadlineSeconds"]
    assert pod["spec"]["activeDeadlineSeconds"] - runner <= 5


def test_names_are_deterministic() -> None:
    a, b = make_inputs(check_index=4), make_inputs(check_index=4)
    assert workloads.pod_name(a, 7) == workloads.pod_name(b, 7) == f"{RUN_NAME}-c4-p7"
    assert workloads.results_name(a) == f"{RUN_NAME}-c4-results"
    assert workloads.evidence_name(a) == f"{RUN_NAME}-c4-evidence"
    assert workloads.mpijob_name(a) == workloads.mpijob_name(b)
    assert re.fullmatch(r"sig-[0-9a-f]{12}-c4", workloads.mpijob_name(a))
    assert workloads.mpijob_name(a) != workloads.mpijob_name(make_inputs(check_index=5))
    other = Inputs(**{**a.__dict__, "run_uid": "another-uid"})
    assert workloads.mpijob_name(other) != workloads.mpijob_name(a)
    assert workloads.check_selector(a) == f"{keys.RUN_UID_LABEL}={RUN_UID},{keys.CHECK_LABEL}=inventory"
    assert workloads.backend_pod(a, 1, "n", "i") == workloads.backend_pod(b, 1, "n", "i")
    assert mpispec.mpijob(a, "i") == mpispec.mpijob(b, "i")


def mpi_inputs(count: int = 3, run_name: str = RUN_NAME, check_index: int = 0, **check: Any) -> Inputs:
    return make_inputs(count, check_index=check_index, run_name=run_name, backend="MPIJob", **check)


def test_mpijob_shape() -> None:
    inputs = mpi_inputs(3, gpuCount=8, workload=POLICY)
    job = mpispec.mpijob(inputs, "img:2", sshd="/opt/sshd")
    name = workloads.mpijob_name(inputs)
    assert (job["apiVersion"], job["kind"]) == (workloads.MPI_API, "MPIJob")
    assert job["metadata"]["name"] == name
    assert job["metadata"]["namespace"] == NAMESPACE
    assert job["metadata"]["ownerReferences"] == [workloads.run_owner(inputs)]
    spec = job["spec"]
    assert spec["slotsPerWorker"] == 1
    assert spec["mpiImplementation"] == "OpenMPI"
    assert spec["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 0, "activeDeadlineSeconds": 300}
    launcher = spec["mpiReplicaSpecs"]["Launcher"]
    worker = spec["mpiReplicaSpecs"]["Worker"]
    assert launcher["replicas"] == 1
    assert worker["replicas"] == 3 == len(inputs.participants)
    assert launcher["restartPolicy"] == worker["restartPolicy"] == "Never"
    assert launcher["template"]["metadata"]["labels"][workloads.MPI_ROLE_LABEL] == "launcher"
    assert worker["template"]["metadata"]["labels"][workloads.MPI_ROLE_LABEL] == "worker"
    for template in (launcher["template"], worker["template"]):
        labels = template["metadata"]["labels"]
        assert labels[keys.RUN_UID_LABEL] == RUN_UID
        assert labels[workloads.KUEUE_QUEUE_LABEL] == "gpu-queue"
        pod_spec = template["spec"]
        assert pod_spec["automountServiceAccountToken"] is False
        cordon = [t.get("value") for t in pod_spec["tolerations"] if t["key"] == keys.RESERVED_TAINT_KEY]
        assert cordon == ([] if template is launcher["template"] else [RUN_UID]), "no cordon for the launcher"
        assert pod_spec["hostNetwork"] is True
        assert "nodeName" not in pod_spec
        assert pod_spec["volumes"][0]["configMap"]["items"] == [{"key": "inventory.sh", "path": "script"}]
    worker_spec = worker["template"]["spec"]
    terms = worker_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            for node in ["gpu-000", "gpu-001", "gpu-002"]
        ]
    }
    anti = worker_spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [
        {
            "labelSelector": {"matchLabels": {workloads.MPI_JOB_LABEL: name, workloads.MPI_ROLE_LABEL: "worker"}},
            "topologyKey": "kubernetes.io/hostname",
        }
    ]
    assert worker_spec["activeDeadlineSeconds"] == 300 + workloads.WORKER_GRACE_SECONDS
    worker_container = container_of(worker_spec)
    assert worker_container["args"] == ["worker", "--sshd", "/opt/sshd"]
    assert worker_container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert worker_container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK", "SYS_NICE"]
    assert "SIGNAL_PARTICIPANT_INDEX" not in env_of(worker_container)
    launcher_spec = launcher["template"]["spec"]
    # The launcher speaks for every participant: never on a Node under test.
    assert launcher_spec["affinity"] == mpispec.off_nodes_under_test(["gpu-000", "gpu-001", "gpu-002"])
    assert "podAntiAffinity" not in launcher_spec["affinity"]
    assert launcher_spec["activeDeadlineSeconds"] == 300
    launcher_container = container_of(launcher_spec)
    assert "resources" not in launcher_container
    args = launcher_container["args"]
    assert args[0] == "launcher"
    assert flag(args, "--hostfile") == "/etc/mpi/hostfile"
    assert flag(args, "--script") == workloads.SCRIPT_PATH
    assert int(flag(args, "--deadline-seconds")) < 300


def test_mpijob_affinity_follows_participant_indexes_not_input_order() -> None:
    inputs = mpi_inputs(3)
    shuffled = Inputs(**{**inputs.__dict__, "participants": tuple(reversed(inputs.participants))})
    job = mpispec.mpijob(shuffled, "img")
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    values = launcher["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert values["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["gpu-000"]


def test_mpijob_default_sshd_and_no_optional_fields() -> None:
    job = mpispec.mpijob(mpi_inputs(1), "img")
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 1
    assert container_of(worker["template"]["spec"])["args"] == ["worker", "--sshd", workloads.DEFAULT_SSHD]
    assert workloads.KUEUE_QUEUE_LABEL not in job["metadata"]["labels"]


@pytest.mark.parametrize("check_index", [0, 9, 31])
def test_mpijob_worker_hostnames_are_dns_labels_even_for_long_run_names(check_index: int) -> None:
    run_name = "r" * 54
    inputs = mpi_inputs(64, run_name=run_name, check_index=check_index)
    job = mpispec.mpijob(inputs, "img")
    name = job["metadata"]["name"]
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 64
    for host in (f"{name}-worker-63", f"{name}-launcher"):
        assert len(host) <= 63
        assert re.fullmatch(DNS_LABEL_PATTERN, host)
    assert run_name not in name


# ================================================================ pod_result / foreign


def test_terminal() -> None:
    assert terminal(make_pod("p", "u", "n", phase="Succeeded"))
    assert terminal(make_pod("p", "u", "n", phase="Failed"))
    for phase in ("Pending", "Running", "Unknown"):
        assert not terminal(make_pod("p", "u", "n", phase=phase))
    assert not terminal({"metadata": {}, "status": None})


NESTED = "[" * 2000
"""A termination message Python's json cannot parse (RecursionError), 2000 bytes: well inside
the kubelet's 4 KiB, and a hostile script can pre-write it to /dev/termination-log."""


def test_pod_result_parses_the_runner_message() -> None:
    result = make_result()
    parsed, why = pod_result(make_pod("p", "u", "n", message=message_of(result)))
    assert (parsed, why) == (result, "")


@pytest.mark.parametrize(
    ("pod", "fragment"),
    [
        (make_pod("p", "u", "n", phase="Pending", terminated=False), "NotFinished: the Pod is Pending"),
        (make_pod("p", "u", "n", phase="Running", terminated=False), "NotFinished: the Pod is Running"),
        ({"metadata": {"name": "p", "uid": "u"}}, "NotFinished: the Pod is Unknown"),
        (make_pod("p", "u", "n", phase="Failed", terminated=False, reason="DeadlineExceeded"), "(DeadlineExceeded)"),
        (make_pod("p", "u", "n", container="sidecar", message="{}"), "NoResult: the runner container never"),
        (make_pod("p", "u", "n", phase="Failed", exit_code=2), "NoResult: empty termination message (exit 2)"),
        (make_pod("p", "u", "n", message=""), "NoResult: empty termination message"),
        (
            make_pod("p", "u", "n", phase="Failed", exit_code=137, reason="Evicted"),
            "(exit 137; Pod reason Evicted)",
        ),
        (make_pod("p", "u", "n", message="Error: something broke"), "MalformedResult: not a single JSON document"),
        (make_pod("p", "u", "n", message='{"schema":"other"}'), "MalformedResult: unsupported result schema"),
        (make_pod("p", "u", "n", message=message_of(make_result())[:-1]), "MalformedResult"),
        (make_pod("p", "u", "n", message=message_of(make_result()) + "x" * 4096), "MalformedResult"),
        (make_pod("p", "u", "n", message=NESTED), "MalformedResult: not a single JSON document: nested too deeply"),
    ],
    ids=[
        "pending",
        "running",
        "no-status",
        "deadline-no-container-status",
        "no-runner-container",
        "no-message",
        "empty-message",
        "evicted",
        "text",
        "schema",
        "truncated",
        "oversized",
        "nested-2000-deep",
    ],
)
def test_pod_result_refuses(pod: Obj, fragment: str) -> None:
    result, why = pod_result(pod)
    assert result is None
    assert fragment in why


def test_a_pod_kueue_never_admitted_says_so() -> None:
    """Issue 41 §4: a check whose queue lacks quota ends with a reason naming the queue, not a
    bare 'Pending' (the Pod still carries Kueue's admission gate)."""
    pod = make_pod("p", "u", "n", phase="Pending", terminated=False)
    pod["metadata"].setdefault("labels", {})[KUEUE_QUEUE_LABEL] = "gpu-queue"
    pod.setdefault("spec", {})["schedulingGates"] = [{"name": KUEUE_ADMISSION_GATE}]
    result, why = pod_result(pod)
    assert result is None
    assert why.startswith("NotAdmittedByQueue: Kueue never admitted the Pod from queue gpu-queue")
    pod["spec"]["schedulingGates"] = [{"name": "example.com/other-gate"}]
    assert pod_result(pod)[1].startswith("NotFinished: the Pod is Pending")


P0 = participants(1)[0]


@pytest.mark.parametrize(
    ("result_fields", "pod_changes", "fragment"),
    [
        ({}, {}, None),
        ({"index": 1}, {}, "claims participant 1 (pod), not 0"),
        ({"index": None, "role": "launcher"}, {}, "claims participant None (launcher)"),
        ({"role": "launcher"}, {}, "(launcher)"),
        ({"node": "gpu-001"}, {}, "claims Node 'gpu-001'"),
        ({}, {"node": "gpu-001"}, "claims Node 'gpu-000'"),
        ({"pod_uid": "other-uid"}, {}, "claims Pod"),
        ({"pod_name": "other-pod"}, {}, "claims Pod other-pod"),
    ],
)
def test_foreign(result_fields: Obj, pod_changes: Obj, fragment: str | None) -> None:
    fields = {"index": 0, "node": "gpu-000", "pod_name": "pod-a", "pod_uid": "uid-a", **result_fields}
    result = make_result(**fields)
    pod = make_pod("pod-a", "uid-a", pod_changes.get("node", "gpu-000"))
    why = foreign(result, pod, P0)
    if fragment is None:
        assert why is None
    else:
        assert why is not None
        assert fragment in why


# ================================================================ collect_pods

PARTICIPANTS = participants(2)


def verdicts(results: list[ParticipantResult]) -> list[tuple[int, Verdict, str]]:
    return [(r.index, r.verdict, r.reason.split(":")[0]) for r in results]


def test_collect_pods_happy_path() -> None:
    pods = [participant_pod(0, measurements={"bw": 2.5}), participant_pod(1)]
    results = collect_pods(PARTICIPANTS, pods, script=SCRIPT_DIGEST)
    assert verdicts(results) == [(0, PASS, "Pass reason"), (1, PASS, "Pass reason")]
    first = results[0]
    assert first.node_name == "gpu-000"
    assert first.node_uid == "node-uid-0"
    assert first.workload == f"{RUN_NAME}-c0-p0"
    assert first.workload_uid == "pod-uid-0"
    assert first.exit_code == 0
    assert first.measurements == {"bw": 2.5}
    assert first.started_at is not None


def test_collect_pods_orders_by_participant_index() -> None:
    results = collect_pods(
        tuple(reversed(PARTICIPANTS)), [participant_pod(1), participant_pod(0)], script=SCRIPT_DIGEST
    )
    assert [r.index for r in results] == [0, 1]


def test_collect_pods_fail_stays_fail() -> None:
    results = collect_pods(
        PARTICIPANTS, [participant_pod(0), participant_pod(1, verdict=FAIL, exit_code=1)], script=SCRIPT_DIGEST
    )
    assert verdicts(results) == [(0, PASS, "Pass reason"), (1, FAIL, "Fail reason")]
    assert results[1].exit_code == 1


@pytest.mark.parametrize(
    "pod_kwargs",
    [
        {"verdict": FAIL, "phase": "Succeeded", "exit_code": 0},
        {"verdict": FAIL, "phase": "Failed", "exit_code": 1},
        {"verdict": FAIL, "phase": "Failed", "exit_code": 1, "signal": 9},
    ],
)
def test_collect_pods_fail_is_never_upgraded(pod_kwargs: Obj) -> None:
    (result, _) = collect_pods(
        PARTICIPANTS, [participant_pod(0, **pod_kwargs), participant_pod(1)], script=SCRIPT_DIGEST
    )
    assert result.verdict == FAIL


@pytest.mark.parametrize(
    "pod_kwargs",
    [
        {"exit_code": 1},  # container exited non-zero
        {"phase": "Failed"},  # Pod failed
        {"phase": "Failed", "exit_code": 137},
        {"result_exit": 3},  # the runner claims Pass for a non-zero script exit
        {"result_exit": None, "signal": 9},
    ],
    ids=["container-exit", "pod-failed", "both", "script-exit", "signal"],
)
def test_collect_pods_inconsistent_pass_is_inconclusive(pod_kwargs: Obj) -> None:
    kwargs = dict(pod_kwargs)
    if "result_exit" in kwargs:
        kwargs["exit_code"] = 0
        pod = participant_pod(0, **{k: v for k, v in kwargs.items() if k not in {"result_exit", "exit_code"}})
        result = make_result(
            PASS,
            index=0,
            node="gpu-000",
            pod_name=pod["metadata"]["name"],
            pod_uid="pod-uid-0",
            exit_code=kwargs["result_exit"],
            signal=kwargs.get("signal"),
        )
        pod = participant_pod(0, result=result)
    else:
        pod = participant_pod(0, **kwargs)
    (result0, _) = collect_pods(PARTICIPANTS, [pod, participant_pod(1)], script=SCRIPT_DIGEST)
    assert result0.verdict == INCONCLUSIVE
    assert result0.reason.startswith("InconsistentResult")


def renamed(pod: Obj, name: str, uid: str) -> Obj:
    pod = copy.deepcopy(pod)
    pod["metadata"]["name"], pod["metadata"]["uid"] = name, uid
    return pod


def set_phase(pod: Obj, phase: str) -> Obj:
    pod = copy.deepcopy(pod)
    pod["status"]["phase"] = phase
    return pod


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([participant_pod(1)], (0, INCONCLUSIVE, "NoWorkload")),
        ([], (0, INCONCLUSIVE, "NoWorkload")),
        (
            [participant_pod(0), renamed(participant_pod(0), "extra", "extra-uid"), participant_pod(1)],
            (0, INCONCLUSIVE, "DuplicateWorkload"),
        ),
        ([set_phase(participant_pod(0), "Pending"), participant_pod(1)], (0, INCONCLUSIVE, "NotFinished")),
        ([set_phase(participant_pod(0), "Running"), participant_pod(1)], (0, INCONCLUSIVE, "NotFinished")),
        ([participant_pod(0, message=""), participant_pod(1)], (0, INCONCLUSIVE, "NoResult")),
        ([participant_pod(0, message="oops"), participant_pod(1)], (0, INCONCLUSIVE, "MalformedResult")),
        ([participant_pod(0, node="gpu-009"), participant_pod(1)], (0, INCONCLUSIVE, "ForeignResult")),
        (
            [
                participant_pod(
                    0, result=make_result(index=0, node="gpu-001", pod_name=f"{RUN_NAME}-c0-p0", pod_uid="pod-uid-0")
                ),
                participant_pod(1),
            ],
            (0, INCONCLUSIVE, "ForeignResult"),
        ),
        ([participant_pod(0, pod_uid="stolen"), participant_pod(1)], (0, INCONCLUSIVE, "ForeignResult")),
        ([participant_pod(0, pod_name="other"), participant_pod(1)], (0, INCONCLUSIVE, "ForeignResult")),
        ([participant_pod(0, claims={"index": 1}), participant_pod(1)], (0, INCONCLUSIVE, "ForeignResult")),
        (
            [participant_pod(0, claims={"role": "launcher", "index": None}), participant_pod(1)],
            (0, INCONCLUSIVE, "ForeignResult"),
        ),
    ],
    ids=[
        "no-pod",
        "no-pods",
        "two-pods",
        "pending",
        "running",
        "no-message",
        "malformed",
        "pod-on-other-node",
        "result-other-node",
        "other-uid",
        "other-name",
        "other-index",
        "launcher-result",
    ],
)
def test_collect_pods_inconclusive(pods: list[Obj], expected: tuple[int, Verdict, str]) -> None:
    results = collect_pods(PARTICIPANTS, pods, script=SCRIPT_DIGEST)
    assert len(results) == 2
    assert verdicts(results)[0] == expected
    assert results[0].exit_code is None
    assert results[0].measurements == {}


def test_collect_pods_a_hostile_message_spoils_only_its_own_participant() -> None:
    results = collect_pods(PARTICIPANTS, [participant_pod(0, message=NESTED), participant_pod(1)], script=SCRIPT_DIGEST)
    assert verdicts(results) == [(0, INCONCLUSIVE, "MalformedResult"), (1, PASS, "Pass reason")]
    assert "nested too deeply" in results[0].reason
    assert results[0].workload == f"{RUN_NAME}-c0-p0"


def test_collect_pods_keeps_the_workload_name_of_a_bad_pod() -> None:
    (result, _) = collect_pods(
        PARTICIPANTS, [participant_pod(0, message="oops"), participant_pod(1)], script=SCRIPT_DIGEST
    )
    assert (result.workload, result.workload_uid) == (f"{RUN_NAME}-c0-p0", "pod-uid-0")
    (result, _) = collect_pods(PARTICIPANTS, [participant_pod(1)], script=SCRIPT_DIGEST)
    assert (result.workload, result.workload_uid) == (None, None)


def test_collect_pods_duplicate_claim() -> None:
    # Participant 1's Pod reports participant 0's identity (a copied or replayed message).
    victim = participant_pod(0)
    impostor = participant_pod(1, message=victim["status"]["containerStatuses"][0]["state"]["terminated"]["message"])
    results = collect_pods(PARTICIPANTS, [victim, impostor], script=SCRIPT_DIGEST)
    assert verdicts(results) == [(0, INCONCLUSIVE, "DuplicateResult"), (1, INCONCLUSIVE, "ForeignResult")]


def test_collect_pods_duplicate_index_claim_from_another_pod() -> None:
    victim = participant_pod(0)
    impostor = participant_pod(1, claims={"index": 0})  # claims index 0 with its own uid
    results = collect_pods(PARTICIPANTS, [victim, impostor], script=SCRIPT_DIGEST)
    assert results[0].verdict == INCONCLUSIVE
    assert results[0].reason.startswith("DuplicateResult")
    assert results[1].verdict == INCONCLUSIVE


def test_collect_pods_ignores_pods_without_a_numeric_participant_label() -> None:
    stray = make_pod("stray", "stray-uid", "gpu-000", labels={keys.PARTICIPANT_LABEL: "zero"}, phase="Running")
    results = collect_pods(PARTICIPANTS, [stray, participant_pod(0), participant_pod(1)], script=SCRIPT_DIGEST)
    assert [r.verdict for r in results] == [PASS, PASS]


def test_collect_pods_replayed_result_in_an_unlabelled_pod_still_counts_as_a_claim() -> None:
    replay = renamed(participant_pod(0), "stray", "stray-uid")
    replay["metadata"]["labels"][keys.PARTICIPANT_LABEL] = "zero"
    results = collect_pods(PARTICIPANTS, [replay, participant_pod(0), participant_pod(1)], script=SCRIPT_DIGEST)
    assert verdicts(results) == [(0, INCONCLUSIVE, "DuplicateResult"), (1, PASS, "Pass reason")]


def test_collect_pods_fail_from_a_foreign_pod_is_not_fail() -> None:
    results = collect_pods(
        PARTICIPANTS, [participant_pod(0, verdict=FAIL, pod_uid="x"), participant_pod(1)], script=SCRIPT_DIGEST
    )
    assert results[0].verdict == INCONCLUSIVE


def test_pod_workloads() -> None:
    stray = make_pod("a-stray", "s", None, labels={keys.PARTICIPANT_LABEL: "x"})
    found = pod_workloads([participant_pod(1), stray, participant_pod(0)])
    assert [(w.name, w.uid, w.node_name, w.participant_index, w.role) for w in found] == [
        ("a-stray", "s", None, None, "participant"),
        (f"{RUN_NAME}-c0-p0", "pod-uid-0", "gpu-000", 0, "participant"),
        (f"{RUN_NAME}-c0-p1", "pod-uid-1", "gpu-001", 1, "participant"),
    ]


# ================================================================ collect_mpi

JOB = "sig-0123456789ab-c0"
LAUNCHER_NODE = "system-0"
"""A crossNode launcher's Node: none of the participants' (collect.launcher_placement)."""


def worker(i: int, node: str | None = None, name: str | None = None) -> Obj:
    return make_pod(
        name or f"{JOB}-worker-{i}",
        f"worker-uid-{i}",
        node or f"gpu-{i:03d}",
        labels={workloads.MPI_ROLE_LABEL: "worker"},
        phase="Running",
        terminated=False,
    )


def launcher_report(codes: list[int], hosts: list[str] | None = None) -> tuple[Verdict, str, LauncherReport]:
    size = len(codes)
    hosts = hosts or [f"{JOB}-worker-{i}.{JOB}.{NAMESPACE}.svc" for i in range(size)]
    key = "k" * 64  # the launcher's per-check key; each line is on its own rank's tagged stream
    lines = [
        f"[1,{i}]<stdout>:" + mpi.rank_line(i, size, f"{JOB}-worker-{i}", code, key=key) for i, code in enumerate(codes)
    ]
    verdict, reason, report = mpi.evaluate_launcher(
        hosts, mpi.reports_in(lines, key), 0 if not any(codes) else 1, False
    )
    return verdict, reason, launcher_model(report)


def launcher_pod(
    codes: list[int] | None = None,
    *,
    report: tuple[Verdict, str, LauncherReport] | None = None,
    role: str = "launcher",
    uid: str = "launcher-uid",
    result_uid: str | None = None,
    node: str = LAUNCHER_NODE,
    result_node: str | None = None,
    phase: str | None = None,
    with_report: bool = True,
    message: str | None = None,
) -> Obj:
    verdict, reason, launcher = report or launcher_report(codes if codes is not None else [0, 0])
    result = make_result(
        verdict,
        index=None if role == "launcher" else 0,
        role=role,
        reason=reason,
        node=result_node or node,
        pod_name=f"{JOB}-launcher",
        pod_uid=result_uid or uid,
        exit_code=launcher.mpirun_exit_code,
        launcher=launcher if with_report else None,
    )
    code = 0 if verdict == PASS else 1
    return make_pod(
        f"{JOB}-launcher",
        uid,
        node,
        labels={workloads.MPI_ROLE_LABEL: "launcher"},
        phase=phase or ("Succeeded" if code == 0 else "Failed"),
        exit_code=code,
        message=message if message is not None else message_of(result),
    )


def test_collect_mpi_pass() -> None:
    results, launcher, why = collect_mpi(
        PARTICIPANTS, [worker(0), worker(1)], [launcher_pod([0, 0])], script=SCRIPT_DIGEST
    )
    assert verdicts(results) == [(0, PASS, "Succeeded"), (1, PASS, "Succeeded")]
    assert [r.exit_code for r in results] == [0, 0]
    assert [r.workload for r in results] == [f"{JOB}-worker-0", f"{JOB}-worker-1"]
    assert [r.workload_uid for r in results] == ["worker-uid-0", "worker-uid-1"]
    assert launcher is not None
    assert launcher.verdict == PASS
    assert launcher.launcher is not None
    assert why == ""


def test_collect_mpi_matches_workers_by_node_not_name_order() -> None:
    # Worker 0 landed on participant 1's Node and vice versa: each participant gets its own Node's rank.
    workers = [worker(0, node="gpu-001"), worker(1, node="gpu-000")]
    results, _, _ = collect_mpi(PARTICIPANTS, workers, [launcher_pod([5, 0])], script=SCRIPT_DIGEST)
    assert verdicts(results) == [(0, INCONCLUSIVE, "Launcher"), (1, FAIL, "Failed")]
    assert results[1].workload == f"{JOB}-worker-0"
    assert results[1].reason == "Failed: rank 0 exited 5"


def test_collect_mpi_a_rank_with_insufficient_evidence_is_not_a_failure() -> None:
    # Exit 3: the script's "my evidence is insufficient"; nobody is failed, nobody passes.
    results, launcher, _ = collect_mpi(
        PARTICIPANTS, [worker(0), worker(1)], [launcher_pod([0, 3])], script=SCRIPT_DIGEST
    )
    assert verdicts(results) == [(0, INCONCLUSIVE, "Launcher"), (1, INCONCLUSIVE, "Launcher")]
    assert launcher is not None
    assert launcher.verdict == INCONCLUSIVE


def test_collect_mpi_a_failing_rank_fails_its_participant_only() -> None:
    results, launcher, _ = collect_mpi(
        PARTICIPANTS, [worker(0), worker(1)], [launcher_pod([0, 2])], script=SCRIPT_DIGEST
    )
    assert verdicts(results) == [(0, INCONCLUSIVE, "Launcher"), (1, FAIL, "Failed")]
    assert results[1].reason == "Failed: rank 1 exited 2"
    assert launcher is not None
    assert launcher.verdict == FAIL


def test_collect_mpi_missing_rank() -> None:
    report = launcher_report([0, 0])
    verdict, reason, full = report
    partial = full.model_copy(update={"rank_table": full.rank_table[:1]})
    results, _, _ = collect_mpi(
        PARTICIPANTS, [worker(0), worker(1)], [launcher_pod(report=(verdict, reason, partial))], script=SCRIPT_DIGEST
    )
    assert verdicts(results)[1] == (1, INCONCLUSIVE, "MissingRank")


def test_collect_mpi_launcher_inconclusive_makes_passing_ranks_inconclusive() -> None:
    hosts = [f"{JOB}-worker-0", f"{JOB}-worker-1"]
    key = "k" * 64
    lines = [f"[1,{i}]<stdout>:" + mpi.rank_line(i, 2, hosts[i], 0, key=key) for i in range(2)]
    verdict, reason, report = mpi.evaluate_launcher(hosts, mpi.reports_in(lines, key), 1, False)
    assert verdict == INCONCLUSIVE
    results, _, _ = collect_mpi(
        PARTICIPANTS,
        [worker(0), worker(1)],
        [launcher_pod(report=(verdict, reason, launcher_model(report)))],
        script=SCRIPT_DIGEST,
    )
    assert verdicts(results) == [(0, INCONCLUSIVE, "Launcher"), (1, INCONCLUSIVE, "Launcher")]
    assert "LauncherFailed" in results[0].reason


@pytest.mark.parametrize(
    ("launchers", "why"),
    [
        ([], "NoLauncher"),
        ([launcher_pod(phase="Running")], "NoLauncher"),
        ([launcher_pod(), renamed(launcher_pod(), "second", "second-uid")], "DuplicateLauncher: 2 launcher Pods"),
        ([launcher_pod(), set_phase(renamed(launcher_pod(), "second", "u2"), "Pending")], "DuplicateLauncher"),
        ([launcher_pod(message="")], "NoResult"),
        ([launcher_pod(message="garbage")], "MalformedResult"),
        ([launcher_pod(message=NESTED)], "MalformedResult: not a single JSON document: nested too deeply"),
        ([launcher_pod(role="pod")], "ForeignResult: the launcher's result is not a launcher report"),
        ([launcher_pod(with_report=False)], "ForeignResult: the launcher's result is not a launcher report"),
        ([launcher_pod(result_uid="other-uid")], "ForeignResult: the launcher's result names another Pod or Node"),
        ([launcher_pod(result_node="gpu-001")], "ForeignResult: the launcher's result names another Pod or Node"),
    ],
    ids=[
        "no-launcher",
        "running",
        "two-launchers",
        "two-one-pending",
        "no-message",
        "malformed",
        "nested-2000-deep",
        "role-pod",
        "no-report",
        "other-uid",
        "other-node",
    ],
)
def test_collect_mpi_without_a_trusted_launcher(launchers: list[Obj], why: str) -> None:
    results, launcher, got = collect_mpi(PARTICIPANTS, [worker(0), worker(1)], launchers, script=SCRIPT_DIGEST)
    assert launcher is None
    assert got.startswith(why)
    assert [r.verdict for r in results] == [INCONCLUSIVE, INCONCLUSIVE]
    assert all(r.reason.startswith(why) for r in results)
    assert [r.workload for r in results] == [f"{JOB}-worker-0", f"{JOB}-worker-1"]


def test_collect_mpi_failing_rank_without_a_trusted_launcher_is_not_fail() -> None:
    results, _, _ = collect_mpi(
        PARTICIPANTS, [worker(0), worker(1)], [launcher_pod([0, 1], result_uid="x")], script=SCRIPT_DIGEST
    )
    assert [r.verdict for r in results] == [INCONCLUSIVE, INCONCLUSIVE]


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        ([worker(0)], [(0, PASS, "Succeeded"), (1, INCONCLUSIVE, "NoWorkload")]),
        (
            [worker(0), worker(1, node="gpu-000")],
            [(0, INCONCLUSIVE, "DuplicateWorkload"), (1, INCONCLUSIVE, "NoWorkload")],
        ),
        (
            [worker(0), worker(1), worker(2, node="gpu-001")],
            [(0, PASS, "Succeeded"), (1, INCONCLUSIVE, "DuplicateWorkload")],
        ),
        ([worker(0), worker(1, node="gpu-777")], [(0, PASS, "Succeeded"), (1, INCONCLUSIVE, "NoWorkload")]),
        ([worker(0), {**worker(1), "spec": {}}], [(0, PASS, "Succeeded"), (1, INCONCLUSIVE, "NoWorkload")]),
        ([], [(0, INCONCLUSIVE, "NoWorkload"), (1, INCONCLUSIVE, "NoWorkload")]),
    ],
    ids=["missing-worker", "two-on-one-node", "extra-on-node", "other-node", "unscheduled", "no-workers"],
)
def test_collect_mpi_worker_placement(workers: list[Obj], expected: list[tuple[int, Verdict, str]]) -> None:
    results, _, _ = collect_mpi(PARTICIPANTS, workers, [launcher_pod([0, 0])], script=SCRIPT_DIGEST)
    assert verdicts(results) == expected


def test_collect_mpi_worker_whose_name_reported_no_rank() -> None:
    results, _, _ = collect_mpi(
        PARTICIPANTS, [worker(0), worker(1, name="renamed-worker")], [launcher_pod([0, 0])], script=SCRIPT_DIGEST
    )
    assert verdicts(results)[1] == (1, INCONCLUSIVE, "MissingRank")


@pytest.mark.parametrize(("phase", "exit_code"), [("Failed", 1), ("Failed", 0), ("Succeeded", 137)])
def test_collect_mpi_inconsistent_launcher_pass_is_not_pass(phase: str, exit_code: int) -> None:
    pod = launcher_pod([0, 0])
    pod["status"]["phase"] = phase
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = exit_code
    results, _, _ = collect_mpi(PARTICIPANTS, [worker(0), worker(1)], [pod], script=SCRIPT_DIGEST)
    assert [r.verdict for r in results] == [INCONCLUSIVE, INCONCLUSIVE]
