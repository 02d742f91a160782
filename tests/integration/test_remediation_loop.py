"""Issue 43, items 1 and 3, on the real API server: Signal as the gate between quarantine,
repair and production.

* Adopt a quarantine (the real controller process): a Node a health system cordoned and
  tainted is admitted as it is, stays quarantined for the whole Run, keeps the quarantine when
  the Run ends Failed and is released, and loses exactly it (the cordon and the adopted taint,
  nothing else) only when it is released after a Pass.
* A Fail a remediator can read (the controller's acceptance code): a Node that failed gets the
  profile's ``onFail`` taint and the condition ``failed.projectsignal.dev/<profile>`` True with
  reason ``CertificationFailed``; an Inconclusive Node gets the condition False with reason
  ``CertificationInconclusive`` and no taint."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controller.reconcile.accept import accept, check_evidence_name
from controller.reconcile.state import Context
from controller.rules.runview import run_view
from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from tests import evidence_builders as eb
from tests.controller_support import ControllerProcess, World, eventually, install_rbac, profile_body, reserved_by
from tests.run_builders import run_body, store, workflow_status

API = keys.API_VERSION
QUARANTINE = "health.example.com/quarantine"
OTHER = "other.example.com/maintenance"
FAIL_TAINT = {"key": "projectsignal.dev/failed", "effect": "NoSchedule"}
POD_CHECK = {"name": "inventory", "scriptKey": "inventory.sh", "backend": "Pod", "backendActiveDeadline": "5m"}


def taints(node: Obj) -> set[tuple[str, str]]:
    return {(t["key"], t.get("value", "")) for t in node["spec"].get("taints") or []}


def condition(node: Obj, type_: str) -> tuple[str, str] | None:
    found = next((c for c in node["status"].get("conditions") or [] if c["type"] == type_), None)
    return (found["status"], found["reason"]) if found else None


async def test_an_adopted_quarantine_holds_through_the_run_and_is_lifted_only_after_a_pass(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    profile = f"{namespace}-q"
    names = world.node_names(2, prefix="q")
    await world.add_nodes(names, requested_for=None)
    # The health system's quarantine: both Nodes tainted, the first also cordoned; the second
    # also carries another system's taint that this profile does not adopt but tolerates.
    for name in names:
        path = resource_path("v1", "nodes", name=name)
        node = await admin.get(path)
        extra = [{"key": OTHER, "value": "x", "effect": "PreferNoSchedule"}] if name == names[1] else []
        spec: dict[str, Any] = {"taints": [{"key": QUARANTINE, "value": "xid-79", "effect": "NoSchedule"}, *extra]}
        if name == names[0]:
            spec["unschedulable"] = True
        await admin.merge_patch(
            path, {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}, "spec": spec}
        )
    body = profile_body(profile, namespace, 2, checks=[POD_CHECK])
    body["spec"]["adoptQuarantine"] = {"cordon": True, "taints": [{"key": QUARANTINE, "effect": "NoSchedule"}]}
    body["spec"]["onFail"] = {"taint": FAIL_TAINT}
    await world.add_profile(body)
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0)
    await controller.start()
    try:
        for attempt, ending in enumerate(("Failed", "Succeeded")):
            await world.request(profile, names)
            known = {r["metadata"]["uid"] for r in await world.runs()}

            async def running(known: set[str] = known) -> Obj | None:
                fresh = [r for r in await world.runs() if r["metadata"]["uid"] not in known]
                return fresh[0] if fresh and (fresh[0].get("status") or {}).get("phase") == "Running" else None

            run = await eventually(running, timeout=60, what=f"Run {attempt + 1} Running\n{controller.logs()}")
            # Admitted as it is: the quarantine is still in place, besides Signal's cordon.
            first, second = await world.nodes(names)
            assert first["spec"].get("unschedulable") is True
            assert (QUARANTINE, "xid-79") in taints(first)
            assert (QUARANTINE, "xid-79") in taints(second)
            assert all(reserved_by(n) == run["metadata"]["uid"] for n in (first, second))
            adopted = [p.get("adopted") for p in run["spec"]["participants"]]
            assert adopted == [
                {"cordon": True, "taints": [{"key": QUARANTINE, "value": "xid-79", "effect": "NoSchedule"}]},
                {"cordon": False, "taints": [{"key": QUARANTINE, "value": "xid-79", "effect": "NoSchedule"}]},
            ]
            path = resource_path(API, keys.RUN_PLURAL, namespace, run["metadata"]["name"])
            await admin.merge_patch(f"{path}/status", {"status": {"phase": ending, "reason": "Test"}})
            if ending != "Succeeded":
                await admin.merge_patch(path, {"spec": {"release": True}})

            async def released(path: str = path) -> bool:
                conditions = (await admin.get(path))["status"].get("conditions") or []
                return any(c["type"] == "Released" and c["status"] == "True" for c in conditions)

            await eventually(released, timeout=60, what=f"Run {attempt + 1} Released\n{controller.logs()}")
            first, second = await world.nodes(names)
            assert reserved_by(first) is None
            assert reserved_by(second) is None
            if ending == "Failed":
                # Released after a Fail: the quarantine stays where it was.
                assert first["spec"].get("unschedulable") is True, "a Fail lifted the adopted cordon"
                assert taints(first) == {(QUARANTINE, "xid-79")}, "a Fail lifted the adopted taint"
                assert taints(second) == {(QUARANTINE, "xid-79"), (OTHER, "x")}
            else:
                # Released after a Pass: exactly the adopted quarantine goes.
                assert not first["spec"].get("unschedulable"), "the adopted cordon stayed after a Pass"
                assert taints(first) == set(), taints(first)
                assert taints(second) == {(OTHER, "x")}, "only the adopted taint may be lifted"
    finally:
        controller.stop()
        await world.cleanup()


@pytest.fixture
async def ctx(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[Context]:
    await install_rbac(admin, namespace)
    kube = Kube(identities.admin(cluster.plane).endpoint(), field_manager="signal-controller")
    yield Context(kube, namespace, "remediation-test")
    await kube.close()


async def test_a_fail_leaves_a_taint_and_a_condition_a_remediator_reads_an_inconclusive_does_not(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    world = World(cluster, admin, namespace)
    profile = f"rem-{namespace[2:10]}"
    await world.add_profile(profile_body(profile, namespace, 2))
    names = world.node_names(2, prefix="rem")
    await world.add_nodes(names, requested_for=None)
    try:
        body = run_body(namespace, await world.nodes(names), profile)
        body["spec"]["onFail"] = {"taint": FAIL_TAINT}
        name = body["metadata"]["name"]
        path = resource_path(API, keys.RUN_PLURAL, namespace, name)
        await admin.create(resource_path(API, keys.RUN_PLURAL, namespace), body)
        run = await admin.merge_patch(f"{path}/status", {"status": {"phase": "Running", "startTime": eb.STAMP}})
        document = eb.check_evidence(run, verdicts={0: "Fail", 1: "Inconclusive"})
        await store(admin, namespace, check_evidence_name(name, 0), eb.config_map("x", document))
        for _ in range(2):  # a repeated acceptance (a crash before the Run's status) changes nothing
            await accept(ctx, run_view(run), workflow_status(run, {0: eb.digest_of(document)}), deadline_passed=False)
        failed, inconclusive = await world.nodes(names)
        kind = keys.failed_condition(profile)
        assert condition(failed, kind) == ("True", "CertificationFailed")
        assert [t for t in failed["spec"].get("taints") or [] if t["key"] == FAIL_TAINT["key"]] == [FAIL_TAINT]
        assert condition(inconclusive, kind) == ("False", "CertificationInconclusive")
        assert not inconclusive["spec"].get("taints"), "an Inconclusive is no Fail"
        # The per-profile condition keeps saying the verdict, as before.
        assert condition(failed, keys.certified_label(profile)) == ("False", "Fail")
    finally:
        await world.cleanup()
