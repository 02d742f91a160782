"""adapter/backend.py ``fan_out``: the adapter's per-participant creates and deletes, at most
``FAN_OUT_REQUESTS`` in flight (each request in flight holds a connection, and each new
connection costs a TLS handshake), in order, errors as ``asyncio.gather`` raises them."""

import asyncio

import pytest

from adapter.backend import FAN_OUT_REQUESTS, fan_out


class Steps:
    """Steps that record how many run at once; each waits for ``release``."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.started: list[int] = []
        self.release = asyncio.Event()

    async def __call__(self, item: int) -> int:
        self.started.append(item)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.release.wait()
            if item < 0:
                raise ValueError(f"step {item} failed")
            return item * 10
        finally:
            self.running -= 1


async def wait_for_started(steps: Steps, count: int) -> None:
    while len(steps.started) < count:
        await asyncio.sleep(0)


@pytest.mark.parametrize(("items", "limit"), [(64, FAN_OUT_REQUESTS), (5, 8), (9, 1), (0, 8)])
async def test_at_most_limit_at_once_results_in_order(items: int, limit: int) -> None:
    steps = Steps()
    work = asyncio.ensure_future(fan_out(steps, range(items), limit))
    await wait_for_started(steps, min(items, limit))
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(steps.started) == min(items, limit)  # the others wait their turn
    steps.release.set()
    assert await work == [i * 10 for i in range(items)]
    assert steps.most == min(items, limit)
    assert sorted(steps.started) == list(range(items))


async def test_the_first_error_is_raised() -> None:
    steps = Steps()
    steps.release.set()
    with pytest.raises(ValueError, match="step -3 failed"):
        await fan_out(steps, [1, -3, 2, 4], 2)


async def test_cancelled_before_their_turn_the_waiting_steps_never_start() -> None:
    steps = Steps()
    work = asyncio.ensure_future(fan_out(steps, range(20), 4))
    await wait_for_started(steps, 4)
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work
    assert sorted(steps.started) == [0, 1, 2, 3]
    assert steps.running == 0
