"""Issue 12, item 6: a Node cannot certify itself.

The local API server runs the Node authorizer and the NodeRestriction admission plugin, as a
real cluster does, and ``localcluster.controlplane.KUBELET_USER`` is a kubelet-style identity
(``system:node:<name>`` in ``system:nodes``) for the Node ``KUBELET_NODE``. With it, the test
does what a compromised Node can: label and annotate its own Node ``Pass`` with a far-future
completion time and set the Node condition. The controller keeps the authoritative result in
the profile's ``status.certifiedNodes`` (which the kubelet cannot write) and re-asserts every
Node's copy from it on each resync, with a ``ProjectionTampered`` Event and metric; the portal
reads Runs and their evidence only. The ``node-restriction.kubernetes.io/`` label the
controller also writes is one the kubelet cannot set at all.
"""

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from controller.reconcile.reassert import reassert_projections
from controller.reconcile.state import Context
from controller.rules.nodes import node_view
from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.controlplane import KUBELET_NODE, KUBELET_USER, free_port
from localcluster.fleet import SimNode
from localcluster.install import start_portal
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import certified, keys
from tests.controller_support import ControllerProcess, World, eventually, install_rbac, profile_body, stop_process

RESYNC = 2.0
WITHIN = 4 * RESYNC + 10
"""One resync, with room for a loaded machine (the controller's pass over every key)."""
FAR_FUTURE = "2999-01-01T00:00:00Z"


def node_path() -> str:
    return resource_path("v1", "nodes", name=KUBELET_NODE)


def forged_detail(profile: str) -> str:
    return json.dumps(
        {
            "verdict": "Pass",
            "run": "never-ran",
            "namespace": "signal-system",
            "runUID": "00000000-0000-0000-0000-000000000000",
            "runCreated": FAR_FUTURE,
            "completionTime": FAR_FUTURE,
            "evidenceDigest": "sha256:" + "0" * 64,
            "sourceDigest": "sha256:" + "0" * 64,
            "profileGeneration": "1",
        },
        sort_keys=True,
        separators=(",", ":"),
    )


async def forge_pass(kubelet: KubeClient, profile: str) -> None:
    """What a compromised kubelet writes on its own Node (each write must be admitted)."""
    key = keys.certified_label(profile)
    patch = {"metadata": {"labels": {key: "Pass"}, "annotations": {key: forged_detail(profile)}}}
    await kubelet.merge_patch(node_path(), patch)
    condition = {"type": key, "status": "True", "reason": "Pass", "message": "certified, trust me"}
    condition |= {"lastTransitionTime": FAR_FUTURE, "lastHeartbeatTime": FAR_FUTURE}
    await kubelet.request(
        "PATCH",
        f"{node_path()}/status",
        body={"status": {"conditions": [condition]}},
        content_type="application/strategic-merge-patch+json",
    )


def copy_of(node: Obj, profile: str) -> tuple[str | None, str | None, str | None, str | None]:
    """(label, trusted label, annotation verdict, condition status) of ``profile`` on ``node``."""
    key = keys.certified_label(profile)
    labels = node["metadata"].get("labels") or {}
    annotation = (node["metadata"].get("annotations") or {}).get(key)
    verdict = json.loads(annotation).get("verdict") if annotation else None
    condition = next((c for c in node.get("status", {}).get("conditions") or [] if c["type"] == key), None)
    return labels.get(key), labels.get(certified.trusted_label(profile)), verdict, condition and condition["status"]


@pytest.fixture
async def world(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[World]:
    w = World(cluster, admin, namespace)
    await w.setup()
    with contextlib.suppress(ApiError):
        await admin.delete(node_path())  # left by an earlier, interrupted session
    await cluster.add_nodes([SimNode(KUBELET_NODE, labels={"pool": "gpu"})])
    yield w
    await w.cleanup()
    with contextlib.suppress(ApiError):
        await admin.delete(node_path())


async def test_a_node_cannot_certify_itself(
    cluster: LocalCluster, admin: KubeClient, namespace: str, world: World, tmp_path: Path
) -> None:
    profile = f"self-{namespace[2:8]}"
    body = profile_body(profile, namespace, 1)
    digest = body["spec"]["source"]["digest"]
    recently = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    await world.add_profile(body)
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=RESYNC, metrics_port=free_port())
    await install_rbac(admin, namespace, "portal-rbac.yaml")
    portal_port = free_port()
    portal = await start_portal(cluster.plane, namespace, tmp_path, port=portal_port)
    await controller.start()
    try:
        async with identities.user(cluster.plane, KUBELET_USER).client() as kubelet:
            # The kubelet may not set the label schedulers trust, nor write the record.
            with pytest.raises(ApiError) as restricted:
                await kubelet.merge_patch(
                    node_path(), {"metadata": {"labels": {certified.trusted_label(profile): "Pass"}}}
                )
            assert restricted.value.status == 403, restricted.value
            status_path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profile, subresource="status")
            with pytest.raises(ApiError) as unrecorded:
                await kubelet.merge_patch(status_path, {"status": {"certifiedNodes": "forged"}})
            assert unrecorded.value.status == 403, unrecorded.value

            # 1. No result on record: a forged Pass is gone within one resync.
            await forge_pass(kubelet, profile)
            assert copy_of(await admin.get(node_path()), profile)[0] == "Pass"  # the write went through

            async def cleared() -> bool:
                return copy_of(await admin.get(node_path()), profile) == (None, None, None, None)

            await eventually(cleared, timeout=WITHIN, what="the forged Pass to be removed")

            # 2. A Fail on record (as the controller would have written it): flipped to Pass by
            #    the kubelet, it is Fail again within one resync, trusted label included.
            uid = (await admin.get(node_path()))["metadata"]["uid"]
            entry = json.loads(forged_detail(profile)) | {"verdict": "Fail", "nodeUID": uid, "sourceDigest": digest}
            entry |= {"runCreated": recently, "completionTime": recently}  # fresh, of the profile's suite
            await admin.merge_patch(
                status_path, {"status": {"certifiedNodes": certified.encode({KUBELET_NODE: entry})}}
            )

            async def recorded_fail() -> bool:
                return copy_of(await admin.get(node_path()), profile) == ("Fail", "Fail", "Fail", "False")

            await eventually(recorded_fail, timeout=WITHIN, what="the record's Fail to be projected")
            await forge_pass(kubelet, profile)
            assert copy_of(await admin.get(node_path()), profile)[0] == "Pass"
            await eventually(recorded_fail, timeout=WITHIN, what="the forged Pass to be replaced by the record's Fail")
            annotation = (await admin.get(node_path()))["metadata"]["annotations"][keys.certified_label(profile)]
            assert json.loads(annotation)["completionTime"] == recently  # not the far future

        # An Event and a metric say what happened.
        async def tampered_events() -> list[Obj]:
            events = (await admin.get(resource_path("v1", "events", "default")))["items"]
            return [
                e
                for e in events
                if e.get("reason") == "ProjectionTampered" and e["involvedObject"].get("name") == KUBELET_NODE
            ]

        found = await eventually(tampered_events, timeout=WITHIN, what="a ProjectionTampered Event")
        assert found[0]["type"] == "Warning"
        assert profile in found[0]["message"]
        async with httpx.AsyncClient() as http:
            scraped = (await http.get(f"http://127.0.0.1:{controller.metrics_port}/metrics")).text
            line = next(
                ln
                for ln in scraped.splitlines()
                if ln.startswith(f'signal_projection_tampered_total{{profile="{profile}"}}')
            )
            assert float(line.split()[-1]) >= 2

            # The portal never shows the Node Passed: it reads Runs and their evidence only.
            async def portal_sees_the_node() -> Obj | None:
                answer = await http.get(f"http://127.0.0.1:{portal_port}/api/v1/nodes/{KUBELET_NODE}")
                return answer.json() if answer.status_code == 200 else None

            summary = await eventually(portal_sees_the_node, timeout=60, what="the portal's answer for the Node")
            assert "Passed" not in json.dumps(summary), summary
    except BaseException:
        print(controller.logs())
        raise
    finally:
        controller.stop()
        stop_process(portal)


async def test_a_record_cache_behind_the_node_never_takes_its_result_back(
    cluster: LocalCluster, admin: KubeClient, namespace: str, world: World
) -> None:
    """Seen in CI's chaos campaign (seed 1, invariant 3): a Run's result is recorded on the
    profile first and projected onto its Nodes after. A resync whose profile cache had not seen
    the record yet, but whose Node cache had seen the projection, rewrote the Node with the
    older Run's result (the Node's projection went back in time) and called it tampering. The
    re-assertion decides on a fresh read of the record before it writes anything."""
    profile = f"lag-{namespace[2:8]}"
    suite = profile_body(profile, namespace, 1)
    await world.add_profile(suite)
    profile_path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profile)
    uid = (await admin.get(node_path()))["metadata"]["uid"]

    def entry(run: str, verdict: str, created: str) -> certified.Entry:
        base: certified.Entry = json.loads(forged_detail(profile))
        return (
            base
            | {"run": run, "runUID": str(uuid.uuid4()), "verdict": verdict, "nodeUID": uid}
            | {"sourceDigest": suite["spec"]["source"]["digest"]}
            | {
                "runCreated": created,
                "completionTime": created,
            }
        )

    async def record(value: certified.Entry) -> Obj:
        body = {"status": {"certifiedNodes": certified.encode({KUBELET_NODE: value})}}
        return await admin.merge_patch(f"{profile_path}/status", body)

    older, newer = entry("older", "Pass", "2026-11-30T00:00:00Z"), entry("newer", "Fail", "2026-11-30T02:00:00Z")
    stale = await record(older)
    fresh = await record(newer)
    kube = Kube(identities.admin(cluster.plane).endpoint(), field_manager="signal-controller")
    try:
        # Shortly after both Runs, within the profile's freshness window (controller/reconcile/expiry.py).
        ctx = Context(kube, namespace, "reassert-test", clock=lambda: datetime(2026, 11, 30, 3, tzinfo=UTC))

        async def resync(profile_seen: Obj) -> int:
            """One re-assertion pass with these caches: the Node as the API server has it now."""
            ctx.nodes.items = {KUBELET_NODE: node_view(await admin.get(node_path()))}
            ctx.profiles.items = {profile: profile_seen}
            return await reassert_projections(ctx)

        assert await resync(fresh) == 1  # the newer result reaches the Node (as its projection would)
        assert copy_of(await admin.get(node_path()), profile) == ("Fail", "Fail", "Fail", "False")
        assert await resync(stale) == 0  # the cache still holds the older record: nothing to undo
        node = await admin.get(node_path())
        assert copy_of(node, profile) == ("Fail", "Fail", "Fail", "False")
        annotation = json.loads(node["metadata"]["annotations"][keys.certified_label(profile)])
        assert annotation["run"] == "newer"
        await forge_pass(admin, profile)  # a real difference is still corrected from the fresh record
        assert await resync(stale) == 1
        assert copy_of(await admin.get(node_path()), profile) == ("Fail", "Fail", "Fail", "False")
    finally:
        await kube.close()


async def test_a_node_can_neither_request_itself_nor_opt_out_of_recurrence(
    cluster: LocalCluster, admin: KubeClient, namespace: str, world: World, tmp_path: Path
) -> None:
    """Issue 42 M-D. The request label is one NodeRestriction keeps from kubelets, so a Node
    cannot request its own certification (and pick its group); what a kubelet can write on its
    Node (the old request label, a reservation label and annotation naming another namespace,
    a cordon) neither requests it nor keeps recurrence from re-requesting it: only Signal's taint
    and the ledger say a Node is reserved. The stray reservation label is removed, the old
    request label earns a Warning Event."""
    profile = f"rq-{namespace[2:8]}"
    body = profile_body(profile, namespace, 1)
    body["spec"]["recurrence"] = {"interval": "1h"}
    await world.add_profile(body)
    uid = (await admin.get(node_path()))["metadata"]["uid"]
    earlier = "2026-01-01T00:00:00Z"  # long before the interval
    entry = json.loads(forged_detail(profile)) | {"nodeUID": uid, "runCreated": earlier, "completionTime": earlier}
    status_path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profile, subresource="status")
    await admin.merge_patch(status_path, {"status": {"certifiedNodes": certified.encode({KUBELET_NODE: entry})}})
    async with identities.user(cluster.plane, KUBELET_USER).client() as kubelet:
        with pytest.raises(ApiError) as refused:
            await kubelet.merge_patch(node_path(), {"metadata": {"labels": {keys.CERTIFY_LABEL: profile}}})
        assert refused.value.status == 403, refused.value
        detail = {"run": "elsewhere", "namespace": "another-installation", "uid": "uid-x", "index": 0}
        hiding = {
            "metadata": {
                "labels": {keys.RESERVED_BY_LABEL: "uid-x", keys.LEGACY_CERTIFY_LABEL: profile},
                "annotations": {keys.RESERVATION_ANNOTATION: json.dumps(detail)},
            },
            "spec": {"unschedulable": True},
        }
        await kubelet.merge_patch(node_path(), hiding)  # admitted: all of it is the kubelet's to write
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=RESYNC)
    await controller.start()
    try:

        async def re_requested() -> Obj | None:
            node = await admin.get(node_path())
            labels = node["metadata"].get("labels") or {}
            requested = labels.get(keys.CERTIFY_LABEL) == profile
            return node if requested and keys.RESERVED_BY_LABEL not in labels else None

        node = await eventually(re_requested, timeout=WITHIN, what="the Node re-requested, its stray reservation gone")
        assert not any(t.get("key") == keys.RESERVED_TAINT_KEY for t in node["spec"].get("taints") or [])

        async def warned() -> list[Obj]:
            events = (await admin.get(resource_path("v1", "events", "default")))["items"]
            return [
                e
                for e in events
                if e.get("reason") == "LegacyRequestIgnored" and e["involvedObject"].get("name") == KUBELET_NODE
            ]

        found = await eventually(warned, timeout=WITHIN, what="a LegacyRequestIgnored Event")
        assert found[0]["type"] == "Warning"
        assert keys.CERTIFY_LABEL in found[0]["message"]
        # The Node cordoned itself: requested, it is not admitted until the cordon is lifted.
        assert await world.runs() == []
    except BaseException:
        print(controller.logs())
        raise
    finally:
        controller.stop()
