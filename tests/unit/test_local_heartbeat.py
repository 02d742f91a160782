"""The local cluster's Node heartbeat outlives transient failures of the API server.

A fake client stands in for the API server here on purpose: what is under test is the
heartbeat's own loop (does a dropped connection or a 500 end it?), not anything the API
server enforces. CI once lost the heartbeat to one ``httpx.ReadError`` on a reused
keep-alive connection, after which every simulated Node's Ready condition went stale.
"""

import asyncio
from typing import Any, cast

import httpx
import pytest

from localcluster.fleet import heartbeat
from localcluster.kube import ApiError, KubeClient


class FlakyKube:
    """Fails the first ``failures`` LISTs with the given errors, then answers."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = list(failures)
        self.lists = 0
        self.patched: list[str] = []

    async def get(self, path: str, **params: str) -> dict[str, Any]:
        self.lists += 1
        if self.failures:
            raise self.failures.pop(0)
        ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}
        return {"items": [{"metadata": {"name": "gpu-1"}, "status": {"conditions": [ready]}}]}

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.patched.append(path)
        return {}


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ReadError("connection reset"),
        httpx.RemoteProtocolError("server disconnected"),
        ApiError(500, "InternalError", "etcd leader changed", "GET", "/api/v1/nodes"),
    ],
    ids=["read-error", "protocol-error", "http-500"],
)
async def test_heartbeat_survives_a_failed_cycle_and_beats_again(failure: Exception) -> None:
    kube = FlakyKube([failure, failure])
    task = asyncio.create_task(heartbeat(cast(KubeClient, kube), lambda: ["gpu-1"], interval=0.01))
    try:
        for _ in range(500):
            if kube.patched:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert kube.lists >= 3, "the heartbeat stopped after a failed cycle"
    assert kube.patched
    assert set(kube.patched) == {"/api/v1/nodes/gpu-1/status"}


async def test_heartbeat_does_not_swallow_programming_errors() -> None:
    kube = FlakyKube([KeyError("bug")])
    with pytest.raises(KeyError):
        await asyncio.wait_for(heartbeat(cast(KubeClient, kube), lambda: ["gpu-1"], interval=0.01), timeout=5)
