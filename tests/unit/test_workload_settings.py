"""Issue 44 §1: a check's workload settings and parameters, as the profile model bounds them and
as the adapter writes them into backend Pods and MPIJobs; the runner passing parameters to the
script; the runner injected into a check's own image (copied, then run with that image's
``python3`` from the copy alone); a runner that cannot start in such an image is Inconclusive
with a reason naming what the image lacks; evidence whose parameters or image differ from the
Run's check proves nothing."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from adapter import mpispec, workloads
from adapter.collect import collect_pods, not_admitted, pod_result
from runner.execute import clean_environment
from runner.inject import inject
from shared import keys
from shared.limits import EXIT_PYTHON_TOO_OLD
from shared.profile import Check
from tests.unit.signal_builders import check_doc, make_inputs, make_pod

Obj = dict[str, Any]
DIGEST = "sha256:" + "ab" * 32
OWN_IMAGE = f"registry.example/gpu/diag@{DIGEST}"
REPO = Path(__file__).resolve().parents[2]


def check(**overrides: Any) -> Check:
    return Check.model_validate(check_doc(**overrides))


def env_of(container: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


# --- parameters ---------------------------------------------------------------------------


def test_parameters_reach_every_runner_container_as_signal_param_upper_cased() -> None:
    params = {"gpuCount": "8", "min_busbw_gbps": "380", "Level": "3"}
    pod = workloads.backend_pod(make_inputs(1, parameters=params), 0, "gpu-000", "img")
    env = env_of(pod["spec"]["containers"][0])
    assert {k: v for k, v in env.items() if k.startswith("SIGNAL_PARAM_")} == {
        "SIGNAL_PARAM_GPUCOUNT": "8",
        "SIGNAL_PARAM_MIN_BUSBW_GBPS": "380",
        "SIGNAL_PARAM_LEVEL": "3",
    }
    job = mpispec.mpijob(make_inputs(2, backend="MPIJob", parameters=params), "img")
    for role in ("Launcher", "Worker"):
        container = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]
        assert env_of(container)["SIGNAL_PARAM_MIN_BUSBW_GBPS"] == "380", role


@pytest.mark.parametrize(
    "parameters",
    [
        {"1st": "x"},
        {"with-dash": "x"},
        {"a" * 64: "x"},
        {"": "x"},
        {"level": "1", "LEVEL": "2"},
        {"v": "x" * 1025},
        {"nul": "a\x00b"},
        {f"p{i}": "x" for i in range(33)},
    ],
    ids=["digit-first", "dash", "too-long-name", "empty", "case-clash", "long-value", "nul", "too-many"],
)
def test_malformed_parameters_are_refused(parameters: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        check(parameters=parameters)


def test_parameters_at_their_bounds_are_accepted() -> None:
    names = {f"p{i}": "x" * 1024 for i in range(32)} | {"A" + "b" * 62: ""}
    names.pop("p0")
    assert len(check(parameters=names).parameters) == 32


def test_the_runner_passes_parameters_to_the_script_and_nothing_else_new() -> None:
    inherited = {"SIGNAL_PARAM_LEVEL": "3", "SIGNAL_PARAMX": "no", "PARAM_LEVEL": "no", "SECRET": "no"}
    env = clean_environment(inherited, {}, home="/h")
    assert env["SIGNAL_PARAM_LEVEL"] == "3"
    assert not {"SIGNAL_PARAMX", "PARAM_LEVEL", "SECRET"} & set(env)


# --- /dev/shm, runtimeClassName, secondary networks ---------------------------------------


def test_shm_is_a_bounded_memory_backed_volume_at_dev_shm() -> None:
    pod = workloads.backend_pod(make_inputs(1, workload={"shmSize": "8Gi"}), 0, "gpu-000", "img")
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["spec"]["volumes"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in pod["spec"]["containers"][0]["volumeMounts"]
    plain = workloads.backend_pod(make_inputs(1), 0, "gpu-000", "img")
    assert all(v["name"] != "shm" for v in plain["spec"]["volumes"])


@pytest.mark.parametrize("size", ["0", "65Gi", "1Ti"])
def test_shm_out_of_bounds_is_refused(size: str) -> None:
    with pytest.raises(ValidationError, match="shmSize"):
        check(workload={"shmSize": size})


def test_runtime_class_on_the_pods_that_run_the_script_never_on_a_crossnode_launcher() -> None:
    workload = {"runtimeClassName": "nvidia"}
    pod = workloads.backend_pod(make_inputs(1, workload=workload), 0, "gpu-000", "img")
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    job = mpispec.mpijob(make_inputs(2, backend="MPIJob", workload=workload), "img")
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]


def test_networks_are_the_multus_annotation_of_pods_and_mpi_workers() -> None:
    workload = {"networks": ["sriov-ib0", "rdma/ib1@net1"]}
    pod = workloads.backend_pod(make_inputs(1, workload=workload), 0, "gpu-000", "img")
    assert pod["metadata"]["annotations"] == {keys.MULTUS_NETWORKS_ANNOTATION: "sriov-ib0,rdma/ib1@net1"}
    job = mpispec.mpijob(make_inputs(2, backend="MPIJob", workload=workload), "img")
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]
    assert worker["annotations"] == {keys.MULTUS_NETWORKS_ANNOTATION: "sriov-ib0,rdma/ib1@net1"}
    assert "annotations" not in job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]
    assert "annotations" not in workloads.backend_pod(make_inputs(1), 0, "gpu-000", "img")["metadata"]


@pytest.mark.parametrize("network", ["Upper", "a,b", "-x", "a/b/c", "x@"])
def test_malformed_network_names_are_refused(network: str) -> None:
    with pytest.raises(ValidationError):
        check(workload={"networks": [network]})


# --- a check's own image -------------------------------------------------------------------


def test_a_checks_own_image_runs_the_runner_injected_by_an_init_container_of_the_runner_image() -> None:
    pod = workloads.backend_pod(make_inputs(1, image=OWN_IMAGE), 0, "gpu-000", "runner@sha256:" + "cd" * 32)
    (init,) = pod["spec"]["initContainers"]
    (main,) = pod["spec"]["containers"]
    assert init["image"] == "runner@sha256:" + "cd" * 32
    assert init["args"] == ["inject", "--to", workloads.INJECTED_DIR]
    assert init["securityContext"] == main["securityContext"]
    assert main["image"] == OWN_IMAGE
    assert main["command"] == ["python3", "-I", "-S", f"{workloads.INJECTED_DIR}/runner/launch.py"]
    assert main["args"][0] == "run"
    assert {"name": "signal-runner", "mountPath": workloads.INJECTED_DIR, "readOnly": True} in main["volumeMounts"]
    assert workloads.container_image(make_inputs(1, image=OWN_IMAGE).check, "r") == OWN_IMAGE
    plain = workloads.backend_pod(make_inputs(1), 0, "gpu-000", "img")
    assert "initContainers" not in plain["spec"]
    assert "command" not in plain["spec"]["containers"][0]


@pytest.mark.parametrize(
    "image",
    ["registry.example/gpu/diag:latest", "diag", f"diag:1.0@sha256:{'AB' * 32}", f"diag@sha512:{'ab' * 64}"],
)
def test_a_checks_image_must_be_pinned_by_digest(image: str) -> None:
    with pytest.raises(ValidationError):
        check(image=image)


def test_a_checks_own_image_is_for_pod_checks_only() -> None:
    with pytest.raises(ValidationError, match="image is only for the Pod backend"):
        check(backend="MPIJob", image=OWN_IMAGE)


def _own_image_pod(**terminated: Any) -> Obj:
    pod = make_pod("p", "u", "gpu-000", phase="Failed", exit_code=terminated.pop("exitCode", 128))
    pod["spec"]["containers"][0]["image"] = OWN_IMAGE
    pod["spec"]["containers"][0]["command"] = ["python3", "-I", "-S", workloads.INJECTED_LAUNCH]
    pod["status"]["containerStatuses"][0]["state"]["terminated"].update(terminated)
    return pod


def test_an_image_without_python3_is_inconclusive_naming_python3() -> None:
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        'failed: unable to start container process: exec: "python3": executable file not found in $PATH: unknown'
    )
    result, why = pod_result(_own_image_pod(reason="StartError", message=message))
    assert result is None
    assert why.startswith(f"RunnerCannotStart: image {OWN_IMAGE} could not start Signal's runner")
    assert "python3" in why
    assert "3.10 or newer" in why


def test_an_image_with_an_old_python3_is_inconclusive_naming_it() -> None:
    result, why = pod_result(_own_image_pod(exitCode=EXIT_PYTHON_TOO_OLD))
    assert result is None
    assert "python3 is older than 3.10" in why


def test_the_injected_runner_runs_from_its_copy_alone(tmp_path: Path) -> None:
    """What the init container copies is the whole runner: the interpreter of a clean image,
    started isolated on the copy (no site-packages, no repository on its path), runs a script
    and writes a result."""
    copied = inject(str(tmp_path / "injected"), str(REPO))
    assert "runner/launch.py" in copied
    assert "shared/result_wire.py" in copied
    assert not any("__pycache__" in c for c in copied)
    script = tmp_path / "script"
    script.write_text('#!/bin/sh\necho "level=$SIGNAL_PARAM_LEVEL"\n')
    log = tmp_path / "termination-log"
    env = {
        "SIGNAL_NODE_NAME": "gpu-000",
        "SIGNAL_POD_NAME": "p",
        "SIGNAL_POD_UID": "u",
        "SIGNAL_PARTICIPANT_INDEX": "0",
        "SIGNAL_PARAM_LEVEL": "3",
        "PATH": os.environ["PATH"],
    }
    argv = [sys.executable, "-I", "-S", str(tmp_path / "injected" / "runner" / "launch.py"), "run"]
    argv += ["--script", str(script), "--deadline-seconds", "20", "--workdir", str(tmp_path / "work")]
    argv += ["--termination-log", str(log)]
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "work" / "stdout").read_text() == "level=3\n"
    assert b'"verdict":"Pass"' in log.read_bytes()


def test_a_pod_the_api_server_refused_is_inconclusive_with_its_reason() -> None:
    (result,) = collect_pods(make_inputs(1).participants, [], script=None)
    message = 'pods "r-c0-p0" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities'
    refused = not_admitted(result, message + ' (container "runner" must not include "IPC_LOCK")')
    assert refused.verdict == "Inconclusive"
    assert refused.reason.startswith("NotAdmitted: the API server refused the Pod of participant 0: pods")
    assert "IPC_LOCK" in refused.reason
