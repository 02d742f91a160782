"""Acceptance 3 of the foundation: Pods bound to simulated Nodes run real local commands
under the process kubelet, with status in kubelet order, termination messages,
activeDeadlineSeconds and deletion that stops the process."""

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from tests.controller_support import eventually


@pytest.fixture
async def node(cluster: LocalCluster) -> str:
    name = f"kubelet-{uuid.uuid4().hex[:6]}"
    await cluster.add_nodes([SimNode(name)])
    return name


def pod(name: str, node: str, script: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}],
            **spec,
        },
    }


async def wait_for(
    kube: KubeClient, path: str, predicate: Callable[[Obj | None], bool], timeout: float = 30.0
) -> Obj | None:
    """The object at ``path`` (None: gone) once ``predicate`` holds for it."""

    async def met() -> tuple[Obj | None] | None:
        try:
            obj: Obj | None = await kube.get(path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            obj = None
        return (obj,) if predicate(obj) else None

    (found,) = await eventually(met, timeout=timeout, interval=0.1, what=f"{path} to meet the condition")
    return found


def phase_is(*phases: str) -> Callable[[Obj | None], bool]:
    return lambda obj: obj is not None and obj.get("status", {}).get("phase") in phases


async def test_a_pod_runs_a_real_command_and_reports_exit_code_and_message(
    admin: KubeClient, namespace: str, node: str
) -> None:
    pods = resource_path("v1", "pods", namespace)
    script = 'printf "{\\"node\\":\\"%s\\"}" "$NODE" > /dev/termination-log; exit 3'
    body = pod("runs", node, script)
    body["spec"]["containers"][0]["env"] = [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    await admin.create(pods, body)
    done = await wait_for(admin, f"{pods}/runs", phase_is("Succeeded", "Failed"))
    assert done is not None
    assert done["status"]["phase"] == "Failed"
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["message"] == f'{{"node":"{node}"}}'


async def test_a_successful_pod_reads_its_configmap_volume_read_only(
    admin: KubeClient, namespace: str, node: str
) -> None:
    await admin.create(
        resource_path("v1", "configmaps", namespace),
        {"metadata": {"name": "scripts"}, "data": {"hello.sh": "echo hello-from-configmap"}},
    )
    pods = resource_path("v1", "pods", namespace)
    # File modes make the volume read-only (advisory when the kubelet itself runs as root).
    script = 'printf "%s %s %s" "$(sh /scripts/hello.sh)" "$(stat -c %a /scripts)" "$(stat -L -c %a /scripts/hello.sh)" > /dev/termination-log'
    body = pod("reads", node, script, volumes=[{"name": "s", "configMap": {"name": "scripts"}}])
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "s", "mountPath": "/scripts", "readOnly": True}]
    await admin.create(pods, body)
    done = await wait_for(admin, f"{pods}/reads", phase_is("Succeeded", "Failed"))
    assert done is not None
    status = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (done["status"]["phase"], status["exitCode"], status.get("message")) == (
        "Succeeded",
        0,
        "hello-from-configmap 555 444",
    )


async def test_status_moves_forward_in_kubelet_order(admin: KubeClient, namespace: str, node: str) -> None:
    pods = resource_path("v1", "pods", namespace)
    created = await admin.create(pods, pod("ordered", node, "sleep 1; exit 0"))
    phases: list[str] = []
    async with asyncio.timeout(30):
        async for event in admin.watch(
            pods,
            resourceVersion=created["metadata"]["resourceVersion"],
            fieldSelector="metadata.name=ordered",
        ):
            phase = event["object"].get("status", {}).get("phase")
            if event["type"] == "MODIFIED" and (not phases or phases[-1] != phase):
                phases.append(phase)
            if phase == "Succeeded":
                break
    assert phases == ["Running", "Succeeded"]


async def test_active_deadline_kills_a_command_that_runs_too_long(
    admin: KubeClient, namespace: str, node: str, cluster: LocalCluster
) -> None:
    pods = resource_path("v1", "pods", namespace)
    marker = Path(cluster.workdir()) / f"deadline-{uuid.uuid4().hex}"
    await admin.create(pods, pod("slow", node, f"sleep 30; touch {marker}", activeDeadlineSeconds=2))
    began = time.monotonic()
    done = await wait_for(admin, f"{pods}/slow", phase_is("Succeeded", "Failed"))
    assert done is not None
    assert (done["status"]["phase"], done["status"]["reason"]) == ("Failed", "DeadlineExceeded")
    assert time.monotonic() - began < 15
    assert not marker.exists()


async def test_deleting_a_running_pod_stops_its_process_and_the_pod_disappears(
    admin: KubeClient, namespace: str, node: str, cluster: LocalCluster
) -> None:
    pods = resource_path("v1", "pods", namespace)
    pidfile = Path(cluster.workdir()) / f"pid-{uuid.uuid4().hex}"
    await admin.create(pods, pod("victim", node, f"echo $$ > {pidfile}; exec sleep 300"))
    await wait_for(admin, f"{pods}/victim", phase_is("Running"))

    async def pid_written() -> bool:
        return pidfile.exists() and bool(pidfile.read_text().strip())

    await eventually(pid_written, timeout=5, interval=0.05, what=f"the Pod's process to write {pidfile}")
    pid = int(pidfile.read_text())
    assert Path(f"/proc/{pid}").exists()
    await admin.delete(f"{pods}/victim", {"gracePeriodSeconds": 30})
    await wait_for(admin, f"{pods}/victim", lambda obj: obj is None)

    async def stopped() -> bool:
        try:
            return "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]  # a zombie has stopped
        except FileNotFoundError:
            return True

    await eventually(stopped, timeout=5, interval=0.1, what=f"process {pid} stopped after the deletion of its Pod")


async def test_a_pod_of_a_node_not_simulated_is_left_alone(admin: KubeClient, namespace: str, node: str) -> None:
    pods = resource_path("v1", "pods", namespace)
    created = await admin.create(pods, pod("elsewhere", "not-a-simulated-node", "exit 0"))
    # Evidence the process kubelet has seen it: it watches every bound Pod in one stream, in
    # order, so a Pod created afterwards on a simulated Node that it has run to its end means
    # the first was handled (and had it been run, it would have ended as soon).
    await admin.create(pods, pod("witness", node, "exit 0"))
    await wait_for(admin, f"{pods}/witness", phase_is("Succeeded"))
    untouched = await admin.get(f"{pods}/elsewhere")
    assert untouched["status"]["phase"] == "Pending"
    assert untouched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"], untouched["status"]
