"""The adapter WorkflowTemplate executed by REAL Argo Workflows (v4.0.5 workflow-controller and
argoexec, built from the Go module proxy as local test infrastructure) on the local control
plane: the controller's Workflow (controller.rules.manifests.workflow_manifest), the generated
template from deploy/, the adapter's RBAC from deploy/, the executor's Pods (emissary main
container, wait sidecar) hosted by the process kubelet in private mount namespaces, and the
adapter inside the step Pod using in-cluster config as its ServiceAccount (issue 5)."""

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.rules.manifests import workflow_manifest
from localcluster.argoworkflows import SYSTEM_NODE
from localcluster.binaries import argo_build_dir
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from localcluster.podprocess import MOUNT_NAMESPACES_ANNOTATION
from shared import keys
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from tests.adapter_support import AdapterWorld, check
from tests.conftest import WORKFLOW_INSTANCE
from tests.controller_support import eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")

ARGO = "argoproj.io/v1alpha1"
TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "base" / "adapter-workflowtemplate.yaml"
OUTPUTS = ("verdict", "evidence-config-map", "evidence-digest", "proceed")
PASS = """#!/bin/sh
echo "participant $SIGNAL_PARTICIPANT_INDEX on $SIGNAL_NODE_NAME"
printf '{"ok": true}' > "$SIGNAL_MEASUREMENTS_FILE"
"""
SLOW = """#!/bin/sh
echo "participant $SIGNAL_PARTICIPANT_INDEX sleeping"
sleep 120
"""
FAIL_ON_ONE = """#!/bin/sh
echo "participant $SIGNAL_PARTICIPANT_INDEX on $SIGNAL_NODE_NAME"
if [ "$SIGNAL_PARTICIPANT_INDEX" = "1" ]; then echo "ECC errors found" >&2; exit 1; fi
"""


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[AdapterWorld]:
    if cluster.argo is None:
        pytest.fail("the local cluster runs no Argo workflow-controller")
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    yield w
    await w.cleanup()


async def submit(world: AdapterWorld, suite_deadline: int | None = None) -> Obj:
    """The template from deploy/ and the controller's Workflow for the world's Run (with
    ``suite_deadline``, for a Run with that suiteDeadlineSeconds)."""
    template = yaml.safe_load(TEMPLATE.read_text())
    await world.admin.create(resource_path(ARGO, "workflowtemplates", world.namespace), template)
    run = world.run
    if suite_deadline is not None:
        run = {**run, "spec": {**run["spec"], "suiteDeadlineSeconds": suite_deadline}}
    body = workflow_manifest(run, WORKFLOW_INSTANCE)
    return await world.admin.create(resource_path(ARGO, "workflows", world.namespace), body)


async def running_backend(world: AdapterWorld, count: int, timeout: float = 60.0) -> None:
    """Wait until the adapter's backend Pods (one per participant) are Running."""

    async def running() -> bool:
        return sum(p["status"].get("phase") == "Running" for p in await world.pods()) >= count

    await eventually(
        running, timeout=timeout, interval=0.3, what=f"{count} backend Pods Running", explain=lambda: step_logs(world)
    )


async def finished(world: AdapterWorld, name: str, timeout: float = 180.0) -> Obj:
    path = resource_path(ARGO, "workflows", world.namespace, name)

    async def done() -> Obj | None:
        workflow = await world.admin.get(path)
        return workflow if workflow.get("status", {}).get("phase") in {"Succeeded", "Failed", "Error"} else None

    async def explain() -> str:
        status = (await world.admin.get(path)).get("status")
        return f"{json.dumps(status, indent=1)}\n{await step_logs(world)}"

    found: Obj = await eventually(
        done, timeout=timeout, interval=0.5, what=f"Workflow {name} finished", explain=explain
    )
    return found


async def step_logs(world: AdapterWorld) -> str:
    """The logs of the Workflow's Pods' containers (for failure messages)."""
    assert world.cluster.kubelet is not None
    parts = []
    for pod in (await world.admin.get(resource_path("v1", "pods", world.namespace)))["items"]:
        for container in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
            path = world.cluster.kubelet.log_path(pod, container["name"])
            text = path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"
            parts.append(f"--- {pod['metadata']['name']}/{container['name']} ---\n{text}")
    return "\n".join(parts)


def check_nodes(workflow: Obj) -> list[Obj]:
    """The Workflow's `check` step nodes in check order."""
    nodes = [n for n in workflow["status"]["nodes"].values() if n.get("templateName") == "check"]
    return sorted(nodes, key=lambda n: int(parameters(n, "inputs")["index"]))


def parameters(node: Obj, kind: str) -> dict[str, str]:
    return {p["name"]: p.get("value", "") for p in node.get(kind, {}).get("parameters", [])}


async def assert_evidence(world: AdapterWorld, outputs: dict[str, Any], verdict: str) -> Obj:
    assert outputs["verdict"] == verdict
    evidence = await world.config_map(outputs["evidence-config-map"])
    document, digest = decode_document(evidence, CHECK_EVIDENCE_SCHEMA)
    assert digest == outputs["evidence-digest"]
    assert document["verdict"] == verdict
    return document


async def record_step_pods(world: AdapterWorld, seen: dict[str, tuple[Obj, str]], stop: asyncio.Event) -> None:
    """Until ``stop``: every step Pod seen (last version) and its containers' logs, read while
    the Pod exists (the template's podGC deletes each one as it completes, logs with it)."""
    assert world.cluster.kubelet is not None
    while not stop.is_set():
        for pod in (await world.admin.get(resource_path("v1", "pods", world.namespace)))["items"]:
            if not pod["metadata"].get("labels", {}).get("workflows.argoproj.io/workflow"):
                continue
            texts = []
            for container in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
                path = world.cluster.kubelet.log_path(pod, container["name"])
                texts.append(path.read_text(errors="replace") if path.exists() else "")
            uid = pod["metadata"]["uid"]
            seen[uid] = (pod, "\n".join(texts) or (seen[uid][1] if uid in seen else ""))
        with contextlib.suppress(TimeoutError):  # sample again shortly, or end as soon as told
            await asyncio.wait_for(stop.wait(), 0.1)


async def test_argo_runs_every_check_in_order_as_the_adapter(world: AdapterWorld) -> None:
    checks = [check("first", "a.sh"), check("second", "b.sh")]
    await world.setup(2, {"a.sh": PASS, "b.sh": PASS}, checks)
    seen: dict[str, tuple[Obj, str]] = {}
    stop = asyncio.Event()
    recorder = asyncio.create_task(record_step_pods(world, seen, stop))
    created = await submit(world)
    try:
        workflow = await finished(world, created["metadata"]["name"])
    finally:
        stop.set()
        await recorder
    assert workflow["status"]["phase"] == "Succeeded", (workflow["status"], await step_logs(world))

    steps = check_nodes(workflow)
    assert [parameters(n, "inputs")["index"] for n in steps] == ["0", "1"]
    assert [json.loads(parameters(n, "inputs")["check"])["name"] for n in steps] == ["first", "second"]
    assert [n["displayName"] for n in steps] == ["check", "check"]
    assert all(n["phase"] == "Succeeded" for n in steps)
    assert steps[0]["finishedAt"] <= steps[1]["startedAt"], "checks must run strictly in order"
    for index, node in enumerate(steps):
        outputs = parameters(node, "outputs")
        assert set(OUTPUTS) <= set(outputs), outputs
        assert outputs["proceed"] == "true"
        document = await assert_evidence(world, outputs, "Pass")
        assert document["check"]["index"] == index if "check" in document else True

    # The step Pods ran as the adapter's ServiceAccount (its RBAC from deploy/), on the system
    # Node (the one an admin marked trusted: issue 42 M-C), and are gone once they completed
    # (the template's podGC: the adapter's token lives no longer than its step).
    assert len(seen) == 2, [p["metadata"]["name"] for p, _ in seen.values()]
    for pod, _ in seen.values():
        assert pod["spec"]["serviceAccountName"] == "signal-adapter"
        assert pod["spec"]["nodeName"] == SYSTEM_NODE
        assert pod["spec"]["nodeSelector"][keys.TRUSTED_NODE_LABEL] == "true"
        assert [c["name"] for c in pod["spec"]["containers"]] == ["wait", "main"]

    async def collected() -> bool:
        pods = (await world.admin.get(resource_path("v1", "pods", world.namespace)))["items"]
        return not [p for p in pods if p["metadata"]["uid"] in seen]

    await eventually(collected, timeout=60, what="Argo's podGC to delete the completed step Pods")
    # The executor needed nothing beyond the adapter's Role: no request of its was refused.
    logs = "\n".join(text for _, text in seen.values())
    assert "forbidden" not in logs.lower(), logs


async def test_a_failing_check_stops_the_suite(world: AdapterWorld) -> None:
    checks = [check("first", "fail.sh"), check("second", "b.sh")]
    await world.setup(2, {"fail.sh": FAIL_ON_ONE, "b.sh": PASS}, checks)
    created = await submit(world)
    workflow = await finished(world, created["metadata"]["name"])
    status = workflow["status"]

    steps = check_nodes(workflow)
    assert [parameters(n, "inputs")["index"] for n in steps] == ["0"], "check 1 must never run"
    outputs = parameters(steps[0], "outputs")
    assert outputs["proceed"] == "false"
    document = await assert_evidence(world, outputs, "Fail")
    verdicts = {p["index"]: p["verdict"] for p in document["results"]["participants"]}
    assert verdicts == {0: "Pass", 1: "Fail"}
    # The verdict is data, not a step failure: the adapter exits 0, the step Succeeds and the
    # `next` step is Skipped by its `when`, so Argo ends the Workflow Succeeded.
    assert steps[0]["phase"] == "Succeeded"
    skipped = [n for n in status["nodes"].values() if n.get("displayName") == "next"]
    assert [n["phase"] for n in skipped] == ["Skipped"], status["nodes"]
    assert status["phase"] == "Succeeded", status


def argo_lint(argo: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    command = [str(argo), "lint", "--offline", "--output=simple", *map(str, files)]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)


async def test_argo_lint_offline_accepts_the_template_and_a_generated_workflow(
    world: AdapterWorld, tmp_path: Path
) -> None:
    argo = argo_build_dir() / "argo"
    assert argo.exists(), f"the argo CLI is missing from the Argo build at {argo.parent}; run `make argo`"
    await world.setup(2, {"a.sh": PASS}, [check("first", "a.sh"), check("second", "a.sh", backend="MPIJob")])
    # Offline, a workflowTemplateRef resolves among the files given, in the Workflow's namespace.
    template = yaml.safe_load(TEMPLATE.read_text())
    template["metadata"]["namespace"] = world.namespace
    template_file, workflow_file = tmp_path / "template.yaml", tmp_path / "workflow.yaml"
    template_file.write_text(yaml.safe_dump(template))
    workflow_file.write_text(yaml.safe_dump(workflow_manifest(world.run)))
    for files in ((TEMPLATE,), (template_file, workflow_file)):
        result = argo_lint(argo, *files)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "no linting errors found" in result.stdout
    # Control: without the template the Workflow's reference does not resolve, and lint says so.
    result = argo_lint(argo, workflow_file)
    assert result.returncode != 0
    assert 'couldn\'t find workflow template "signal-adapter"' in result.stdout + result.stderr


async def test_shutdown_terminate_stops_the_running_step(world: AdapterWorld) -> None:
    """The controller cancels a Run with spec.shutdown=Terminate: Argo signals the step's
    containers through pods/exec (``argoexec kill 15 1``), which the process kubelet simulates."""
    await world.setup(2, {"slow.sh": SLOW, "b.sh": PASS}, [check("slow", "slow.sh", deadline="5m"), check("b", "b.sh")])
    created = await submit(world)
    name = created["metadata"]["name"]
    await running_backend(world, 2)
    began = time.monotonic()
    patch = {"spec": {"shutdown": "Terminate"}}
    await world.admin.merge_patch(resource_path(ARGO, "workflows", world.namespace, name), patch)
    workflow = await finished(world, name, timeout=90)
    status = workflow["status"]
    assert time.monotonic() - began < 60, "the step ran on instead of being stopped"
    assert status["phase"] == "Failed", status
    assert status["message"] == "Stopped with strategy 'Terminate'", status
    steps = check_nodes(workflow)
    assert [parameters(n, "inputs")["index"] for n in steps] == ["0"]
    assert steps[0]["phase"] == "Failed"


async def test_the_suite_deadline_stops_the_running_step(world: AdapterWorld) -> None:
    await world.setup(1, {"slow.sh": SLOW, "b.sh": PASS}, [check("slow", "slow.sh", deadline="5m"), check("b", "b.sh")])
    began = time.monotonic()
    created = await submit(world, suite_deadline=15)
    workflow = await finished(world, created["metadata"]["name"], timeout=90)
    status = workflow["status"]
    assert time.monotonic() - began < 60, "the step outlived the Workflow's activeDeadlineSeconds"
    assert status["phase"] == "Failed", status
    steps = check_nodes(workflow)
    assert [parameters(n, "inputs")["index"] for n in steps] == ["0"]
    # Stopped by the deadline: Failed, or Error ("pod deleted"), which Argo reports here since
    # the template gained a termination grace and an exit handler (cause not established).
    assert steps[0]["phase"] in {"Failed", "Error"}, steps[0]
    # The exit handler still ran after the deadline, and removed the check's backend Pods.
    sweeps = [n for n in status["nodes"].values() if n.get("templateName") == "sweep"]
    assert [n["phase"] for n in sweeps] == ["Succeeded"], status["nodes"]
    assert await world.pods() == []


MOUNTS_SCRIPT = """set -e
cat /etc/signal-mount-test/greeting > /data/copy
echo "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT" > /data/service
cat /var/run/secrets/kubernetes.io/serviceaccount/namespace > /data/namespace
test -s /var/run/secrets/kubernetes.io/serviceaccount/token
test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
echo private > /tmp/private
if touch /etc/signal-mount-test/new 2>/dev/null; then echo writable > /data/configmap; fi
echo "mounted at the real paths" > /dev/termination-log
"""


async def test_mount_namespaces_give_a_pod_its_real_mount_paths(cluster: LocalCluster, namespace: str) -> None:
    """The kubelet feature Argo's executor needs, for any Pod that opts in: volumes at their real
    paths (a ConfigMap read-only), the ServiceAccount volume, a private /tmp, the termination
    message path; nothing is created on the host."""
    admin = cluster.admin
    config = {"metadata": {"name": "greeting"}, "data": {"greeting": "hello"}}
    await admin.create(resource_path("v1", "configmaps", namespace), config)
    body = {
        "metadata": {"name": "mounts", "annotations": {MOUNT_NAMESPACES_ANNOTATION: "true"}},
        "spec": {
            "nodeName": SYSTEM_NODE,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c", MOUNTS_SCRIPT],
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/signal-mount-test"},
                        {"name": "data", "mountPath": "/data"},
                    ],
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": "greeting"}}, {"name": "data", "emptyDir": {}}],
        },
    }
    deadline = time.monotonic() + 30
    while True:  # the namespace's default ServiceAccount may not exist yet
        try:
            created = await admin.create(resource_path("v1", "pods", namespace), body)
            break
        except ApiError as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    path = resource_path("v1", "pods", namespace, "mounts")
    while (pod := await admin.get(path))["status"].get("phase") not in {"Succeeded", "Failed"}:
        assert time.monotonic() < deadline, pod["status"]
        await asyncio.sleep(0.2)
    assert cluster.kubelet is not None
    log = cluster.kubelet.log_path(created, "main").read_text()
    assert pod["status"]["phase"] == "Succeeded", log
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["message"].strip() == "mounted at the real paths"
    data = next(cluster.kubelet.workdir.glob(f"{namespace}_mounts_*")) / "volumes" / "data"
    assert (data / "copy").read_text() == "hello"
    assert (data / "service").read_text().strip() == f"127.0.0.1:{cluster.plane.apiserver_port}"
    assert (data / "namespace").read_text() == namespace
    assert not (data / "configmap").exists(), "a ConfigMap volume must be read-only"
    for host_path in ("/etc/signal-mount-test", "/data/copy", "/tmp/private"):
        assert not os.path.exists(host_path), f"{host_path} leaked onto the host"
