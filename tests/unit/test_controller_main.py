"""controller/process/main.py: one term of leadership ends when the controller is told to stop, at
whatever point of its start-up the stop comes (here: caches that never sync, e.g. a CRD not
installed yet or a list the API server refuses)."""

import asyncio
from typing import Any, cast

from controller.process.leader import LeaderElector
from controller.process.main import term
from controller.reconcile.state import Context


class NeverSynced:
    def __init__(self) -> None:
        self.waiting = asyncio.Event()

    async def wait_synced(self) -> None:
        self.waiting.set()
        await asyncio.Event().wait()


class Renewing:
    """An elector whose renewals keep succeeding: the term is never lost by itself."""

    def __init__(self) -> None:
        self.leadership: Any = type("Term", (), {"reason": ""})()

    async def keep(self) -> None:
        await asyncio.Event().wait()


async def test_a_stop_while_the_caches_never_sync_ends_the_term() -> None:
    ctx, stop = NeverSynced(), asyncio.Event()
    ended = asyncio.create_task(term(cast(Context, ctx), cast(LeaderElector, Renewing()), stop, resync=30.0))
    await ctx.waiting.wait()
    stop.set()
    done, _ = await asyncio.wait({ended}, timeout=10)
    if not done:
        ended.cancel()
    assert done, "SIGTERM is not obeyed while the caches have not synced (the Lease is held, never released)"
    assert ended.result() == 0
