"""Issue 3, acceptance 7 (invariant 6): the controller's identity cannot create Pods or
MPIJobs, delete Nodes or read Secrets. And the admission ledger fences a deposed leader:
once another controller took the fence, the old one can neither read it as its own nor
complete an admission from what it read before."""

from pathlib import Path

import pytest

from controller.reconcile.state import Context, NotLeader
from controller.rules.ledger import Group
from kubeio.client import Kube
from kubeio.errors import Conflict
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, resource_path
from tests.controller_support import install_rbac


@pytest.mark.parametrize(
    ("verb", "path", "body"),
    [
        pytest.param(
            "POST",
            "pods",
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
            id="create-pod",
        ),
        pytest.param(
            "POST",
            "mpijobs",
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "metadata": {"name": "m"},
                "spec": {"mpiReplicaSpecs": {}},
            },
            id="create-mpijob",
        ),
        pytest.param("DELETE", "node", None, id="delete-node"),
        pytest.param("GET", "secrets", None, id="list-secrets"),
        pytest.param("PUT", "node", {"metadata": {"name": "any"}}, id="update-node"),
    ],
)
async def test_the_controller_identity_is_refused(
    cluster: LocalCluster, admin: KubeClient, namespace: str, verb: str, path: str, body: dict | None
) -> None:
    await install_rbac(admin, namespace)
    sa = await identities.service_account(cluster.plane, namespace, "signal-controller", create=False)
    target = {
        "pods": resource_path("v1", "pods", namespace),
        "mpijobs": resource_path("kubeflow.org/v2beta1", "mpijobs", namespace),
        "node": resource_path("v1", "nodes", name="any"),
        "secrets": resource_path("v1", "secrets", namespace),
    }[path]
    async with sa.client() as kube:
        # The same identity can do what it needs: list Nodes, read Pods.
        await kube.get(resource_path("v1", "nodes"))
        await kube.get(resource_path("v1", "pods", namespace))
        with pytest.raises(ApiError) as caught:
            await kube.request(verb, target, body=body)
    assert caught.value.status == 403


async def test_a_deposed_leader_cannot_complete_an_admission(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    await install_rbac(admin, namespace)
    sa = await identities.service_account(cluster.plane, namespace, "signal-controller", create=False)
    config = sa.kubeconfig(tmp_path / "kubeconfig", namespace)
    old_kube = await Kube.connect(kubeconfig=str(config), field_manager="signal-controller")
    new_kube = await Kube.connect(kubeconfig=str(config), field_manager="signal-controller")
    try:
        old, new = Context(old_kube, namespace, "old-leader"), Context(new_kube, namespace, "new-leader")
        await old.take_fence()
        read_by_old = await old.read_ledger()
        await new.take_fence()
        assert new.fence == old.fence + 1
        with pytest.raises(NotLeader):
            await old.read_ledger()
        with pytest.raises(Conflict):
            await old.write_ledger(read_by_old.with_group("stale-run", Group("p", ("n1",))))
        ledger = await new.read_ledger()
        assert "stale-run" not in ledger.groups
        await new.write_ledger(ledger.with_group("fresh-run", Group("p", ("n1",))))
        assert set((await new.read_ledger()).groups) == {"fresh-run"}
    finally:
        await old_kube.close()
        await new_kube.close()
