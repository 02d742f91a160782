"""Issue 43, item 4: certification that expires. The labels schedulers select on stop saying
``Pass`` once the result's freshness window has passed, once the profile's suite changes and
once the profile is deleted; the re-assertion keeps them ``Stale`` (controller/reconcile/expiry.py). Run
here through the controller's own passes over its caches, against the real API server."""

import json
from datetime import UTC, datetime, timedelta

from controller.reconcile.accept import accept, check_evidence_name
from controller.reconcile.expiry import expire_orphaned
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
from tests.controller_support import World, profile_body
from tests.run_builders import SCRIPTS, running_run, store, workflow_status

STARTED = "2026-11-30T00:00:00Z"


async def test_a_result_goes_stale_when_old_when_the_suite_changes_and_when_the_profile_is_gone(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    profile = f"exp-{namespace[2:8]}"
    body = profile_body(profile, namespace, 1, digest=bundle_digest(SCRIPTS, {}))  # the suite the Run runs
    body["spec"]["freshness"] = "1h"
    await world.add_profile(body)
    names = world.node_names(1, prefix="exp")
    await world.add_nodes(names, requested_for=None)
    name = names[0]
    node_path = resource_path("v1", "nodes", name=name)
    profile_path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profile)
    kube = Kube(identities.admin(cluster.plane).endpoint(), field_manager="signal-controller")
    ctx = Context(kube, namespace, "expiry-test")

    async def resync() -> Obj:
        """One pass of the re-assertion and the orphan expiry over caches read just now."""
        ctx.nodes.items = {name: node_view(await admin.get(node_path))}
        found = await admin.get(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL))
        ctx.profiles.items = {f"/{p['metadata']['name']}": p for p in found["items"]}
        await reassert_projections(ctx)
        ctx.nodes.items = {name: node_view(await admin.get(node_path))}
        await expire_orphaned(ctx)
        return await admin.get(node_path)

    def shown(node: Obj) -> tuple[str | None, str | None, str | None]:
        labels = node["metadata"].get("labels") or {}
        condition = next(
            (c for c in node["status"].get("conditions") or [] if c["type"] == keys.certified_label(profile)), {}
        )
        return (
            labels.get(keys.certified_label(profile)),
            labels.get(certified.trusted_label(profile)),
            condition.get("reason"),
        )

    async def events_of(reason: str) -> list[Obj]:
        items = (await admin.get(resource_path("v1", "events", "default")))["items"]
        return [e for e in items if e.get("reason") == reason and e["involvedObject"].get("name") == name]

    try:
        # A Run that passed, accepted by the controller's own code: a proven Pass on record.
        run = await running_run(admin, namespace, await world.nodes(names), profile, started=STARTED)
        digests = {}
        for index in range(len(run["spec"]["checks"])):
            document = eb.check_evidence(run, index)
            digests[index] = eb.digest_of(document)
            cm = check_evidence_name(run["metadata"]["name"], index)
            await store(admin, namespace, cm, eb.config_map(cm, document))
        await accept(ctx, run_view(run), workflow_status(run, digests), deadline_passed=False)
        now = datetime.now(UTC)
        assert shown(await resync()) == ("Pass", "Pass", "Pass")
        tampered = len(await events_of("ProjectionTampered"))
        # 1. Two hours later: older than the profile's freshness window (1h).
        ctx.clock = lambda: now + timedelta(hours=2)
        assert shown(await resync()) == ("Stale", "Stale", "Stale")
        expired = await events_of("CertificationExpired")
        assert expired, "no CertificationExpired Event"
        assert "FreshnessExpired" in expired[0]["message"]
        assert len(await events_of("ProjectionTampered")) == tampered, "an expiry is not tampering"
        assert shown(await resync()) == ("Stale", "Stale", "Stale"), "the re-assertion keeps it Stale"
        # 2. Back within the window, then the profile's suite changes.
        ctx.clock = lambda: datetime.now(UTC)
        assert shown(await resync()) == ("Pass", "Pass", "Pass")
        await admin.merge_patch(profile_path, {"spec": {"source": {"digest": "sha256:" + "f" * 64}}})
        assert shown(await resync()) == ("Stale", "Stale", "Stale")
        assert any("SuiteChanged" in e["message"] for e in await events_of("CertificationExpired"))
        # 3. The suite as certified again, then the profile deleted (its record goes with it).
        await admin.merge_patch(profile_path, {"spec": {"source": {"digest": body["spec"]["source"]["digest"]}}})
        assert shown(await resync()) == ("Pass", "Pass", "Pass")
        await admin.delete(profile_path)
        world.profiles.remove(profile)
        node = await resync()
        assert shown(node)[:2] == ("Stale", "Stale"), json.dumps(node["metadata"].get("labels"))
        assert any("ProfileDeleted" in e["message"] for e in await events_of("CertificationExpired"))
    finally:
        await kube.close()
        await world.cleanup()
