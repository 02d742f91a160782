"""Installs Signal's generated CRDs and the upstream Argo Workflows and MPIJob CRDs, and
proves the real garbage collector works (a canary).

The upstream CRDs come from what the repository already fetches, never from files beside it:
Argo's from the Argo Workflows module that ``localcluster/argo/build.sh`` downloads (copied
into its build's ``crds/``), the MPIJob CRD from the MPI operator's source tree
(``localcluster.binaries.mpi_operator_src``)."""

import asyncio
import time
from pathlib import Path

import yaml

from kubeio.errors import TransportError
from localcluster.binaries import REPO_ROOT, mpi_operator_src
from localcluster.kube import ApiError, KubeClient, Obj, resource_path

CRD_API = "apiextensions.k8s.io/v1"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ARGO_CRDS = ("argoproj.io_workflows.yaml", "argoproj.io_workflowtemplates.yaml", "argoproj.io_workflowtaskresults.yaml")
MPIJOB_CRD = Path("manifests") / "base" / "kubeflow.org_mpijobs.yaml"


def project_crd_files() -> list[Path]:
    return sorted((REPO_ROOT / "crds").glob("*.yaml"))


def upstream_crd_files(argo_build: Path, mpi_src: Path | None = None) -> list[Path]:
    """Every Argo CRD of the Argo build (the kinds Signal uses with full schemas, those the
    workflow-controller waits for) and the MPI operator's MPIJob CRD."""
    argo = sorted((argo_build / "crds").glob("*.yaml"))
    missing = [name for name in ARGO_CRDS if not (argo_build / "crds" / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{', '.join(missing)} not in {argo_build / 'crds'}; rebuild Argo with localcluster/argo/build.sh"
        )
    return [*argo, (mpi_src or mpi_operator_src()) / MPIJOB_CRD]


CRD_APPLY_CONCURRENCY = 4
"""CRDs applied at once. All at once (about 20, Argo's large), an API server on a loaded two-core
machine answered none within the client's 30 s and the session's cluster failed to start twice
in a row, every test of the session erroring at set-up (issue 46; seen here 2026-12-07 at a load
average of 27)."""
CRD_APPLY_ATTEMPTS = 3


async def apply_crd(kube: KubeClient, document: Obj) -> str:
    """Server-side apply one CRD; sent again when no answer came (apply is idempotent)."""
    name: str = document["metadata"]["name"]
    for attempt in range(1, CRD_APPLY_ATTEMPTS + 1):
        try:
            await kube.apply(resource_path(CRD_API, "customresourcedefinitions", name=name), document)
            return name
        except TransportError:
            if attempt == CRD_APPLY_ATTEMPTS:
                raise
    raise AssertionError("not reached")


async def wait_established(kube: KubeClient, names: list[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            crd = await kube.get(resource_path(CRD_API, "customresourcedefinitions", name=name))
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not Established after {timeout}s: {sorted(pending)}")
        if pending:
            await asyncio.sleep(0.1)


async def install_crds(kube: KubeClient, files: list[Path]) -> list[str]:
    """Server-side apply every CRD in ``files`` and wait until all are Established."""
    documents = [
        document
        for path in files
        for document in yaml.load_all(path.read_text(), Loader=_Loader)
        if document and document.get("kind") == "CustomResourceDefinition"
    ]
    gate = asyncio.Semaphore(CRD_APPLY_CONCURRENCY)

    async def apply(document: Obj) -> str:
        async with gate:
            return await apply_crd(kube, document)

    names = list(await asyncio.gather(*(apply(d) for d in documents)))
    await wait_established(kube, names)
    return names


async def prove_garbage_collection(kube: KubeClient, namespace: str = "default", timeout: float = 60.0) -> float:
    """Foreground-delete an owner ConfigMap and wait for its dependent to go. Returns seconds."""
    started = time.monotonic()
    cms = resource_path("v1", "configmaps", namespace)
    owner = await kube.create(cms, {"metadata": {"generateName": "gc-canary-owner-"}})
    owner_ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    dependent = await kube.create(cms, {"metadata": {"generateName": "gc-canary-dep-", "ownerReferences": [owner_ref]}})
    await kube.delete(f"{cms}/{owner['metadata']['name']}", {"propagationPolicy": "Foreground"})
    while time.monotonic() - started < timeout:
        try:
            await kube.get(f"{cms}/{dependent['metadata']['name']}")
        except ApiError as exc:
            if exc.status == 404:
                return time.monotonic() - started
            raise
        await asyncio.sleep(0.2)
    raise TimeoutError(f"garbage collector did not delete the canary dependent within {timeout}s")
