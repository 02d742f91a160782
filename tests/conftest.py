"""Shared pytest configuration: the real local control plane, one per test session, and
a fresh namespace per test. Component logs are attached to every failed test's report."""

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from localcluster.cluster import LocalCluster
from localcluster.controlplane import ControlPlane
from localcluster.kube import KubeClient

_CLUSTER: LocalCluster | None = None
WORKFLOW_INSTANCE = "signal-tests"


@pytest.fixture(scope="session")
async def cluster() -> AsyncIterator[LocalCluster]:
    """The session's local cluster (control plane, CRDs, GC, process kubelet)."""
    global _CLUSTER  # noqa: PLW0603 - read by the report hook below
    keep = os.environ.get("SIGNAL_KEEP_CLUSTER_DIR") == "1"
    # Argo runs only the Workflows of tests that ask for it (the controller's
    # --workflow-instance-id, or workflow_manifest(run, WORKFLOW_INSTANCE)); the other tests'
    # Workflows stay untouched, as they were written for.
    local = LocalCluster(
        plane=ControlPlane(keep_workdir=keep), heartbeat_seconds=5.0, workflow_instance_id=WORKFLOW_INSTANCE
    )
    await local.start()
    _CLUSTER = local
    try:
        yield local
    finally:
        _CLUSTER = None
        await local.stop()


@pytest.fixture
async def admin(cluster: LocalCluster) -> KubeClient:
    return cluster.admin


@pytest.fixture
async def namespace(cluster: LocalCluster) -> AsyncIterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    await cluster.create_namespace(name)
    yield name
    await cluster.delete_namespace(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and _CLUSTER is not None and "cluster" in getattr(item, "fixturenames", ()):
        report.sections.append(("local control plane logs", _CLUSTER.plane.logs(12)))
    return report
