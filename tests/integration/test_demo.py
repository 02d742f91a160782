"""The README's first command: `signalctl demo` starts the local cluster (with Argo), runs a
full certification end to end (one Node made to fail, the rest passing), verifies the
evidence, keeps running, and stops cleanly on Ctrl-C (SIGINT) leaving no component behind
(issue 5, acceptance 7)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _children_alive(workdir: Path) -> list[str]:
    alive = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(workdir) in cmdline:
            alive.append(cmdline.replace("\0", " ")[:120])
    return alive


def test_demo_certifies_end_to_end_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    signalctl = Path(sys.executable).parent / "signalctl"
    process = subprocess.Popen(
        [str(signalctl), "demo", "--nodes", "6", "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 600
    try:
        for line in process.stdout:
            lines.append(line.rstrip())
            if "press Ctrl-C" in line or time.monotonic() > deadline:
                break
        output = "\n".join(lines)
        assert "press Ctrl-C" in output, output
        fleet = [row for row in lines if row.startswith("gpu-") and "Ready" in row]
        assert len(fleet) == 6
        assert all(row.split()[1] == "Ready" and row.split()[5] == "8" for row in fleet)
        projections = {
            row.split()[0]: row.split()[1:] for row in lines if row.startswith("gpu-") and len(row.split()) == 3
        }
        assert projections == {
            "gpu-001": ["Pass", "released"],
            "gpu-002": ["Pass", "released"],
            "gpu-003": ["Fail", "reserved+cordoned"],
            "gpu-004": ["Pass", "reserved+cordoned"],
        }, output
        assert output.count(": evidence verified") == 2, output
        # The demo ends with the portal serving those results (read-only, as signal-portal).
        assert "the portal (read-only, as signal-portal" in output
        portal = [row.split() for row in lines if row.startswith("gpu-") and len(row.split()) == 4]
        states = {(node, check): state for node, check, state, _ in portal}
        assert len(states) == 12, output
        assert states[("gpu-003", "demo-gpu/burn-in")] == "Failed"
        assert {s for k, s in states.items() if k != ("gpu-003", "demo-gpu/burn-in")} == {"Passed"}
        assert "Succeeded   AllChecksPassed" in output
        assert "Failed      CheckFailed" in output
        assert "NAME" in output
        assert "GPUS" in output
        assert "ZONE" in output
        assert f"kubeconfig: {workdir / 'admin.kubeconfig'}" in output
        assert (workdir / "admin.kubeconfig").exists()
        assert _children_alive(workdir), "the control plane should be running"
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, rest
    assert "stopped cleanly" in rest
    assert _children_alive(workdir) == []
