"""The ``signal-scripts`` admission policy on the real API server (issue 42 M-A): a Run's script
snapshot is created only by ``signal-controller`` (or a cluster admin) and only in the shape the
controller writes; third parties with ConfigMap rights in the namespace (the Kubeflow MPI
operator's cluster-wide rights, a namespace editor) and the adapter can neither pre-create a
snapshot name, nor plant a look-alike, nor change or delete a snapshot."""

import copy
import uuid
from pathlib import Path

import pytest

from controller.rules.manifests import snapshot_manifest
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj
from shared import keys, policies
from tests.adapter_support import AdapterWorld, check
from tests.attack_support import attackers, attempt, configmaps, denied_by, dry_run
from tests.controller_support import install_rbac

pytestmark = pytest.mark.asyncio(loop_scope="session")


def snapshot_of(run: Obj, nonce: str) -> Obj:
    """The snapshot the controller would make for ``run`` under a fresh name."""
    fresh = copy.deepcopy(run)
    fresh["spec"]["source"]["snapshotConfigMap"] = f"{run['metadata']['name']}-scripts-{nonce}"
    return snapshot_manifest(fresh, {"data": {"ok.sh": "#!/bin/sh\nexit 0\n"}})


async def test_only_the_controller_writes_a_runs_snapshot(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = AdapterWorld(cluster, admin, namespace, tmp_path)
    try:
        await install_rbac(admin, namespace)  # the controller's, for its own snapshot below
        # And the policies: install_policies returns once the signal-scripts policy refuses a
        # probe (CI once saw every write below admitted: the policy was not yet in force).
        run = await world.setup(1, {"ok.sh": "#!/bin/sh\nexit 0\n"}, [check("ok", "ok.sh")])
        existing = await world.config_map(run["spec"]["source"]["snapshotConfigMap"])
        genuine = snapshot_of(run, uuid.uuid4().hex[:8])
        # What a squatter can send (blockOwnerDeletion needs rights on the Run's finalizers).
        copied = copy.deepcopy(genuine)
        del copied["metadata"]["ownerReferences"][0]["blockOwnerDeletion"]
        look_alike = {"metadata": {"name": f"{run['metadata']['name']}-scripts-0badc0de"}, "data": {"ok.sh": "evil"}}
        labelled = {
            "metadata": {"name": f"plain-{uuid.uuid4().hex[:6]}", "labels": {keys.COMPONENT_LABEL: "scripts"}},
            "data": {},
        }
        adapter = (await identities.service_account(cluster.plane, namespace, "signal-adapter", create=False)).client()
        admitted, other = [], []
        try:
            async with attackers(cluster, admin, namespace) as clients:
                for who, client in {**clients, "adapter": adapter}.items():
                    for what, body in {"genuine": copied, "look-alike": look_alike, "labelled": labelled}.items():
                        error = await attempt(dry_run(client, configmaps(namespace), body))
                        if error is None:
                            admitted.append(f"{who} created {what}")
                        elif not denied_by(error, policies.SCRIPTS_POLICY):
                            other.append(f"{who} {what}: {error}")
                    path = configmaps(namespace, existing["metadata"]["name"])
                    relabel = {"metadata": {"labels": {"x": "y"}, "ownerReferences": None}}
                    for verb, error in (
                        ("patch", await attempt(client.merge_patch(path, relabel))),
                        ("delete", await attempt(client.delete(path))),
                    ):
                        if error is None:
                            admitted.append(f"{who} could {verb} the snapshot")
                        elif not denied_by(error, policies.SCRIPTS_POLICY) and error.status != 403:
                            other.append(f"{who} {verb}: {error}")
        finally:
            await adapter.close()
        assert admitted == [], admitted
        assert other == [], other
        # The controller makes exactly the shape the policy admits, and nothing looser.
        controller = (
            await identities.service_account(cluster.plane, namespace, "signal-controller", create=False)
        ).client()
        try:
            assert await attempt(dry_run(controller, configmaps(namespace), genuine)) is None
            mutable = copy.deepcopy(genuine)
            mutable["immutable"] = False
            error = await attempt(dry_run(controller, configmaps(namespace), mutable))
            assert error is not None
            assert denied_by(error, policies.SCRIPTS_POLICY), error
            unowned = copy.deepcopy(genuine)
            unowned["metadata"]["ownerReferences"] = []
            error = await attempt(dry_run(controller, configmaps(namespace), unowned))
            assert error is not None
            assert denied_by(error, policies.SCRIPTS_POLICY), error
        finally:
            await controller.close()
        assert (await world.config_map(existing["metadata"]["name"]))["metadata"]["uid"] == existing["metadata"]["uid"]
    finally:
        await world.cleanup()
