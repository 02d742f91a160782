"""The MPI launcher waits for its workers' sshd before mpirun (runner/mpi.py wait_for_workers):
with Kueue, the MPI operator v0.8.0 starts the launcher of a once-suspended MPIJob together with
its workers, not after them (kubeflow/mpi-operator issue 615), and mpirun then failed on real
nodes with 'ORTE was unable to reliably start one or more daemons' (two Runs of four in
tests/integration/test_runs_on_real_nodes.py's Kueue test). Bounded by the check's deadline; a
worker never reachable ends the check Inconclusive with a reason that names it."""

import socket
from pathlib import Path

import pytest

from adapter import mpispec, workloads
from runner import main as runner_main
from runner.mpi import wait_for_workers
from shared import keys
from shared.result import parse_result
from shared.run import Verdict
from tests.unit.test_adapter_logic import container_of, flag, mpi_inputs


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


def test_it_waits_until_every_host_accepts_a_connection() -> None:
    clock = Clock()
    up_at = {"w-0": 0.0, "w-1": 3.0, "w-2": 7.5}
    tried: list[tuple[str, int]] = []

    def reachable(host: str, port: int) -> bool:
        tried.append((host, port))
        return clock.now >= up_at[host]

    hosts = ["w-0", "w-1", "w-2", "w-1"]  # a host with more slots is listed once per slot in some files
    assert wait_for_workers(hosts, 2222, 60, reachable=reachable, clock=clock, pause=clock.pause) == []
    assert 7.5 <= clock.now < 8.5
    assert {port for _, port in tried} == {2222}
    assert tried.count(("w-0", 2222)) == 1, "a reachable host is not asked again"


def test_it_gives_up_at_the_timeout_and_names_the_hosts_still_unreachable() -> None:
    clock = Clock()
    hosts = ["w-0", "w-1", "w-2"]
    found = wait_for_workers(hosts, 2222, 10, reachable=lambda h, _: h == "w-1", clock=clock, pause=clock.pause)
    assert found == ["w-0", "w-2"]
    assert clock.now == pytest.approx(10.0)


def test_a_real_listener_is_reachable_and_an_unresolvable_name_is_not() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert wait_for_workers(["127.0.0.1"], port, 5) == []
        assert wait_for_workers(["worker-0.signal.invalid", "127.0.0.1"], port, 0) == ["worker-0.signal.invalid"]


def test_the_launcher_role_ends_inconclusive_naming_a_worker_it_never_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in {"SIGNAL_NODE_NAME": "gpu-000", "SIGNAL_POD_NAME": "job-launcher", "SIGNAL_POD_UID": "u"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun: the role must not get that far
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("job-worker-0.job.ns.signal.invalid slots=1\n")
    log = tmp_path / "log"
    argv = ["launcher", "--script", str(script), "--deadline-seconds", "1", "--workdir", str(tmp_path / "w")]
    argv += ["--termination-log", str(log), "--hostfile", str(hostfile), "--worker-port", "2222"]
    assert runner_main.main(argv) == 1
    result = parse_result(log.read_bytes())
    assert result.verdict == Verdict.INCONCLUSIVE
    assert "WorkersUnreachable" in result.reason
    assert "job-worker-0.job.ns.signal.invalid" in result.reason


def test_the_adapter_has_the_launcher_wait_for_the_workers_sshd_when_they_run_one() -> None:
    def launcher_args(sshd: str) -> list[str]:
        job = mpispec.mpijob(mpi_inputs(2), "img", sshd=sshd)
        args: list[str] = container_of(job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"])["args"]
        return args

    assert flag(launcher_args(workloads.DEFAULT_SSHD), "--worker-port") == str(keys.SSHD_PORT)
    assert "--worker-port" not in launcher_args("")
