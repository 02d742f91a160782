"""Issue 42, H-A: the certified record is bound to evidence. An identity that can write a
profile's ``status.certifiedNodes`` (reproduced on the demo cluster with a Pod running as
``signal-controller``, minted through the MPI operator's rights) rewrote a Node's entry from
Fail to Pass, and the re-assertion then defended the forged Pass on the trusted label. Now a
``Pass`` entry is projected only when the Run evidence it cites proves it
(controller/reconcile/recordproof.py); the forged one is projected Inconclusive, with a Warning Event
``CertifiedRecordUnproven`` and ``signal_certified_record_unproven_total``, and recurrence
takes it as due at once.

On the real API server: the controller's own acceptance and re-assertion code, in-process,
with an administrator's client standing in for the forger."""

import json
from collections.abc import AsyncIterator

import pytest

from controller.reconcile import metrics
from controller.reconcile.accept import accept, check_evidence_name
from controller.reconcile.lifecycle import recur
from controller.reconcile.reassert import reassert_projections
from controller.reconcile.state import Context
from controller.rules.nodes import node_view
from controller.rules.runview import run_view
from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj, resource_path
from shared import certified, keys
from shared.digests import bundle_digest
from tests import evidence_builders as eb
from tests.controller_support import World, install_rbac, profile_body
from tests.run_builders import SCRIPTS, running_run, store, workflow_status

pytestmark = pytest.mark.asyncio(loop_scope="session")
STARTED = "2026-11-30T00:00:00Z"


@pytest.fixture
async def ctx(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[Context]:
    await install_rbac(admin, namespace)
    kube = Kube(identities.admin(cluster.plane).endpoint(), field_manager="signal-controller")
    yield Context(kube, namespace, "record-test")
    await kube.close()


def unproven(profile: str) -> float:
    sample = metrics.REGISTRY.get_sample_value("signal_certified_record_unproven_total", {"profile": profile})
    return sample or 0.0


def verdicts(node: Obj, profile: str) -> tuple[str | None, str | None, str | None]:
    """(label, trusted label, detail verdict) of ``profile`` on ``node``."""
    labels = node["metadata"].get("labels") or {}
    detail = (node["metadata"].get("annotations") or {}).get(keys.certified_label(profile))
    return (
        labels.get(keys.certified_label(profile)),
        labels.get(certified.trusted_label(profile)),
        json.loads(detail)["verdict"] if detail else None,
    )


async def test_a_forged_pass_in_the_record_is_never_projected(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    world = World(cluster, admin, namespace)
    profile = f"rec-{namespace[2:10]}"
    # The profile's suite is the Run's (a changed suite would make every result Stale: issue 43).
    await world.add_profile(profile_body(profile, namespace, 2, digest=bundle_digest(SCRIPTS, {})))
    names = world.node_names(2, prefix="rec")
    await world.add_nodes(names, requested_for=None)
    try:
        nodes = await world.nodes(names)
        run = await running_run(admin, namespace, nodes, profile, started=STARTED)
        # What really happened: the first Node failed the check, the second passed.
        failing = eb.check_evidence(run, verdicts={0: "Fail"})
        await store(admin, namespace, check_evidence_name(run["metadata"]["name"], 0), eb.config_map("x", failing))
        await accept(ctx, run_view(run), workflow_status(run, {0: eb.digest_of(failing)}), deadline_passed=False)
        done = await admin.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, run["metadata"]["name"]))
        assert done["status"]["phase"] == "Failed", done["status"]
        path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profile)
        record = certified.decode((await admin.get(path))["status"]["certifiedNodes"])
        assert {n: e["verdict"] for n, e in record.items()} == {names[0]: "Fail", names[1]: "Pass"}

        # The forger rewrites the failed Node's entry Fail -> Pass, citing the same Run and evidence.
        record[names[0]] = {**record[names[0]], "verdict": "Pass"}
        await admin.merge_patch(f"{path}/status", {"status": {"certifiedNodes": certified.encode(record)}})
        before = unproven(profile)

        async def resync() -> int:
            ctx.nodes.items = {n: node_view(await admin.get(resource_path("v1", "nodes", name=n))) for n in names}
            ctx.profiles.items = {profile: await admin.get(path)}
            return await reassert_projections(ctx)

        await resync()
        forged, honest = await world.nodes(names)
        assert verdicts(forged, profile) == ("Inconclusive", "Inconclusive", "Inconclusive")
        assert verdicts(honest, profile) == ("Pass", "Pass", "Pass")  # proven by its Run's evidence
        assert unproven(profile) == before + 1
        events = (await admin.get(resource_path("v1", "events", "default")))["items"]
        found = [
            e
            for e in events
            if e["reason"] == "CertifiedRecordUnproven" and e["involvedObject"].get("name") == names[0]
        ]
        assert found, [e["reason"] for e in events]
        assert found[0]["type"] == "Warning"
        assert "the Run evidence gives Node" in found[0]["message"]
        assert "Fail, the record says Pass" in found[0]["message"]
        # Later resyncs keep it so, without a new Event or count for the same entry.
        assert await resync() == 0
        assert verdicts((await world.nodes(names))[0], profile)[0] == "Inconclusive"
        assert unproven(profile) == before + 1

        # Recurrence reads the record too: the unproven Pass is due at once, the proven (and
        # fresh) one is not.
        updated = await admin.merge_patch(path, {"spec": {"recurrence": {"interval": "24h"}}})
        ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "test"}
        ready["lastTransitionTime"] = STARTED
        status = {"observedGeneration": updated["metadata"]["generation"], "conditions": [ready]}
        await admin.merge_patch(f"{path}/status", {"status": status})
        await resync()
        await ctx.take_fence()  # recurrence reads the admission ledger as its holder
        await recur(ctx, await admin.get(path))
        forged, honest = await world.nodes(names)
        assert forged["metadata"]["labels"].get(keys.CERTIFY_LABEL) == profile
        assert keys.CERTIFY_LABEL not in honest["metadata"]["labels"]
    finally:
        await world.cleanup()
