"""Recurrence (issue 5, acceptance 6): the controller re-requests only Nodes whose last
result from the profile is older than its interval, and admission never puts more Nodes of
one failure domain under test than the budget allows."""

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from localcluster.cluster import LocalCluster
from localcluster.controlplane import free_port
from localcluster.kube import KubeClient, resource_path
from shared import certified, keys
from tests.controller_support import (
    ControllerProcess,
    World,
    eventually,
    metrics_text,
    profile_body,
    reconciles,
    reserved_by,
)


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_recurrence_requests_only_stale_nodes_within_budget(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    profile = f"{namespace}-r"
    names = world.node_names(6)
    await world.add_nodes(names, requested_for=None)
    now = datetime.now(UTC)
    stale, fresh = names[:4], names[4:]
    body = profile_body(profile, namespace, 2, budget={"topologyKey": keys.ZONE_LABEL, "maxNodesUnderTest": 2})
    body["spec"]["recurrence"] = {"interval": "1h"}
    await world.add_profile(body)
    # Earlier results, as Signal records them: the profile's record (recurrence reads only that).
    # Fail: a recorded Pass counts only with the Run evidence that proves it (issue 42,
    # test_record_bound_to_evidence.py); when a result is due does not depend on its verdict.
    uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in await world.nodes(names)}
    entries = {}
    for name, when in [*((n, now - timedelta(hours=2)) for n in stale), *((n, now) for n in fresh)]:
        entries[name] = {
            "verdict": "Fail",
            "run": "earlier",
            "namespace": namespace,
            "runUID": "earlier",
            "runCreated": _stamp(when),
            "completionTime": _stamp(when),
            "evidenceDigest": "sha256:" + "0" * 64,
            "sourceDigest": body["spec"]["source"]["digest"],
            "profileGeneration": "1",
            "nodeUID": uids[name],
        }
    status = {"status": {"certifiedNodes": certified.encode(entries)}}
    await admin.merge_patch(
        resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profile, subresource="status"), status
    )
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    try:

        async def requested_or_reserved() -> list[str]:
            nodes = await world.nodes(stale)
            hit = [n for n in nodes if reserved_by(n) or keys.CERTIFY_LABEL in n["metadata"].get("labels", {})]
            return [n["metadata"]["name"] for n in hit] if len(hit) == len(stale) else []

        await eventually(requested_or_reserved, timeout=30, what=f"stale Nodes re-requested\n{controller.logs()}")
        most = 0
        until = time.monotonic() + 6
        while time.monotonic() < until:
            nodes = await world.nodes(names)
            most = max(most, sum(1 for n in nodes if reserved_by(n)))
            for node in nodes[4:]:
                labels = node["metadata"].get("labels", {})
                assert keys.CERTIFY_LABEL not in labels, "a fresh Node was re-requested"
                assert reserved_by(node) is None
            await asyncio.sleep(0.3)
        assert most == 2, f"expected one group of 2 under test (budget 2), saw at most {most}"
        runs = await world.runs()
        assert len(runs) == 1
        assert sorted(p["nodeName"] for p in runs[0]["spec"]["participants"]) == sorted(
            n["metadata"]["name"] for n in await world.nodes(stale) if reserved_by(n)
        )
    finally:
        controller.stop()
        await world.cleanup()


async def test_a_profile_that_is_not_ready_requests_no_node(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Recurrence labelled Nodes for a profile that is not Ready (here: its source no longer has
    the digest it pins), which is never to be acted on; a Ready profile beside it goes on."""
    world = World(cluster, admin, namespace)
    await world.setup()
    broken, good = f"{namespace}-broken", f"{namespace}-good"
    names = world.node_names(4)
    await world.add_nodes(names, requested_for=None)
    uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in await world.nodes(names)}
    stale = _stamp(datetime.now(UTC) - timedelta(hours=2))
    bodies = {
        broken: profile_body(broken, namespace, 2, digest="sha256:" + "e" * 64),
        good: profile_body(good, namespace, 2, selector={"matchLabels": {"pool": "gpu"}}),
    }
    for (profile, body), mine in zip(bodies.items(), (names[:2], names[2:]), strict=True):
        body["spec"]["recurrence"] = {"interval": "1h"}
        await world.add_profile(body)
        entries = {
            name: {
                "verdict": "Pass",
                "run": "earlier",
                "namespace": namespace,
                "runUID": "earlier",
                "runCreated": stale,
                "completionTime": stale,
                "evidenceDigest": "sha256:" + "0" * 64,
                "sourceDigest": body["spec"]["source"]["digest"],
                "profileGeneration": "1",
                "nodeUID": uids[name],
            }
            for name in mine
        }
        await admin.merge_patch(
            resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profile, subresource="status"),
            {"status": {"certifiedNodes": certified.encode(entries)}},
        )
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0, metrics_port=free_port())
    await controller.start()
    try:

        async def good_requested() -> bool:
            nodes = await world.nodes(names[2:])
            return all(reserved_by(n) or keys.CERTIFY_LABEL in n["metadata"].get("labels", {}) for n in nodes)

        await eventually(good_requested, timeout=30, what=f"the Ready profile's stale Nodes\n{controller.logs()}")
        ready = next(c for c in (await world.profile(broken))["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "DigestMismatch"), ready
        # Evidence of several passes over both profiles since (resyncs every second), the broken
        # one with its Ready=False cached: two profiles, so six passes are at least three each
        # round of resyncs.
        seen = reconciles(await metrics_text(controller.metrics_port), "Profile")

        async def passed_again() -> bool:
            return reconciles(await metrics_text(controller.metrics_port), "Profile") >= seen + 6

        await eventually(passed_again, timeout=30, what=f"six more profile passes\n{controller.logs()}")
        for node in await world.nodes(names[:2]):
            labels = node["metadata"].get("labels", {})
            assert keys.CERTIFY_LABEL not in labels, f"{node['metadata']['name']} requested for a profile not Ready"
    finally:
        controller.stop()
        await world.cleanup()
