"""Issue 13, acceptance 2: the API server is stopped for about 10 s and started again on
the same etcd.

* An informer whose watch is cut reports itself unsynced (with the reason), backs off, and
  recovers: synced again, following changes made after the restart.
* The controller process, stopped in the middle of an admission, does not exit: its
  /readyz answers 503 naming the unsynced caches and ``signal_informer_synced`` shows 0
  while the server is down; afterwards it is ready again, the Run finishes its admission
  with every Node reserved for it and the ledger holding exactly its group (no leak)."""

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kubeio.client import Kube, resource_path
from kubeio.informer import Informer
from localcluster.cluster import LocalCluster
from localcluster.controlplane import ControlPlane, free_port
from localcluster.kube import KubeClient
from tests.controller_support import ControllerProcess, World, eventually, ledger_groups, profile_body, reserved_by

OUTAGE = 10.0
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
async def cluster() -> AsyncIterator[LocalCluster]:
    """This file's own cluster (``admin`` and ``namespace`` follow it): stopping the API server
    cuts every watch of every component, and the session's shared cluster would pass that on to
    the next tests (Argo's informer, re-listing with backoff, then answered a WorkflowTemplate
    created just after with "not found", and test_argo_local failed)."""
    async with LocalCluster(plane=ControlPlane(), heartbeat_seconds=5.0, with_argo=False) as local:
        yield local


async def _outage(cluster: LocalCluster, during: "asyncio.Future[None] | None" = None) -> float:
    """Stop kube-apiserver, keep it down for OUTAGE seconds, start it again; returns how
    long it was down."""
    began = time.monotonic()
    await asyncio.to_thread(cluster.plane.stop_apiserver)
    try:
        if during is not None:
            await asyncio.wait_for(during, OUTAGE * 3)
        # The scenario is an outage of this length (not a synchronisation wait).
        await asyncio.sleep(max(0.0, OUTAGE - (time.monotonic() - began)))
    finally:
        await asyncio.to_thread(cluster.plane.start_apiserver)
    return time.monotonic() - began


async def test_an_informer_reports_unsynced_while_the_api_server_is_down_and_recovers(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    kube = await Kube.connect(kubeconfig=str(cluster.plane.admin_kubeconfig), field_manager="test")
    informer: Informer[dict] = Informer(kube, resource_path("v1", "configmaps", namespace), lambda o: o)
    seen: list[str] = []
    informer.handlers.append(lambda key, old, new: seen.append(key))
    informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        assert informer.is_synced
        await admin.create(resource_path("v1", "configmaps", namespace), {"metadata": {"name": "before"}})
        await eventually(lambda: _has(informer, f"{namespace}/before"), what="the ConfigMap made before")

        loop = asyncio.get_running_loop()
        unsynced: asyncio.Future[None] = loop.create_future()

        reasons: list[str] = []

        async def watch_for_unsynced() -> None:
            await eventually(lambda: _false(informer.is_synced), timeout=OUTAGE * 3, what="the informer unsynced")
            reasons.append(informer.last_error)
            unsynced.set_result(None)

        watcher = asyncio.create_task(watch_for_unsynced())
        down = await _outage(cluster, unsynced)
        await watcher
        assert down >= OUTAGE
        assert reasons, "the informer never reported itself unsynced"
        assert "no answer from the API server" in reasons[0], "an unsynced informer says why"

        await eventually(lambda: _true(informer.is_synced), timeout=60, what="the informer synced again")
        await admin.create(resource_path("v1", "configmaps", namespace), {"metadata": {"name": "after"}})
        await eventually(lambda: _has(informer, f"{namespace}/after"), timeout=30, what="a ConfigMap made after")
        await admin.delete(resource_path("v1", "configmaps", namespace, "before"))
        await eventually(lambda: _gone(informer, f"{namespace}/before"), timeout=30, what="a deletion after")
        assert f"{namespace}/after" in seen
    finally:
        await informer.stop()
        await kube.close()


async def _has(informer: Informer[dict], key: str) -> bool:
    return key in informer.items


async def _gone(informer: Informer[dict], key: str) -> bool:
    return key not in informer.items


async def _true(value: bool) -> bool:
    return value


async def _false(value: bool) -> bool:
    return not value


async def test_the_controller_survives_an_outage_in_the_middle_of_an_admission(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    port = free_port()
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0, metrics_port=port)
    await controller.start()
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5.0)

    async def readiness() -> tuple[int, str] | None:
        try:
            response = await http.get("/readyz")
        except httpx.HTTPError:
            return None
        return response.status_code, response.text

    try:
        profile = f"{namespace}-p"
        names = world.node_names(4)
        await eventually(lambda: _ready_leading(readiness), timeout=60, what=f"a ready leader\n{controller.logs()}")
        await world.add_nodes(names, requested_for=profile, zones=("zone-a", "zone-b"))
        await world.add_profile(profile_body(profile, namespace, 4))
        await eventually(world.runs, timeout=60, what=f"a Run created\n{controller.logs()}")

        loop = asyncio.get_running_loop()
        noticed: asyncio.Future[None] = loop.create_future()

        async def watch_readiness() -> None:
            answer = await eventually(lambda: _not_ready(readiness), timeout=OUTAGE * 3, what="/readyz answering 503")
            noticed.set_result(None)
            assert "caches not synced" in answer[1]
            metrics = (await http.get("/metrics")).text
            assert 'signal_informer_synced{resource="nodes"} 0.0' in metrics

        watcher = asyncio.create_task(watch_readiness())
        await _outage(cluster, noticed)
        await watcher
        assert controller.process is not None
        assert controller.process.poll() is None, f"the controller exited\n{controller.logs()}"

        await eventually(lambda: _ready_leading(readiness), timeout=90, what=f"ready again\n{controller.logs()}")

        async def admitted() -> bool:
            runs = await world.runs()
            if len(runs) != 1 or (runs[0].get("status") or {}).get("phase") != "Running":
                return False
            uid = runs[0]["metadata"]["uid"]
            groups = await ledger_groups(admin, namespace) or {}
            nodes = await world.nodes(names)
            return list(groups) == [runs[0]["metadata"]["name"]] and all(reserved_by(n) == uid for n in nodes)

        await eventually(admitted, timeout=90, what=f"the admission completed\n{controller.logs()}")
        assert controller.process.poll() is None, f"the controller exited\n{controller.logs()}"
        assert "Traceback" not in controller.logs()
    finally:
        await http.aclose()
        controller.stop()
        await world.cleanup()


async def _ready_leading(readiness) -> bool:  # type: ignore[no-untyped-def]
    answer = await readiness()
    return answer is not None and answer[0] == 200 and "caches synced" in answer[1]


async def _not_ready(readiness) -> tuple[int, str] | None:  # type: ignore[no-untyped-def]
    answer = await readiness()
    return answer if answer is not None and answer[0] == 503 else None
