"""`signalctl demo` on real nodes (issue 11): the demo with no stand-in under it. A system node
and four GPU nodes are real kubelets and containerd; Signal's controller and portal, Argo's
workflow-controller and the Kubeflow MPI operator run there as Pods of the images built from this
repository's Dockerfiles (installed with `kubectl kustomize deploy/overlays/local` and Argo's own
manifests); every Argo step is an argoexec + adapter Pod, every check a runner Pod or an MPIJob
over SSH on the real GPU nodes. The demo must end exactly as the simulated one does, the portal
Pod must serve the results over HTTPS to a portal-audience token, and Ctrl-C must leave nothing
running and no host state behind."""

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from localcluster.binaries import kplane_binary
from localcluster.realnode import hoststate
from localcluster.realnode.network import BRIDGE_PREFIX
from tests.integration.test_demo import _processes_naming, _read_until, assert_the_expected_end, demo

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


def test_the_demo_on_real_nodes_runs_everything_as_pods_and_ends_as_expected() -> None:
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
    records = sorted(hoststate.state_dir().glob("slot-*.json"))
    bridges = sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(BRIDGE_PREFIX))
    assert (records, bridges) == ([], []), "the demo's real nodes left host state behind"
