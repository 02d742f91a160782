"""`signalctl demo --simulated` (the README's first command on simulated Nodes) starts the local cluster (with Argo), runs a
full certification end to end (one Node made to fail, the rest passing), verifies the
evidence, keeps running, and stops cleanly on Ctrl-C (SIGINT) leaving no component behind
(issue 5, acceptance 7). It reports only what has happened (the Succeeded Run's Nodes are
released before its final table) and exits non-zero on any other end (signalctl/demo_outcome.py).
Killed with SIGKILL mid-run, nothing of it remains within seconds, and the next demo starts
cleanly (issue 11). Every demo is started in a session of its own and its whole process group is
killed, and its pipe closed, whatever the test's outcome, so a failure never leaks into the
next test."""

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SIGNALCTL = Path(sys.executable).parent / "signalctl"


def _processes_naming(path: Path) -> list[str]:
    alive = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmdline:
            alive.append(f"{proc.name}: {cmdline.replace(chr(0), ' ')[:160]}")
    return alive


def _descendants(root: int) -> dict[int, str]:
    """pid -> start time of every live descendant of ``root``."""
    parent: dict[int, int] = {}
    start: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parent[int(proc.name)], start[int(proc.name)] = int(fields[1]), fields[19]
    found: dict[int, str] = {}
    frontier = [pid for pid, ppid in parent.items() if ppid == root]
    while frontier:
        pid = frontier.pop()
        found[pid] = start[pid]
        frontier += [child for child, ppid in parent.items() if ppid == pid]
    return found


def _still_alive(processes: dict[int, str]) -> list[int]:
    alive = []
    for pid, started in processes.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and fields[19] == started:
            alive.append(pid)
    return alive


@contextmanager
def demo(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """``signalctl demo ARGS`` (with ``env`` added) in a session of its own; whatever happens,
    its process group is killed and its pipe closed at the end."""
    process = subprocess.Popen(
        [str(SIGNALCTL), "demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()


def _read_until(process: subprocess.Popen[str], marker: str, lines: list[str], timeout: float) -> bool:
    """Read lines into ``lines`` until one contains ``marker`` (True), or EOF or the deadline."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        lines.append(line.rstrip())
        if marker in line:
            return True
        if time.monotonic() > deadline:
            return False
    return False


def assert_the_expected_end(lines: list[str], checks: int = 2) -> None:
    """What every demo's report must show: the projections and states of gpu-001..gpu-004, both
    Runs' evidence verified, and the portal's rows, one per Node and check (gpu-003's burn-in
    Failed, the rest Passed). ``checks``: 3 on real nodes; 2 simulated (its MPIJob check left out)."""
    output = "\n".join(lines)
    projections = {row.split()[0]: row.split()[1:] for row in lines if row.startswith("gpu-") and len(row.split()) == 3}
    assert projections == {
        "gpu-001": ["Pass", "released"],
        "gpu-002": ["Pass", "released"],
        "gpu-003": ["Fail", "reserved+cordoned"],
        "gpu-004": ["Pass", "reserved+cordoned"],
    }, output
    assert output.count(": evidence verified") == 2, output
    portal = [row.split() for row in lines if row.startswith("gpu-") and len(row.split()) == 4]
    states = {(node, check): state for node, check, state, _ in portal}
    assert len(states) == 4 * checks, output
    assert states[("gpu-003", "demo-gpu/burn-in")] == "Failed"
    assert {s for k, s in states.items() if k != ("gpu-003", "demo-gpu/burn-in")} == {"Passed"}


def test_demo_certifies_end_to_end_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    lines: list[str] = []
    with demo("--simulated", "--nodes", "6", "--workdir", str(workdir)) as process:
        reached = _read_until(process, "press Ctrl-C", lines, 900)
        output = "\n".join(lines)
        assert reached, output
        assert "the demo ended as expected" in output
        fleet = [row for row in lines if row.startswith("gpu-") and "Ready" in row]
        assert len(fleet) == 6
        assert all(row.split()[1] == "Ready" and row.split()[5] == "8" for row in fleet)
        assert_the_expected_end(lines)
        # The release was seen before the report, and the progress showed each check Node by Node.
        assert output.index("(Nodes released)") < output.index("==> Runs ["), output
        # (A check whose Pods all finish between two looks shows its Nodes-done line at its
        # verdict, so every check shows one however fast it ran.)
        for check in ("1/2 inventory", "2/2 burn-in"):
            assert re.search(rf"check {check} \(Pod\): [0-2]/2 Nodes done", output), output
        assert "simulated Nodes run no MPIJob: check(s) allreduce left out" in output, output
        # The demo ends with the portal serving those results (read-only, as signal-portal).
        assert "the portal (read-only, as signal-portal" in output
        assert "Succeeded   AllChecksPassed" in output
        assert "Failed      CheckFailed" in output
        assert "NAME" in output
        assert "GPUS" in output
        assert "ZONE" in output
        assert f"kubeconfig: {workdir / 'admin.kubeconfig'}" in output
        assert (workdir / "admin.kubeconfig").exists()
        assert _processes_naming(workdir), "the control plane should be running"
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
        assert process.returncode == 0, rest
        assert "stopped cleanly" in rest
    assert _processes_naming(workdir) == []


def test_a_demo_killed_mid_run_leaves_nothing_and_the_next_starts_cleanly() -> None:
    lines: list[str] = []
    with demo("--simulated", "--nodes", "4") as process:
        assert _read_until(process, "]: Running", lines, 900), "\n".join(lines)
        workdir = Path(
            next(line for line in lines if "work directory:" in line).split("work directory: ")[1].split()[0]
        )
        assert workdir.is_dir()
        before = _descendants(process.pid)
        names = " ".join(Path(f"/proc/{pid}/comm").read_text().strip() for pid in _still_alive(before))
        for component in ("kplane", "workflow-contro", "signal-control"):
            assert component in names, names
        assert _processes_naming(workdir), "the control plane should be running"
        process.send_signal(signal.SIGKILL)  # the demo alone, as a test runner's timeout would
        process.wait(10)
        deadline = time.monotonic() + 20
        while (_still_alive(before) or _processes_naming(workdir) or workdir.exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _still_alive(before) == [], [Path(f"/proc/{p}/cmdline").read_text() for p in _still_alive(before)]
        assert _processes_naming(workdir) == []
        assert not workdir.exists(), "the killed demo's work directory was not removed"

    lines = []
    with demo("--simulated", "--nodes", "4") as process:
        assert _read_until(process, "requesting gpu-001", lines, 600), "\n".join(lines)
        assert "exited during start-up" not in "\n".join(lines)
        workdir = Path(
            next(line for line in lines if "work directory:" in line).split("work directory: ")[1].split()[0]
        )
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
        assert "interrupted before the certification finished" in rest, rest
        assert "stopped cleanly" in rest
        assert process.returncode == 130, rest
    deadline = time.monotonic() + 20
    while _processes_naming(workdir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_naming(workdir) == []


def test_the_demo_exits_non_zero_when_its_end_is_not_the_expected_one(tmp_path: Path) -> None:
    """Every Argo step fails (an executor that exits 129, as it did from a checkout under /tmp):
    every Node ends without a Pass, and the demo says so and exits 1 instead of 0."""
    real = Path(
        subprocess.run(
            ["bash", str(Path(__file__).resolve().parents[2] / "localcluster" / "argo" / "build.sh")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()[-1]
    )
    broken = tmp_path / "argo"
    broken.mkdir()
    (broken / "workflow-controller").symlink_to(real / "workflow-controller")
    (broken / "crds").symlink_to(real / "crds")
    (broken / "argoexec").write_text("#!/bin/sh\necho 'argoexec: broken on purpose' >&2\nexit 129\n")
    (broken / "argoexec").chmod(0o755)
    with demo("--simulated", "--nodes", "4", "--timeout", "600", env={"SIGNAL_ARGO_BUILD": str(broken)}) as process:
        assert process.stdout is not None
        output = "\n".join(line.rstrip() for line in process.stdout)
        process.wait(60)
        assert process.returncode == 1, output
    assert "the demo did NOT end as expected" in output, output
    assert "press Ctrl-C" not in output
    assert re.search(r"- Node gpu-001 is \w+, expected Pass", output), output
    assert "stopped cleanly" in output
