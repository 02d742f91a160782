"""Issue 13, acceptance 1: one bad object cannot stop the controller. A corpus of bad
objects is created while two good Runs are in flight (real controller, real Argo, real
adapter): the controller never exits, the good Runs finish with the right verdicts
(Succeeded and Failed), and each bad object ends with a clear condition or Event, or (for
Nodes and orphans) is repaired.

Also, alone: a Run whose Workflow name is taken by a Workflow the Run does not own never
adopts it (it ends Inconclusive, WorkflowNotOwned, and the stranger's Workflow is left
alone)."""

import base64
import gzip
import uuid
from pathlib import Path
from typing import Any

import pytest

from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from shared.acceptance import RUN_EVIDENCE_SCHEMA
from shared.digests import bundle_digest
from shared.evidence import CHECK_EVIDENCE_SCHEMA, DIGEST_ANNOTATION, SCHEMA_ANNOTATION, encode
from tests import evidence_builders as eb
from tests.controller_support import ControllerProcess, World, eventually, install_rbac, profile_body, reserved_by
from tests.integration.test_end_to_end import SCRIPTS, _checks, install_workflow_template
from tests.run_builders import run_body

API = keys.API_VERSION
WORKFLOWS = "argoproj.io/v1alpha1"
pytestmark = pytest.mark.timeout(900)


async def crafted_run(admin: KubeClient, namespace: str, nodes: list[Obj], *, workflow: bool = True) -> Obj:
    """A Running Run as if admitted earlier; its Workflow (when ``workflow``) is already gone."""
    body = run_body(namespace, nodes, "elsewhere")
    name = body["metadata"]["name"]
    await admin.create(resource_path(API, keys.RUN_PLURAL, namespace), body)
    status: dict[str, Any] = {"phase": "Running", "startTime": "2026-11-30T00:00:00Z"}
    if workflow:
        status["workflow"] = {"name": name, "uid": str(uuid.uuid4())}
    return await admin.merge_patch(resource_path(API, keys.RUN_PLURAL, namespace, name, "status"), {"status": status})


def evidence_config_map(run: Obj, payload: bytes) -> Obj:
    """``<run>-evidence`` as the controller would store it (owned, labelled, immutable), with
    ``payload`` as its gzip'd document."""
    meta = run["metadata"]
    return {
        "metadata": {
            "name": f"{meta['name']}-evidence",
            "labels": {
                keys.RUN_NAME_LABEL: meta["name"],
                keys.RUN_UID_LABEL: meta["uid"],
                keys.COMPONENT_LABEL: "evidence",
            },
            "annotations": {DIGEST_ANNOTATION: "sha256:" + "0" * 64, SCHEMA_ANNOTATION: RUN_EVIDENCE_SCHEMA},
            "ownerReferences": [
                {"apiVersion": API, "kind": keys.RUN_KIND, "name": meta["name"], "uid": meta["uid"], "controller": True}
            ],
        },
        "immutable": True,
        "binaryData": {"evidence.json.gz": base64.b64encode(payload).decode()},
    }


def foreign_workflow(name: str) -> Obj:
    """A Workflow someone else made, under the name Signal would give a Run's."""
    return {
        "apiVersion": WORKFLOWS,
        "kind": "Workflow",
        "metadata": {"name": name},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "x"}}]},
    }


async def run_status(admin: KubeClient, namespace: str, name: str) -> Obj:
    return (await admin.get(resource_path(API, keys.RUN_PLURAL, namespace, name))).get("status") or {}


async def warning_reasons(admin: KubeClient, namespace: str, name: str) -> set[str]:
    events = (await admin.get(resource_path("v1", "events", namespace)))["items"]
    return {e["reason"] for e in events if e["involvedObject"]["name"] == name and e["type"] == "Warning"}


async def test_a_workflow_the_run_does_not_own_is_never_adopted(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    names = world.node_names(1, "wf")
    await world.add_nodes(names, requested_for=None)
    run = await crafted_run(admin, namespace, await world.nodes(names), workflow=False)
    name = run["metadata"]["name"]
    stranger = await admin.create(resource_path(WORKFLOWS, "workflows", namespace), foreign_workflow(name))
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    try:

        async def ended() -> Obj | None:
            status = await run_status(admin, namespace, name)
            return status if status.get("phase") in {"Inconclusive", "Failed", "Succeeded"} else None

        status = await eventually(ended, timeout=60, what=f"the Run ended\n{controller.logs()}")
        assert (status.get("workflow") or {}).get("uid") != stranger["metadata"]["uid"], "a foreign Workflow adopted"
        assert status["phase"] == "Inconclusive", status
        assert status["reason"] == "WorkflowNotOwned", status
        left = await admin.get(resource_path(WORKFLOWS, "workflows", namespace, name))
        assert left["metadata"]["uid"] == stranger["metadata"]["uid"], "the stranger's Workflow was touched"
        assert "WorkflowNotOwned" in await warning_reasons(admin, namespace, name)
        assert controller.process is not None
        assert controller.process.poll() is None
    finally:
        controller.stop()


async def test_bad_objects_do_not_stop_the_good_runs(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup(scripts=SCRIPTS)
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    await install_workflow_template(admin, namespace)
    good = {f"{namespace}-pass": "inventory.sh", f"{namespace}-fail": "flaky.sh"}
    digest = bundle_digest(SCRIPTS, {})
    good_nodes: dict[str, list[str]] = {}
    for i, (profile, script) in enumerate(good.items()):
        good_nodes[profile] = world.node_names(2, f"g{i}-")
        await world.add_nodes(good_nodes[profile], requested_for=profile)
        await world.add_profile(profile_body(profile, namespace, 2, digest=digest, checks=_checks(script)))
    controller = ControllerProcess(
        cluster, namespace, tmp_path, resync=2.0, workflow_instance_id=cluster.workflow_instance_id
    )
    await controller.start()
    try:

        async def both_running() -> list[Obj] | None:
            runs = [r for r in await world.runs() if r["spec"]["profile"]["name"] in good]
            running = [r for r in runs if (r.get("status") or {}).get("phase") == "Running"]
            return running if len(running) == 2 else None

        await eventually(both_running, timeout=120, what=f"two good Runs in flight\n{controller.logs()}")
        # Runs that look admitted earlier cannot be made while a controller watches (it would see
        # each one Pending, between its create and its status patch, and roll it back as a
        # half-admission): they are made while it is stopped, the good Runs still in flight.
        controller.stop()
        bad = await make_runs(cluster, world, admin, namespace)
        await controller.start()
        bad |= await make_corpus(cluster, world, admin, namespace)
        assert len(bad) >= 10

        async def good_finished() -> dict[str, str] | None:
            runs = [r for r in await world.runs() if r["spec"]["profile"]["name"] in good]
            phases = {r["spec"]["profile"]["name"]: (r.get("status") or {}).get("phase") for r in runs}
            return phases if all(p in {"Succeeded", "Failed", "Inconclusive"} for p in phases.values()) else None

        phases = await eventually(
            good_finished, timeout=400, interval=1.0, what=f"the good Runs finished\n{controller.logs()}"
        )
        assert phases == {f"{namespace}-pass": "Succeeded", f"{namespace}-fail": "Failed"}, controller.logs()

        for what, check in bad.items():
            await eventually(check, timeout=120, interval=0.5, what=f"{what}\n{controller.logs()}")
        assert controller.process is not None
        assert controller.process.poll() is None, f"the controller exited\n{controller.logs()}"
        assert controller.starts == 2
    finally:
        controller.stop()
        await world.cleanup()


def ended_with_event(admin: KubeClient, namespace: str, run: Obj, phases: set[str], *reasons: str) -> Any:
    name = run["metadata"]["name"]

    async def check() -> bool:
        status = await run_status(admin, namespace, name)
        warned = await warning_reasons(admin, namespace, name)
        return status.get("phase") in phases and bool(warned) and (not reasons or bool(warned & set(reasons)))

    return check


async def make_runs(cluster: LocalCluster, world: World, admin: KubeClient, namespace: str) -> dict[str, Any]:
    """Create the bad Runs; returns, per Run, a check that its end is clear."""
    sa = await identities.service_account(cluster.plane, namespace, "signal-controller", create=False)
    checks: dict[str, Any] = {}
    names = world.node_names(6, "bad-")
    await world.add_nodes(names, requested_for=None)
    nodes = await world.nodes(names)

    # 1-3: the Run's own evidence ConfigMap is unreadable, foreign, or of the wrong shape.
    async with sa.client() as kube:
        unreadable = await crafted_run(admin, namespace, nodes[0:1])
        await kube.create(
            resource_path("v1", "configmaps", namespace), evidence_config_map(unreadable, b"\x1f\x8bnot gzip")
        )
        checks["unreadable evidence"] = ended_with_event(admin, namespace, unreadable, {"Inconclusive"})
        foreign = await crafted_run(admin, namespace, nodes[1:2])
        other = {
            "schema": RUN_EVIDENCE_SCHEMA,
            "run": {"name": "other", "uid": str(uuid.uuid4())},
            "phase": "Succeeded",
        }
        await kube.create(resource_path("v1", "configmaps", namespace), evidence_config_map(foreign, encode(other)[2]))
        checks["evidence of another Run"] = ended_with_event(admin, namespace, foreign, {"Inconclusive"})
        shaped = await crafted_run(admin, namespace, nodes[2:3])
        wrong = {"schema": RUN_EVIDENCE_SCHEMA, "run": "not an object", "phase": 7, "nodes": []}
        await kube.create(resource_path("v1", "configmaps", namespace), evidence_config_map(shaped, encode(wrong)[2]))
        checks["a document of the wrong shape"] = ended_with_event(admin, namespace, shaped, {"Inconclusive"})
    # 4: a Run whose Workflow name is taken by a Workflow it does not own.
    hijacked = await crafted_run(admin, namespace, nodes[3:4], workflow=False)
    await admin.create(resource_path(WORKFLOWS, "workflows", namespace), foreign_workflow(hijacked["metadata"]["name"]))
    checks["a Workflow owned by someone else"] = ended_with_event(
        admin, namespace, hijacked, {"Inconclusive"}, "WorkflowNotOwned"
    )
    # 5: a Run whose Nodes vanished and whose check evidence is missing.
    ghost = {"metadata": {"name": f"{namespace}-ghost", "uid": str(uuid.uuid4())}}
    vanished = await crafted_run(admin, namespace, [ghost])
    checks["a Run over vanished Nodes"] = ended_with_event(admin, namespace, vanished, {"Inconclusive"})
    # 6: a check evidence ConfigMap that is plain garbage (acceptance's own fail-closed path).
    garbage = await crafted_run(admin, namespace, nodes[4:5])
    with_raw = eb.config_map(
        f"{garbage['metadata']['name']}-c0-evidence", None, raw=gzip.compress(b"[1, 2"), owner=garbage
    )
    with_raw["metadata"]["labels"] = {
        keys.RUN_NAME_LABEL: garbage["metadata"]["name"],
        keys.RUN_UID_LABEL: garbage["metadata"]["uid"],
        keys.COMPONENT_LABEL: "evidence",
        keys.CHECK_LABEL: "check-0",
    }
    with_raw["metadata"]["annotations"] = {
        DIGEST_ANNOTATION: "sha256:" + "0" * 64,
        SCHEMA_ANNOTATION: CHECK_EVIDENCE_SCHEMA,
    }
    adapter = await identities.service_account(cluster.plane, namespace, "signal-adapter", create=False)
    async with adapter.client() as kube:  # only the adapter may write a check's evidence
        await kube.create(resource_path("v1", "configmaps", namespace), with_raw)
    checks["malformed check evidence"] = ended_with_event(admin, namespace, garbage, {"Inconclusive"})
    return checks


async def make_corpus(cluster: LocalCluster, world: World, admin: KubeClient, namespace: str) -> dict[str, Any]:
    """Create the other bad objects, with the controller running; returns, per object, a
    check that its end is clear."""
    checks: dict[str, Any] = {}
    names = world.node_names(6, "bad-")
    # 7-9: profiles whose source vanishes, is mutable, or does not match its digest.
    for case, source in (("vanished", "gone"), ("mutable", "mutable"), ("mismatch", "other")):
        profile = f"{namespace}-{case}"
        cm: Obj = {"metadata": {"name": source}, "data": {"x.sh": "exit 0"}}
        if case != "mutable":
            cm["immutable"] = True
        await admin.create(resource_path("v1", "configmaps", namespace), cm)
        body = profile_body(profile, namespace, 1, digest=digest_of_source(case))
        body["spec"]["source"]["name"] = source
        await world.add_profile(body)
        if case == "vanished":
            await admin.delete(resource_path("v1", "configmaps", namespace, source))
        checks[f"a profile whose source is {case}"] = profile_not_ready(world, profile)
    # 10: a Node reserved by a Run that does not exist, with a garbage reservation annotation.
    squatted = names[5]
    await admin.merge_patch(
        resource_path("v1", "nodes", name=squatted),
        {
            "metadata": {
                "labels": {keys.RESERVED_BY_LABEL: str(uuid.uuid4())},
                "annotations": {
                    keys.RESERVATION_ANNOTATION: "{not json",
                    keys.ATTEMPT_ANNOTATION: "::::",
                    keys.certified_label("x"): "[[[",
                },
            }
        },
    )

    async def released() -> bool:
        return reserved_by((await world.nodes([squatted]))[0]) is None

    checks["a Node with garbage annotations reserved by no Run"] = released
    # 11: a Signal-labelled Workflow whose Run does not exist.
    orphan_name = f"orphan-{uuid.uuid4().hex[:6]}"
    orphan = foreign_workflow(orphan_name)
    orphan["metadata"]["labels"] = {keys.RUN_UID_LABEL: str(uuid.uuid4()), keys.RUN_NAME_LABEL: "no-such-run"}
    await admin.create(resource_path(WORKFLOWS, "workflows", namespace), orphan)

    async def orphan_deleted() -> bool:
        try:
            found = await admin.get(resource_path(WORKFLOWS, "workflows", namespace, orphan_name))
        except ApiError as exc:
            return exc.status == 404
        return bool(found["metadata"].get("deletionTimestamp"))

    checks["an orphaned Workflow"] = orphan_deleted
    # 12: a Node requesting a profile that does not exist.
    await admin.merge_patch(
        resource_path("v1", "nodes", name=names[4]), {"metadata": {"labels": {keys.CERTIFY_LABEL: "no-such-profile"}}}
    )
    return checks


def digest_of_source(case: str) -> str:
    if case == "mismatch":
        return bundle_digest({"y.sh": "exit 1"}, {})
    return bundle_digest({"x.sh": "exit 0"}, {})


def profile_not_ready(world: World, name: str) -> Any:
    async def check() -> bool:
        status = (await world.profile(name)).get("status") or {}
        ready = [c for c in status.get("conditions") or [] if c["type"] == "Ready"]
        return bool(ready) and ready[0]["status"] == "False" and bool(ready[0]["reason"])

    return check
