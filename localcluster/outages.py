"""How the process kubelet writes about a Pod while the API server may be restarting: it keeps
trying, as a kubelet does."""

import asyncio
from collections.abc import Awaitable, Callable

from kubeio.errors import ServerError, TooManyRequests, TransportError
from localcluster.kube import ApiError

OUTAGE_SECONDS = 120.0
"""How long a status write or the final delete of a Pod is retried while the API server cannot
answer (a restart, a paused etcd): a kubelet keeps trying; giving up at once left a finished
Pod Running, or a deleted one Terminating, for ever."""


async def through_outages(call: Callable[[], Awaitable[object]]) -> None:
    """``call`` (a write about one Pod), retried while the API server cannot answer; a Pod that
    is gone or was replaced (404, 409) needs nothing more."""
    until = asyncio.get_running_loop().time() + OUTAGE_SECONDS
    while True:
        try:
            await call()
            return
        except (TransportError, ServerError, TooManyRequests):
            if asyncio.get_running_loop().time() > until:
                raise
        except ApiError as exc:
            if exc.status not in {404, 409}:
                raise
            return
        await asyncio.sleep(0.5)
