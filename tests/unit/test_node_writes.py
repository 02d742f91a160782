"""controller/reconcile/reservations.py ``each_node``: a group's Node writes run a bounded number at a
time; after a refusal none is started, every started one ends before the caller goes on
(a rollback never races a reservation still in flight), and the refusal is what is raised."""

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from controller.reconcile.reservations import NODE_WRITE_CONCURRENCY, AdmissionAborted, each_node
from controller.reconcile.state import NotLeader
from kubeio.errors import Conflict


class Writes:
    """Calls that record when they start and end, each held until released."""

    def __init__(self, count: int, fail: dict[int, Exception] | None = None) -> None:
        self.fail = fail or {}
        self.gates = [asyncio.Event() for _ in range(count)]
        self.started: list[int] = []
        self.ended: list[int] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.changed = asyncio.Event()

    def call(self, i: int) -> Callable[[], Awaitable[None]]:
        async def write() -> None:
            self.started.append(i)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.changed.set()
            try:
                await self.gates[i].wait()
                if i in self.fail:
                    raise self.fail[i]
            finally:
                self.in_flight -= 1
                self.ended.append(i)
                self.changed.set()

        return write

    def calls(self) -> list[Callable[[], Awaitable[None]]]:
        return [self.call(i) for i in range(len(self.gates))]

    async def until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            self.changed.clear()
            await self.changed.wait()

    async def until_started(self, count: int) -> None:
        await self.until(lambda: len(self.started) >= count)


async def test_writes_run_at_most_the_window_at_once_and_all_complete() -> None:
    writes = Writes(NODE_WRITE_CONCURRENCY * 2 + 3)
    task = asyncio.create_task(each_node(writes.calls(), stop_at_first_error=True))
    await writes.until_started(NODE_WRITE_CONCURRENCY)
    assert writes.in_flight == NODE_WRITE_CONCURRENCY
    for gate in writes.gates:
        gate.set()
    await task
    assert sorted(writes.ended) == list(range(len(writes.gates)))
    assert writes.most_in_flight == NODE_WRITE_CONCURRENCY


async def test_after_a_refusal_none_starts_and_the_started_ones_end_first() -> None:
    writes = Writes(NODE_WRITE_CONCURRENCY + 4, fail={2: AdmissionAborted("Node n2 is cordoned")})
    task = asyncio.create_task(each_node(writes.calls(), stop_at_first_error=True))
    await writes.until_started(NODE_WRITE_CONCURRENCY)
    writes.gates[2].set()  # the refusal, while the other seven are still writing
    await writes.until(lambda: 2 in writes.ended)
    assert not task.done()  # waits for the writes in flight
    assert writes.in_flight == NODE_WRITE_CONCURRENCY - 1
    for i in range(NODE_WRITE_CONCURRENCY):
        writes.gates[i].set()
    with pytest.raises(AdmissionAborted, match="n2"):
        await task
    assert sorted(writes.started) == list(range(NODE_WRITE_CONCURRENCY))  # none after the refusal
    assert sorted(writes.ended) == sorted(writes.started)


async def test_a_refusal_is_raised_before_another_error() -> None:
    writes = Writes(3, fail={0: Conflict(409, "Conflict", "n0 kept changing"), 1: AdmissionAborted("n1 gone")})
    task = asyncio.create_task(each_node(writes.calls(), stop_at_first_error=True))
    await writes.until_started(3)
    writes.gates[0].set()  # the first to fail
    await writes.until(lambda: 0 in writes.ended)
    writes.gates[1].set()
    writes.gates[2].set()
    with pytest.raises(AdmissionAborted, match="n1 gone"):
        await task


async def test_without_stopping_every_write_is_tried_then_the_first_error_raised() -> None:
    count = NODE_WRITE_CONCURRENCY + 4
    writes = Writes(count, fail={1: Conflict(409, "Conflict", "n1 kept changing")})
    for gate in writes.gates:
        gate.set()
    with pytest.raises(Conflict, match="n1 kept changing"):
        await each_node(writes.calls(), stop_at_first_error=False)
    assert sorted(writes.ended) == list(range(count))


@pytest.mark.parametrize("stop_at_first_error", [True, False])
async def test_a_lost_leadership_is_raised_before_any_other_error(stop_at_first_error: bool) -> None:
    """Fencing wins: a Conflict or a refusal from the same batch must not hide that this replica
    may no longer write (the loop stops on NotLeader; on a Conflict it would only requeue)."""
    fail: dict[int, Exception] = {
        0: Conflict(409, "Conflict", "n0 kept changing"),
        1: AdmissionAborted("n1 gone"),
        2: NotLeader("the Lease lapsed"),
    }
    writes = Writes(3, fail=fail)
    task = asyncio.create_task(each_node(writes.calls(), stop_at_first_error=stop_at_first_error))
    await writes.until_started(3)
    for gate in writes.gates:  # in order: the Conflict ends first, the lost Lease last
        gate.set()
    with pytest.raises(NotLeader, match="lapsed"):
        await task
