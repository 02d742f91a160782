"""The repository stands on its own (issue 16, part 1): a copy of it, cloned under /tmp, with
nothing beside it but the one documented location of the MPI operator's source
(``../shared/upstream-src/mpi-operator-v0.8.0``, what ``git clone --branch v0.8.0`` gives),
runs both README commands' set-up steps (``make deps kplane argo``: the Debian packages, the
control-plane and Argo builds, reusing the build caches outside the clone) and starts the local
cluster with every upstream CRD: Argo's from the Argo module the build downloads, the MPIJob CRD
from that source tree. A Pod in a private mount namespace (as Argo's executor runs) then imports
the copy's own code from under /tmp (issue 11, 2.10: any checkout path works)."""

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from localcluster.binaries import REPO_ROOT, mpi_operator_src

START = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    import localcluster
    from localcluster.cluster import LocalCluster
    from localcluster.controlplane import ControlPlane
    from localcluster.fleet import SimNode
    from localcluster.kube import resource_path

    copy = Path(sys.argv[1])
    assert Path(localcluster.__file__).resolve().is_relative_to(copy), localcluster.__file__

    async def main():
        async with LocalCluster(plane=ControlPlane(), heartbeat_seconds=5.0) as cluster:
            crds = await cluster.admin.get(resource_path("apiextensions.k8s.io/v1", "customresourcedefinitions"))
            names = {c["metadata"]["name"] for c in crds["items"]}
            for name in ("workflows.argoproj.io", "workflowtemplates.argoproj.io", "workflowtaskresults.argoproj.io",
                         "mpijobs.kubeflow.org", "certificationruns.projectsignal.dev"):
                assert name in names, sorted(names)
            await cluster.add_nodes([SimNode("self-contained-0")])
            code = "import shared; open('/dev/termination-log', 'w').write(shared.__file__)"
            pod = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "from-tmp", "annotations": {
                    "localcluster.projectsignal.dev/mount-namespaces": "true"}},
                "spec": {"nodeName": "self-contained-0", "restartPolicy": "Never",
                         "automountServiceAccountToken": False,
                         "containers": [{"name": "main", "image": "busybox", "command": [sys.executable, "-c", code],
                                         "env": [{"name": "PYTHONPATH", "value": str(copy)}]}]},
            }
            await cluster.admin.create(resource_path("v1", "pods", "default"), pod)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                got = await cluster.admin.get(resource_path("v1", "pods", "default", "from-tmp"))
                if got.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    break
                await asyncio.sleep(0.3)
            state = got["status"]["containerStatuses"][0]["state"]
            print("POD", got["status"]["phase"], state.get("terminated", {}).get("message", ""), flush=True)

    asyncio.run(main())
    print("CLUSTER OK", flush=True)
    """
)


def _copy_checkout(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        source = REPO_ROOT / raw.decode()
        if source.is_file() and not source.is_symlink():
            (target / raw.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / raw.decode())


def test_a_clone_under_tmp_with_only_the_mpi_operator_source_beside_it_sets_up_and_starts(tmp_path: Path) -> None:
    assert str(tmp_path).startswith("/tmp/"), tmp_path
    copy = tmp_path / "signal"
    _copy_checkout(copy)
    beside = tmp_path / "shared" / "upstream-src" / "mpi-operator-v0.8.0"
    shutil.copytree(mpi_operator_src(), beside)
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == ["upstream-src"]
    assert sorted(p.name for p in (tmp_path / "shared" / "upstream-src").iterdir()) == ["mpi-operator-v0.8.0"]
    # The Python environment is this one (the package registry is not the subject here): the
    # copy's .venv is stamped installed for the copy's path (Makefile: VENV_STAMP), its bin/ is
    # ours; PYTHONPATH makes the copy's code win.
    (copy / ".venv").mkdir()
    (copy / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    (copy / ".venv" / ".path").write_text(f"{copy}\n")
    (copy / ".venv" / f".installed-{hashlib.sha256(str(copy).encode()).hexdigest()[:16]}").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNAL_")}
    env |= {
        "SIGNAL_KPLANE_DIR": str(REPO_ROOT / ".cache" / "kplane"),
        "SIGNAL_ARGO_DIR": str(REPO_ROOT / ".cache" / "argo"),
        "PYTHONPATH": str(copy),
    }
    setup = subprocess.run(
        ["make", "deps", "kplane", "argo"], check=False, cwd=copy, env=env, capture_output=True, text=True, timeout=1800
    )
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    started = subprocess.run(
        [sys.executable, "-c", START, str(copy)],
        check=False,
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert "CLUSTER OK" in started.stdout, started.stdout[-3000:] + started.stderr[-5000:]
    pod = next(line for line in started.stdout.splitlines() if line.startswith("POD "))
    assert pod == f"POD Succeeded {copy / 'shared' / '__init__.py'}", started.stderr[-3000:]
