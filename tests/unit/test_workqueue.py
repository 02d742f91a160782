"""controller/rules/workqueue.py: backoff, the token bucket, deduplication, delays, no concurrent
processing of one key, and results. The queue's bookkeeping takes ``now``, so these tables
run without waiting."""

import asyncio

import pytest

from controller.rules.workqueue import Backoff, TokenBucket, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_queue(clock: Clock, *, rand: float = 0.5, bucket: TokenBucket | None = None) -> WorkQueue[str]:
    return WorkQueue(
        backoff=Backoff(base=0.5, factor=2.0, cap=8.0, jitter=0.2),
        bucket=bucket or TokenBucket(rate=1000.0, burst=1000),
        clock=clock,
        rand=lambda: rand,
    )


@pytest.mark.parametrize(
    ("failures", "rand", "expected"),
    [
        pytest.param(0, 0.5, 0.0, id="no failure, no delay"),
        pytest.param(1, 0.5, 0.5, id="first failure waits the base"),
        pytest.param(2, 0.5, 1.0, id="second failure doubles"),
        pytest.param(4, 0.5, 4.0, id="fourth failure: base * 2**3"),
        pytest.param(5, 0.5, 8.0, id="capped"),
        pytest.param(50, 0.5, 8.0, id="capped however many failures"),
        pytest.param(1, 0.0, 0.4, id="jitter low end: 80%"),
        pytest.param(1, 0.999999, 0.6, id="jitter high end: just under 120%"),
        pytest.param(10_000, 0.5, 8.0, id="huge failure counts do not overflow"),
    ],
)
def test_backoff(failures: int, rand: float, expected: float) -> None:
    assert Backoff(base=0.5, factor=2.0, cap=8.0, jitter=0.2).delay(failures, rand) == pytest.approx(expected, abs=1e-5)


def test_token_bucket_allows_a_burst_then_paces() -> None:
    bucket = TokenBucket(rate=2.0, burst=3)
    assert [bucket.reserve(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve(0.0) == pytest.approx(0.5)
    assert bucket.reserve(0.0) == pytest.approx(1.0)
    # Time refills the bucket at ``rate``.
    assert bucket.reserve(10.0) == 0.0


def test_a_key_added_twice_is_queued_once() -> None:
    clock = Clock()
    queue = make_queue(clock)
    for key in ("run/a", "run/b", "run/a", "run/a"):
        queue.add(key)
    assert len(queue) == 2
    assert [queue.pop_ready(clock.now), queue.pop_ready(clock.now), queue.pop_ready(clock.now)] == [
        "run/a",
        "run/b",
        None,
    ]


def test_a_key_being_processed_is_not_handed_out_again_until_done() -> None:
    clock = Clock()
    queue = make_queue(clock)
    queue.add("run/a")
    assert queue.pop_ready(clock.now) == "run/a"
    queue.add("run/a")  # a change seen while it is processed
    assert queue.pop_ready(clock.now) is None, "the same key must never be processed twice at once"
    assert queue.processing() == {"run/a"}
    queue.done("run/a")
    assert queue.pop_ready(clock.now) == "run/a", "the change seen meanwhile is not lost"
    queue.done("run/a")
    assert queue.pop_ready(clock.now) is None


def test_done_without_a_change_meanwhile_does_not_requeue() -> None:
    clock = Clock()
    queue = make_queue(clock)
    queue.add("k")
    assert queue.pop_ready(clock.now) == "k"
    queue.done("k")
    assert queue.pop_ready(clock.now) is None


@pytest.mark.parametrize(
    ("delays", "due_at"),
    [
        pytest.param([5.0], 5.0, id="one delay"),
        pytest.param([5.0, 2.0], 2.0, id="an earlier deadline wins"),
        pytest.param([2.0, 5.0], 2.0, id="a later deadline does not postpone"),
        pytest.param([0.0], 0.0, id="no delay is immediate"),
    ],
)
def test_requeue_after(delays: list[float], due_at: float) -> None:
    clock = Clock()
    queue = make_queue(clock)
    for delay in delays:
        queue.add_after("k", delay)
    if due_at > 0:
        assert queue.pop_ready(clock.now) is None
        assert queue.next_deadline() == pytest.approx(clock.now + due_at)
        clock.now += due_at - 0.001
        assert queue.pop_ready(clock.now) is None
        clock.now += 0.001
    assert queue.pop_ready(clock.now) == "k"
    queue.done("k")
    clock.now += 100
    assert queue.pop_ready(clock.now) is None, "a key comes back once per requeue"


def test_an_immediate_add_overrides_a_pending_delay() -> None:
    clock = Clock()
    queue = make_queue(clock)
    queue.add_after("k", 30.0)
    queue.add("k")
    assert queue.pop_ready(clock.now) == "k"
    queue.done("k")
    clock.now += 31
    assert queue.pop_ready(clock.now) is None
    assert queue.waiting() == 0


def test_a_delay_falling_due_while_processing_requeues_after_done() -> None:
    clock = Clock()
    queue = make_queue(clock)
    queue.add("k")
    assert queue.pop_ready(clock.now) == "k"
    queue.add_after("k", 1.0)
    clock.now += 2
    assert queue.pop_ready(clock.now) is None
    queue.done("k")
    assert queue.pop_ready(clock.now) == "k"


@pytest.mark.parametrize(
    ("failures", "expected_delay"),
    [
        pytest.param(1, 0.5, id="first failure"),
        pytest.param(3, 2.0, id="third failure"),
        pytest.param(6, 8.0, id="sixth failure is capped"),
    ],
)
def test_rate_limited_requeue_backs_off_per_key(failures: int, expected_delay: float) -> None:
    clock = Clock()
    queue = make_queue(clock)
    delay = 0.0
    for _ in range(failures):
        delay = queue.add_rate_limited("bad")
    assert delay == pytest.approx(expected_delay)
    assert queue.failures("bad") == failures
    assert queue.add_rate_limited("good") == pytest.approx(0.5), "another key's backoff is its own"
    queue.forget("bad")
    assert queue.add_rate_limited("bad") == pytest.approx(0.5), "forget starts the backoff again"


def test_rate_limited_requeue_honours_at_least_and_the_bucket() -> None:
    clock = Clock()
    queue = make_queue(clock, bucket=TokenBucket(rate=1.0, burst=1))
    assert queue.add_rate_limited("a", at_least=7.0) == pytest.approx(7.0), "Retry-After is a floor"
    assert queue.add_rate_limited("b") == pytest.approx(1.0), "the overall bucket paces a burst of failures"


def test_terminal_keys_are_simply_not_requeued() -> None:
    clock = Clock()
    queue = make_queue(clock)
    queue.add("bad")
    assert queue.pop_ready(clock.now) == "bad"
    queue.done("bad")  # the loop ends the object and requeues nothing
    clock.now += 3600
    assert queue.pop_ready(clock.now) is None


async def test_get_waits_for_a_delayed_key_and_stops_on_shutdown() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("k", 0.05)
    assert await asyncio.wait_for(queue.get(), 5) == "k"
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.shutdown()
    assert await asyncio.wait_for(waiter, 5) is None
    queue.add("late")
    assert len(queue) == 0, "a shut-down queue takes nothing"


async def test_get_wakes_up_for_a_key_added_while_waiting() -> None:
    queue: WorkQueue[str] = WorkQueue()
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not waiter.done()
    queue.add("k")
    assert await asyncio.wait_for(waiter, 5) == "k"
