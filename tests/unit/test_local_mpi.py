"""Pure parts of the local MPI simulation: the MPIJob object graph, host-to-Pod resolution
and the rsh agent's ssh-style command line."""

import pytest

from localcluster import mpigraph as g
from localcluster.podexec import HostRef, parse_host
from localcluster.rsh import Invocation, UsageError, parse_args


def job(**spec: object) -> g.Obj:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "team", "uid": "u-1"},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {
                    "template": {
                        "spec": {"containers": [{"name": "l", "image": "i", "env": [{"name": "A", "value": "1"}]}]}
                    }
                },
                "Worker": {
                    "replicas": 3,
                    "template": {
                        "metadata": {"labels": {"app": "pi", "training.kubeflow.org/job-role": "spoofed"}},
                        "spec": {"containers": [{"name": "w", "image": "i"}], "nodeName": "n1"},
                    },
                },
            },
            **spec,
        },
    }


def test_hostfile_has_one_line_per_worker_with_slots() -> None:
    assert g.hostfile(job(slotsPerWorker=4)) == (
        "pi-worker-0.pi.team.svc slots=4\npi-worker-1.pi.team.svc slots=4\npi-worker-2.pi.team.svc slots=4\n"
    )
    assert g.hostfile(job()).splitlines()[0] == "pi-worker-0.pi.team.svc slots=1"


def test_discover_hosts_lists_only_running_workers() -> None:
    assert g.discover_hosts(job(slotsPerWorker=2), {2, 0}) == (
        "#!/bin/sh\necho pi-worker-0.pi.team.svc:2\necho pi-worker-2.pi.team.svc:2\n"
    )


def test_worker_pod_carries_identity_labels_ssh_mount_and_owner() -> None:
    pod = g.worker_pod(job(sshAuthMountPath="/home/mpi/.ssh"), 1)
    assert pod["metadata"]["name"] == "pi-worker-1"
    assert pod["metadata"]["labels"] == {
        "app": "pi",
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-index": "1",
    }
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"], pod["spec"]["nodeName"]) == ("pi-worker-1", "pi", "n1")
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "ssh-auth", "mountPath": "/home/mpi/.ssh"}]
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "pi-ssh"
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "name": "pi",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_launcher_job_gets_openmpi_env_config_mount_and_run_policy() -> None:
    launcher = g.launcher_job(job(runPolicy={"backoffLimit": 2, "activeDeadlineSeconds": 60}))
    assert launcher["metadata"]["name"] == "pi-launcher"
    assert launcher["spec"]["backoffLimit"] == 2
    assert launcher["spec"]["activeDeadlineSeconds"] == 60
    pod = launcher["spec"]["template"]
    assert pod["metadata"]["labels"]["training.kubeflow.org/job-role"] == "launcher"
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["A"] == "1"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_plm_rsh_args"] == "-o ConnectionAttempts=10"
    assert env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"
    assert {"name": "mpi-job-config", "mountPath": "/etc/mpi"} in container["volumeMounts"]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert g.launcher_job(job())["spec"]["backoffLimit"] == 0


def test_clean_pod_policy_defaults_to_none_as_in_the_operator_code() -> None:
    assert g.clean_pod_policy(job()) == "None"
    assert g.clean_pod_policy(job(runPolicy={"cleanPodPolicy": "Running"})) == "Running"


def test_a_finished_condition_turns_running_false_and_keeps_transition_times() -> None:
    status: g.Obj = {}
    g.set_condition(status, "Running", True, "MPIJobRunning", "running")
    first = g.condition(status, "Running")
    assert first is not None
    g.set_condition(status, "Running", True, "MPIJobRunning", "running")
    assert g.condition(status, "Running") is first, "an unchanged condition is not rewritten"
    g.set_condition(status, "Succeeded", True, "MPIJobSucceeded", "done")
    running = g.condition(status, "Running")
    assert running is not None
    assert running["status"] == "False"
    assert g.finished(status) == "Succeeded"


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("w-0.job.ns.svc", HostRef("ns", "w-0", "job")),
        ("w-0.job.ns.svc.cluster.local", HostRef("ns", "w-0", "job")),
        ("root@W-0.job.ns.svc.", HostRef("ns", "w-0", "job")),
        ("w-0.job.ns", HostRef("ns", "w-0", "job")),
        ("w-0.job", HostRef("mine", "w-0", "job")),
        ("w-0", HostRef("mine", "w-0")),
    ],
)
def test_hosts_resolve_to_pods(host: str, expected: HostRef) -> None:
    assert parse_host(host, "mine") == expected


@pytest.mark.parametrize("host", ["a.b.c.d", "a..b", ""])
def test_unresolvable_hosts_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match="cannot resolve"):
        parse_host(host, "mine")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-o", "ConnectionAttempts=10", "h", "orted", "-mca", "x"], Invocation("h", "orted -mca x", 10)),
        (["-oconnectionattempts 3", "-x", "h", "echo hi"], Invocation("h", "echo hi", 3)),
        (["-xTn", "-p", "22", "-l", "root", "h", "true"], Invocation("h", "true", 1, no_stdin=True)),
        (["-p22", "--", "h", "a", "b"], Invocation("h", "a b", 1)),
        (["h", "-o", "x"], Invocation("h", "-o x", 1)),
    ],
)
def test_ssh_style_command_lines_parse(argv: list[str], expected: Invocation) -> None:
    assert parse_args(argv) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-o"], "needs an argument"),
        (["-Z", "h", "true"], "unknown option"),
        (["-o", "ConnectionAttempts=x", "h", "true"], "ConnectionAttempts"),
        (["-x"], "no host"),
        (["h"], "interactive"),
    ],
)
def test_bad_command_lines_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_args(argv)
