"""The full path (issue 5, acceptance 1 and 5): request -> admission -> Workflow -> adapter
steps (two Pod checks) -> evidence -> verdict -> projection -> release, with the real controller
and adapter as their ServiceAccounts and the Workflow executed on the local control plane's
simulated Nodes. The same path with an MPIJob check runs on real nodes
(tests/integration/test_runs_on_real_nodes.py): MPIJobs run only there."""

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localcluster.cluster import LocalCluster
from localcluster.controlplane import free_port
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from shared.acceptance import validate_check
from shared.digests import bundle_digest
from tests.controller_support import ControllerProcess, World, eventually, install_rbac, profile_body, reserved_by
from tests.realnode_support import install_workflow_template
from tests.run_builders import stored_run_evidence

API = keys.API_VERSION
SCRIPTS = {
    "inventory.sh": '#!/bin/sh\necho "gpus on $SIGNAL_NODE_NAME"\nprintf \'{"gpus": 8}\' > "$SIGNAL_MEASUREMENTS_FILE"\n',
    "nccl.sh": '#!/bin/sh\necho "rank $SIGNAL_RANK of $SIGNAL_WORLD_SIZE"\n',
    "flaky.sh": "#!/bin/sh\nif [ \"$SIGNAL_PARTICIPANT_INDEX\" = 1 ]; then echo 'XID 79' >&2; exit 1; fi\n",
    # Exit 3: "my evidence is insufficient" (docs/reference.md), e.g. NCCL debug output switched off.
    "unsure.sh": "#!/bin/sh\necho 'no NCCL debug lines: cannot tell the transport' >&2\nexit 3\n",
}


@pytest.fixture
async def world(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[World]:
    w = World(cluster, admin, namespace)
    await w.setup(scripts=SCRIPTS)
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    await install_workflow_template(admin, namespace)
    yield w
    await w.cleanup()
    for name in w.node_names(2):
        await cluster.remove_node(name)


def _checks(second_script: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "inventory",
            "scriptKey": second_script,
            "backend": "Pod",
            "gpuCount": 1,
            "backendActiveDeadline": "60s",
        },
        {
            "name": "nccl",
            "scriptKey": "nccl.sh",
            "backend": "Pod",
            "gpuCount": 1,
            "backendActiveDeadline": "90s",
        },
    ]


async def _run_to_the_end(world: World, tmp_path: Path, script: str) -> tuple[Obj, list[str], ControllerProcess]:
    profile = f"{world.namespace}-e2e"
    names = world.node_names(2)
    await world.add_nodes(names, requested_for=profile)
    body = profile_body(profile, world.namespace, 2, digest=bundle_digest(SCRIPTS, {}), checks=_checks(script))
    await world.add_profile(body)
    controller = ControllerProcess(
        world.cluster,
        world.namespace,
        tmp_path,
        resync=2.0,
        workflow_instance_id=world.cluster.workflow_instance_id,
        metrics_port=free_port(),
    )
    await controller.start()

    async def finished() -> Obj | None:
        runs = await world.runs()
        done = [r for r in runs if (r.get("status") or {}).get("phase") in {"Succeeded", "Failed", "Inconclusive"}]
        return done[0] if done else None

    run = await eventually(finished, timeout=240, interval=1.0, what=f"a finished Run\n{controller.logs()}")
    return run, names, controller


async def _verify(admin: KubeClient, run: Obj) -> dict[str, Any]:
    """The Run's evidence, each check's read from the ConfigMap it names (by digest)."""
    return await stored_run_evidence(admin, run)


async def test_full_path_succeeds_projects_and_releases(world: World, admin: KubeClient, tmp_path: Path) -> None:
    run, names, controller = await _run_to_the_end(world, tmp_path, "inventory.sh")
    try:
        assert run["status"]["phase"] == "Succeeded", (run["status"], controller.logs())
        assert run["status"]["checkVerdicts"] == [
            {"name": "inventory", "verdict": "Pass"},
            {"name": "nccl", "verdict": "Pass"},
        ]
        document = await _verify(admin, run)
        for check in document["checks"]:
            verdict, problem, _ = validate_check(run, check["index"], check["evidence"])
            assert (verdict.value, problem) == ("Pass", None)
        second = document["checks"][1]["evidence"]["results"]["participants"]
        assert [(p["index"], p["verdict"]) for p in second] == [(0, "Pass"), (1, "Pass")]

        async def released() -> list[Obj] | None:
            nodes = await world.nodes(names)
            return nodes if all(reserved_by(n) is None for n in nodes) else None

        nodes = await eventually(released, timeout=30, what="automatic release")
        for node in nodes:
            assert node["metadata"]["labels"][keys.certified_label(run["spec"]["profile"]["name"])] == "Pass"
            assert not [t for t in node["spec"].get("taints") or [] if t["key"] == keys.RESERVED_TAINT_KEY]
        pods = await admin.get(resource_path("v1", "pods", world.namespace), labelSelector=keys.RUN_UID_LABEL)
        assert [p for p in pods["items"] if p["metadata"]["labels"].get(keys.COMPONENT_LABEL) == "backend"] == []
        # Events on the Run and on each Node; metrics on /metrics.
        # (Events about a cluster-scoped Node can only live in `default`.)
        events = (await admin.get(resource_path("v1", "events", world.namespace)))["items"]
        events += (await admin.get(resource_path("v1", "events", "default")))["items"]
        reasons = {(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"]) for e in events}
        assert (keys.RUN_KIND, run["metadata"]["name"], "RunRunning") in reasons
        assert (keys.RUN_KIND, run["metadata"]["name"], "RunSucceeded") in reasons
        assert {("Node", n, "CertificationPass") for n in names} <= reasons
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://127.0.0.1:{controller.metrics_port}/metrics")).text
        assert 'signal_runs{phase="Succeeded"} 1.0' in text
        assert 'signal_runs_finished_total{phase="Succeeded"} 1.0' in text
        assert "signal_admission_seconds_count 1.0" in text
    finally:
        controller.stop()


async def test_failed_run_stays_cordoned_until_release(world: World, admin: KubeClient, tmp_path: Path) -> None:
    run, names, controller = await _run_to_the_end(world, tmp_path, "flaky.sh")
    try:
        assert run["status"]["phase"] == "Failed", (run["status"], controller.logs())
        assert run["status"]["checkVerdicts"][0] == {"name": "inventory", "verdict": "Fail"}
        profile = run["spec"]["profile"]["name"]
        nodes = await world.nodes(names)
        labels = {n["metadata"]["name"]: n["metadata"]["labels"].get(keys.certified_label(profile)) for n in nodes}
        assert labels == {names[0]: "Inconclusive", names[1]: "Fail"}
        assert all(reserved_by(n) == run["metadata"]["uid"] for n in nodes)
        # The operator cordons one Node, then releases the Run: Signal's cordon goes, theirs stays.
        await admin.merge_patch(resource_path("v1", "nodes", name=names[1]), {"spec": {"unschedulable": True}})
        path = resource_path(API, keys.RUN_PLURAL, world.namespace, run["metadata"]["name"])
        await admin.merge_patch(path, {"spec": {"release": True}})

        async def released() -> list[Obj] | None:
            current = await world.nodes(names)
            return current if all(reserved_by(n) is None for n in current) else None

        freed = await eventually(released, timeout=30, what="release")
        for node in freed:
            assert not [t for t in node["spec"].get("taints") or [] if t["key"] == keys.RESERVED_TAINT_KEY]
        assert freed[1]["spec"].get("unschedulable") is True
        assert not freed[0]["spec"].get("unschedulable")
    finally:
        controller.stop()


async def test_a_script_that_exits_3_is_inconclusive_never_failed(
    world: World, admin: KubeClient, tmp_path: Path
) -> None:
    """Exit 3 through the whole path (issue 16 part 2): the runner reports it, the evidence
    records Inconclusive, the Run is Inconclusive (not Failed) and no Node is projected Fail."""
    run, names, controller = await _run_to_the_end(world, tmp_path, "unsure.sh")
    try:
        assert run["status"]["phase"] == "Inconclusive", (run["status"], controller.logs())
        assert run["status"]["checkVerdicts"][0] == {"name": "inventory", "verdict": "Inconclusive"}
        document = await _verify(admin, run)
        first = document["checks"][0]
        verdict, _problem, _ = validate_check(run, first["index"], first["evidence"])
        assert verdict.value == "Inconclusive"
        participants = first["evidence"]["results"]["participants"]
        assert len(participants) == 2
        assert all("ScriptInconclusive: the script exited 3" in json.dumps(p) for p in participants), participants
        profile = run["spec"]["profile"]["name"]

        async def projected() -> dict[str, str] | None:
            nodes = await world.nodes(names)
            labels = {n["metadata"]["name"]: n["metadata"]["labels"].get(keys.certified_label(profile)) for n in nodes}
            return labels if all(labels.values()) else None

        labels = await eventually(projected, timeout=30, what="the projection")
        assert set(labels.values()) == {"Inconclusive"}, labels
    finally:
        controller.stop()
