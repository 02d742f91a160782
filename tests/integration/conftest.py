"""Fixtures shared by the integration tests of the portal and its dashboard."""

from collections.abc import AsyncIterator

import pytest

from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient
from tests.integration.test_portal import Lab


@pytest.fixture
async def lab(cluster: LocalCluster, admin: KubeClient) -> AsyncIterator[Lab]:
    """Profiles, Nodes and Runs made for one test, removed afterwards."""
    made = Lab(cluster, admin)
    yield made
    await made.close()
