"""Finds (and if needed builds, cached) the multicall control-plane binary."""

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = Path(__file__).resolve().parent / "kplane" / "build.sh"
ARGO_BUILD_SCRIPT = Path(__file__).resolve().parent / "argo" / "build.sh"


class BuildError(RuntimeError):
    """The control-plane binary could not be built."""


def kplane_binary(*, show_progress: bool = False) -> Path:
    """Path of the kplane binary: ``$SIGNAL_KPLANE_BINARY`` or the cached build.
    With ``show_progress`` the build's messages go to this process's stderr."""
    override = os.environ.get("SIGNAL_KPLANE_BINARY")
    if override:
        path = Path(override)
        if not os.access(path, os.X_OK):
            raise BuildError(f"SIGNAL_KPLANE_BINARY={override} is not an executable file")
        return path
    return _build(BUILD_SCRIPT, "the local control plane", show_progress)


ARGO_CLUSTER_TOOLS = ("workflow-controller", "argoexec")
"""What a cluster runs of Argo; the ``argo`` CLI (``argo lint --offline``) only tests use."""
ARGO_TOOLS = (*ARGO_CLUSTER_TOOLS, "argo")


def argo_build_dir(tools: tuple[str, ...] = ARGO_CLUSTER_TOOLS) -> Path:
    """Directory holding Argo's ``tools`` (default: ``workflow-controller`` and ``argoexec``;
    :data:`ARGO_TOOLS` adds the ``argo`` CLI) and the extra Argo CRDs (``crds/``):
    ``$SIGNAL_ARGO_BUILD`` or the cached build of localcluster/argo (the tools missing from it
    built on first use). Local test infrastructure only, never shipped."""
    override = os.environ.get("SIGNAL_ARGO_BUILD")
    if override:
        path = Path(override)
        if not all(os.access(path / tool, os.X_OK) for tool in tools):
            raise BuildError(f"SIGNAL_ARGO_BUILD={override} does not hold {' and '.join(tools)}")
        return path
    return _build(ARGO_BUILD_SCRIPT, "Argo Workflows", args=tools)


MPI_OPERATOR_VERSION = "v0.8.0"
MPI_OPERATOR_REPOSITORY = "https://github.com/kubeflow/mpi-operator"


def mpi_operator_src() -> Path:
    """The Kubeflow MPI operator's source tree at v0.8.0 (its CRD, and its source for a build):
    ``$SIGNAL_MPI_OPERATOR_SRC``, default ``../shared/upstream-src/mpi-operator-v0.8.0`` beside
    this repository. Elsewhere: ``git clone --branch v0.8.0`` of the upstream repository."""
    configured = os.environ.get("SIGNAL_MPI_OPERATOR_SRC")
    path = Path(configured) if configured else REPO_ROOT.parent / "shared" / "upstream-src" / "mpi-operator-v0.8.0"
    if not (path / "manifests" / "base" / "kubeflow.org_mpijobs.yaml").is_file():
        raise FileNotFoundError(
            f"the Kubeflow MPI operator's source ({MPI_OPERATOR_VERSION}) is not at {path} "
            f"(no manifests/base/kubeflow.org_mpijobs.yaml there): run `git clone --branch "
            f"{MPI_OPERATOR_VERSION} {MPI_OPERATOR_REPOSITORY} DIR` and set SIGNAL_MPI_OPERATOR_SRC=DIR"
        )
    return path


def _build(script: Path, what: str, show_progress: bool = False, args: tuple[str, ...] = ()) -> Path:
    """Run a cached build script; its last line of output is the path of what it built. Its
    messages (stderr) pass through to this process's stderr with ``show_progress``."""
    stderr = None if show_progress else subprocess.PIPE
    argv = ["bash", str(script), *args]
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=stderr, text=True, check=False)
    if result.returncode != 0:
        seen = "see its messages above" if show_progress else f"run {script} to see why"
        raise BuildError(f"building {what} failed (exit {result.returncode}); {seen}:\n{(result.stderr or '')[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])
