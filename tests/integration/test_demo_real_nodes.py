"""`signalctl demo` on real nodes (issue 11): the demo with no stand-in under it. A system node
and four GPU nodes are real kubelets and containerd; Signal's controller and portal, Argo's
workflow-controller and the Kubeflow MPI operator run there as Pods of the images built from this
repository's Dockerfiles (installed with `kubectl kustomize deploy/overlays/local` and Argo's own
manifests); every Argo step is an argoexec + adapter Pod, every check a runner Pod or an MPIJob
over SSH on the real GPU nodes. The demo must end exactly as the simulated one does, the portal
Pod must serve the results over HTTPS to a portal-audience token, and Ctrl-C must leave nothing
running and no host state behind. A demo SIGKILLed mid-run (as a test runner's timeout would)
leaves nothing of it within seconds, containers included; the next demo (the second test, in
file order) then starts and runs cleanly."""

import contextlib
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from localcluster.binaries import kplane_binary
from localcluster.realnode import hoststate
from localcluster.realnode.network import BRIDGE_PREFIX
from tests.integration.test_demo import (
    _descendants,
    _processes_naming,
    _read_until,
    _still_alive,
    assert_the_expected_end,
    demo,
)

# A cold build of the seven images takes 15-20 minutes on two cores (cached by content afterwards).
pytestmark = pytest.mark.timeout(2700)

IN_CLUSTER = {
    ("signal-system", "signal-controller"),
    ("signal-system", "signal-portal"),
    ("argo", "workflow-controller"),
    ("mpi-operator", "mpi-operator"),
}


def _pods(kubeconfig: Path) -> list[dict[str, Any]]:
    argv = [str(kplane_binary()), "kubectl", f"--kubeconfig={kubeconfig}", "get", "pods", "-A", "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    items: list[dict[str, Any]] = json.loads(done.stdout)["items"]
    return items


def _shims() -> dict[int, str]:
    """pid -> start time of every containerd shim (a real node's container's parent)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"containerd-shim" in (proc / "cmdline").read_bytes():
                found[int(proc.name)] = (proc / "stat").read_text().rsplit(")", 1)[1].split()[19]
        except OSError:
            continue
    return found


def _host_state() -> tuple[list[Path], list[str]]:
    records = sorted(hoststate.state_dir().glob("slot-*.json"))
    bridges = sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(BRIDGE_PREFIX))
    return records, bridges


def test_a_real_node_demo_killed_mid_run_leaves_nothing_behind() -> None:
    lines: list[str] = []
    with demo("--timeout", "1200") as process:
        assert _read_until(process, "]: Running", lines, 2400), "\n".join(lines)
        workdir = Path(
            next(line for line in lines if "work directory:" in line).split("work directory: ")[1].split()[0]
        )
        before = _descendants(process.pid)
        shims = _shims()
        # Positive control: the cluster runs, with real containers (a shim per Pod).
        assert _processes_naming(workdir), "the cluster should be running"
        assert shims, "no containerd shim runs: the demo's Pods are not real containers"
        assert _host_state() != ([], []), "the real nodes' host state should exist"
        process.send_signal(signal.SIGKILL)  # the demo alone, as a test runner's timeout would
        killed = time.monotonic()
        process.wait(10)
        # Within seconds: every process of it (but its two cleaners), every container, the bridge.
        deadline = killed + 30
        while time.monotonic() < deadline and (
            _running(before) or _still_alive(shims) or _processes_naming(workdir) or _host_state()[1]
        ):
            time.sleep(0.2)
        assert _running(before) == [], [Path(f"/proc/{p}/cmdline").read_text() for p in _running(before)]
        assert _still_alive(shims) == [], "the killed demo's containers still run"
        assert _processes_naming(workdir) == []
        assert _host_state()[1] == [], "the killed demo's bridge is still there"
        stopped = time.monotonic() - killed
        # Then its files: the cleaners remove the work directory (the nodes' containerd roots with
        # the unpacked images: minutes under load on this machine), the records, and exit.
        deadline = killed + 600
        while time.monotonic() < deadline and (_still_alive(before) or workdir.exists() or _host_state() != ([], [])):
            time.sleep(0.5)
        assert _still_alive(before) == [], [Path(f"/proc/{p}/cmdline").read_text() for p in _still_alive(before)]
        assert not workdir.exists(), "the killed demo's work directory was not removed"
        assert _host_state() == ([], []), "the killed demo's real nodes left host state behind"
        print(
            f"\nSIGKILLed real-node demo: processes, containers and bridge gone in {stopped:.1f}s, "
            f"files and records in {time.monotonic() - killed:.1f}s"
        )


def _running(processes: dict[int, str]) -> list[int]:
    """Those of ``processes`` still alive, but the run's cleaners (the watchdog that removes its
    files, localcluster/reaper.py, and the real nodes' janitor, localcluster.realnode.hoststate)."""
    cleaners = ("localcluster/reaper.py", "localcluster.realnode.hoststate")
    alive = []
    for pid in _still_alive(processes):
        with contextlib.suppress(OSError):
            if not any(c in Path(f"/proc/{pid}/cmdline").read_text(errors="replace") for c in cleaners):
                alive.append(pid)
    return alive


def test_the_demo_on_real_nodes_runs_everything_as_pods_and_ends_as_expected() -> None:
    """Also the next demo after the killed one above: it starts and ends cleanly."""
    lines: list[str] = []
    # Its own temporary work directory (no --workdir: that one is kept), removed at its end.
    with demo("--timeout", "1200") as process:
        reached = _read_until(process, "press Ctrl-C", lines, 2400)
        output = "\n".join(lines)
        assert reached, output
        workdir = Path(
            next(line for line in lines if "work directory:" in line).split("work directory: ")[1].split()[0]
        )
        assert "the demo ended as expected" in output
        fleet = [row.split() for row in lines if row.startswith("gpu-") and "Ready" in row]
        assert [row[0] for row in fleet] == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"], output
        assert_the_expected_end(lines, checks=3)
        assert "HTTPS, as signal-demo-viewer" in output

        pods = _pods(workdir / "admin.kubeconfig")
        by_app = {}
        for pod in pods:
            meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
            for namespace, prefix in IN_CLUSTER:
                if meta["namespace"] == namespace and str(meta["name"]).startswith(f"{prefix}-"):
                    by_app[(namespace, prefix)] = (spec.get("nodeName"), status.get("phase"), status)
        assert set(by_app) == IN_CLUSTER, sorted(by_app)
        for app, (node, phase, status) in by_app.items():
            assert (node, phase) == ("system-1", "Running"), (app, node, phase)
            # A container of the node's containerd, started from the locally built image.
            for container in status["containerStatuses"]:
                assert container["containerID"].startswith("containerd://"), (app, container)
                assert container["restartCount"] == 0, (app, container)
        assert _processes_naming(workdir), "the cluster should be running"
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
        assert process.returncode == 0, rest
        assert "stopped cleanly" in rest
    assert _processes_naming(workdir) == []
    assert not workdir.exists(), "the demo's work directory (and its nodes' files) was not removed"
    assert _host_state() == ([], []), "the demo's real nodes left host state behind"
