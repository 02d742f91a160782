"""What the admission benchmarks poll: a probe until it holds, and a profile's Runs."""

import asyncio
import time
from collections.abc import Awaitable, Callable

from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys

POLL = 0.02


async def wait_for(
    what: str, probe: Callable[[], Awaitable[bool]], timeout: float = 300.0, interval: float = POLL
) -> float:
    """Poll ``probe`` every ``interval`` seconds until it holds; the ``time.time()`` it first did."""
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
    return time.time()


async def runs_of(admin: KubeClient, namespace: str, profile: str) -> list[Obj]:
    items = (await admin.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace)))["items"]
    return [r for r in items if r["spec"]["profile"]["name"] == profile]
