"""controller/process/loop.py: per-key isolation. The reconcile and the ending of an object are
scripted here (what is under test is the loop's decision after each outcome: requeue with
backoff, requeue promptly on a conflict, end a structurally bad object, stop only when
fenced or the ledger is malformed); the real paths run against the API server in
tests/integration/test_controller_bad_objects.py. Also ``run_requeue``, pure."""

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from controller.process.loop import MAX_FAILURES, Controller
from controller.reconcile.recovery import each_pass
from controller.reconcile.state import Context, NotLeader
from controller.rules.ledger import LedgerError
from controller.rules.queuekeys import Key, Kind
from controller.rules.requeue import run_requeue, stale_after_own_write
from controller.rules.runview import run_view
from controller.rules.workqueue import (
    Backoff,
    Done,
    RequeueAfter,
    Result,
    Terminal,
    TerminalError,
    TokenBucket,
    WorkQueue,
)
from kubeio.errors import Conflict, TransportError, error_for

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
RUN = Key(Kind.RUN, "r1")


@dataclass
class Cache:
    items: dict[str, Any] = field(default_factory=dict)
    handlers: list[Callable[..., None]] = field(default_factory=list)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Scripted(Controller):
    """A controller whose reconcile raises or returns what the test says, in order."""

    def __init__(self, outcomes: list[Any], clock: Clock) -> None:
        ctx = SimpleNamespace(
            namespace="ns",
            runs=Cache({"ns/r1": {"metadata": {"name": "r1", "resourceVersion": "1"}}}),
            profiles=Cache(),
            nodes=Cache(),
            workflows=Cache(),
            clock=lambda: NOW,
        )
        queue: WorkQueue[Key] = WorkQueue(
            backoff=Backoff(base=1.0, cap=60.0, jitter=0.0), bucket=TokenBucket(1000, 1000), clock=clock
        )
        super().__init__(cast(Context, ctx), queue=queue)
        self.outcomes = list(outcomes)
        self.calls = 0
        self.ends: list[tuple[Key, str]] = []
        self.reports: list[tuple[Key, int]] = []

    async def reconcile(self, key: Key, *, resync: bool) -> Result:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return cast(Result, outcome)

    async def end(self, key: Key, reason: str, message: str) -> Result:
        self.ends.append((key, reason))
        return Terminal(reason, message)

    async def report(self, key: Key, failures: int, exc: BaseException) -> None:
        self.reports.append((key, failures))


async def drive(controller: Scripted, clock: Clock, *, until: float = 1000.0) -> list[float]:
    """Process the key whenever it is due; returns the times it was processed."""
    times = []
    controller.queue.add(RUN)
    while clock.now <= until:
        key = controller.queue.pop_ready(clock.now)
        if key is None:
            deadline = controller.queue.next_deadline()
            if deadline is None:
                break
            clock.now = deadline
            continue
        times.append(clock.now)
        await controller.process(key)
    return times


@pytest.mark.parametrize(
    ("outcomes", "times", "ended"),
    [
        pytest.param([Done()], [0.0], False, id="done once"),
        pytest.param([RequeueAfter(30.0), Done()], [0.0, 30.0], False, id="requeue after"),
        pytest.param(
            [TransportError("refused", "GET", "/x")] * 3 + [Done()],
            [0.0, 1.0, 3.0, 7.0],
            False,
            id="transport errors back off exponentially, then recover",
        ),
        pytest.param(
            [error_for(429, {}, "GET", "/x", retry_after=20.0), Done()],
            [0.0, 20.0],
            False,
            id="Retry-After is honoured",
        ),
        pytest.param(
            [TransportError("refused", "GET", "/x")] * (MAX_FAILURES + 2) + [Done()],
            [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 123.0],
            False,
            id="API errors are never a reason to end an object",
        ),
        pytest.param(
            [AttributeError("'str' object has no attribute 'get'")] * MAX_FAILURES,
            [0.0, 1.0, 3.0, 7.0, 15.0],
            True,
            id="a recurring non-API error ends the object after MAX_FAILURES",
        ),
        pytest.param(
            [TerminalError("EvidenceUnreadable", "bad gzip")],
            [0.0],
            True,
            id="a structurally bad object is ended at once",
        ),
    ],
)
async def test_outcomes(outcomes: list[Any], times: list[float], ended: bool) -> None:
    clock = Clock()
    controller = Scripted(outcomes, clock)
    assert await drive(controller, clock) == pytest.approx(times)
    assert bool(controller.ends) is ended
    assert not controller.queue.processing()


async def test_a_failing_run_is_reported_at_its_first_second_fourth_failure() -> None:
    """controller/reconcile/failing.py: the streak reported on the Run and in an Event at 1, 2, 4, 8..."""
    clock = Clock()
    controller = Scripted([TransportError("refused", "GET", "/x")] * 9 + [Done()], clock)
    await drive(controller, clock)
    assert controller.reports == [(RUN, 1), (RUN, 2), (RUN, 4), (RUN, 8)]


async def test_a_pass_that_waits_for_the_cache_does_not_end_a_failure_streak() -> None:
    """``RequeueAfter(progress=False)`` (the cached Run predates the controller's own write):
    the backoff and the count go on, so the next failure is the 3rd, not a new 1st."""
    clock = Clock()
    failure = TransportError("refused", "GET", "/x")
    controller = Scripted([failure, failure, RequeueAfter(0.1, progress=False), failure, Done()], clock)
    await drive(controller, clock)
    assert controller.reports == [(RUN, 1), (RUN, 2)], "the 3rd failure is not announced"
    assert controller.queue.failures(RUN) == 0, "forgotten after the real success"


async def test_conflicts_requeue_promptly_with_a_growing_small_delay() -> None:
    clock = Clock()
    conflict = Conflict(409, "Conflict", "the object has been modified")
    controller = Scripted([conflict] * 4 + [Done()], clock)
    times = await drive(controller, clock)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 5
    assert all(0.04 <= gap <= 2.0 for gap in gaps), gaps
    assert gaps[-1] > gaps[0], "not a hot loop: the delay grows"
    assert not controller.ends


async def test_only_fencing_stops_the_loop() -> None:
    clock = Clock()
    controller = Scripted([NotLeader("fence 3 is not ours")], clock)
    with pytest.raises(NotLeader):
        await drive(controller, clock)
    assert not controller.queue.processing(), "the key is released even then"


async def test_an_unparsable_ledger_backs_the_key_off_and_never_ends_it() -> None:
    """Issue 42 M-B: a malformed admission ledger stops admission only; a key that needed it is
    retried with backoff (however often), never ended, and the loop goes on."""
    clock = Clock()
    controller = Scripted([LedgerError("groups is not a JSON object")] * (MAX_FAILURES + 2) + [Done()], clock)
    assert await drive(controller, clock) == pytest.approx([0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 123.0])
    assert not controller.ends
    assert not controller.queue.processing()


async def test_one_failing_key_does_not_hold_up_another() -> None:
    clock = Clock()
    controller = Scripted([RuntimeError("boom"), Done()], clock)
    controller.queue.add(RUN)
    controller.queue.add(Key(Kind.RUN, "r2"))
    first = controller.queue.pop_ready(clock.now)
    await controller.process(first)  # type: ignore[arg-type]
    assert controller.queue.pop_ready(clock.now) == Key(Kind.RUN, "r2"), "the next key is processed at once"


def _run(phase: str | None, *, cancel: bool = False, started: str | None = None, deadline: int = 600) -> Any:
    status = {"phase": phase} if phase else {}
    if started:
        status["startTime"] = started
    return run_view({"spec": {"cancel": cancel, "suiteDeadlineSeconds": deadline}, "status": status})


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        pytest.param(_run(None), Done(), id="pending: events drive it"),
        pytest.param(_run("Succeeded"), Done(), id="terminal"),
        pytest.param(_run("Running", cancel=True), RequeueAfter(2.0), id="cancel polls for workloads to go"),
        pytest.param(
            _run("Running", started="2026-11-30T11:55:00Z"), RequeueAfter(300.5), id="running: look at its deadline"
        ),
        pytest.param(
            _run("Running", started="2026-11-30T11:00:00Z"), RequeueAfter(0.5), id="deadline passed: look soon"
        ),
        pytest.param(_run("Running", started="garbage"), Done(), id="unreadable start time"),
    ],
)
def test_run_requeue(run: Any, expected: Result) -> None:
    assert run_requeue(run, NOW) == expected


def _cached(version: str) -> Any:
    return run_view({"metadata": {"name": "r1", "resourceVersion": version}})


@pytest.mark.parametrize(
    ("cached", "written", "now", "stale"),
    [
        pytest.param("10", None, 0.0, False, id="nothing written: act"),
        pytest.param("10", ("12", 0.0), 1.0, True, id="cache older than our write: wait"),
        pytest.param("12", ("12", 0.0), 1.0, False, id="cache has our write: act"),
        pytest.param("15", ("12", 0.0), 1.0, False, id="cache newer than our write: act"),
        pytest.param("10", ("12", 0.0), 11.0, False, id="a write never seen is not waited for forever"),
        pytest.param("abc", ("xyz", 0.0), 1.0, True, id="opaque versions: only equality counts"),
        pytest.param("xyz", ("xyz", 0.0), 1.0, False, id="opaque versions, equal"),
    ],
)
def test_a_run_cached_from_before_our_own_write_is_not_acted_on(
    cached: str, written: tuple[str, float] | None, now: float, stale: bool
) -> None:
    assert stale_after_own_write(_cached(cached), written, now) is stale


class Ending(Controller):
    """The real reconcile over a cache holding one Run view; ``end`` only records."""

    def __init__(self, run: Any) -> None:
        ctx = SimpleNamespace(
            namespace="ns",
            runs=Cache({"ns/r1": run_view(run)}),
            profiles=Cache(),
            nodes=Cache(),
            workflows=Cache(),
            written={},
            clock=lambda: NOW,
        )
        super().__init__(cast(Context, ctx))
        self.ends: list[tuple[Key, str, str]] = []

    async def end(self, key: Key, reason: str, message: str) -> Result:
        self.ends.append((key, reason, message))
        return Terminal(reason, message)


async def test_a_run_that_cannot_be_read_is_ended_not_retried() -> None:
    """A Run whose status has the wrong shape is ended (Inconclusive, MalformedRun) at once,
    before any step acts on half of it."""
    controller = Ending(
        {"metadata": {"name": "r1", "uid": "u", "resourceVersion": "7"}, "status": {"conditions": "garbage"}}
    )
    controller.queue.add(RUN)
    key = controller.queue.pop_ready(0.0)
    assert key == RUN
    await controller.process(key)
    assert [(k, reason) for k, reason, _ in controller.ends] == [(RUN, "MalformedRun")]
    assert "status.conditions is not a list of objects" in controller.ends[0][2]


SERVER_ERROR = error_for(500, "boom", "PATCH", "/api/v1/nodes/n1")


def _scripted_passes(outcomes: list[BaseException | None], ran: list[str]) -> list[Any]:
    def one(i: int, outcome: BaseException | None) -> Any:
        async def fleet_pass(ctx: Context) -> None:
            ran.append(f"pass{i}")
            if outcome is not None:
                raise outcome

        fleet_pass.__name__ = f"pass{i}"
        return fleet_pass

    return [one(i, o) for i, o in enumerate(outcomes)]


@pytest.mark.parametrize(
    ("outcomes", "raised"),
    [
        pytest.param([None, None, None], None, id="all pass"),
        pytest.param([KeyError("uid"), None, None], KeyError, id="the first fails: the others still run"),
        pytest.param([None, SERVER_ERROR, ValueError("x")], type(SERVER_ERROR), id="the first failure raised"),
    ],
)
async def test_each_fleet_pass_runs_whatever_the_ones_before_it_raised(
    outcomes: list[BaseException | None], raised: type[BaseException] | None
) -> None:
    ran: list[str] = []
    passes = _scripted_passes(outcomes, ran)
    if raised is None:
        await each_pass(cast(Context, None), passes)
    else:
        with pytest.raises(raised):
            await each_pass(cast(Context, None), passes)
    assert ran == [f"pass{i}" for i in range(len(outcomes))]


async def test_a_fatal_error_stops_the_fleet_passes_at_once() -> None:
    ran: list[str] = []
    with pytest.raises(NotLeader):
        await each_pass(cast(Context, None), _scripted_passes([NotLeader("lost"), None], ran))
    assert ran == ["pass0"]


async def test_an_unparsable_ledger_stops_no_other_fleet_pass() -> None:
    """Issue 42 M-B: the re-assertion of Node projections and retention run even when the
    ledger pass cannot read the ledger."""
    ran: list[str] = []
    with pytest.raises(LedgerError):
        await each_pass(cast(Context, None), _scripted_passes([LedgerError("malformed"), None, None], ran))
    assert ran == ["pass0", "pass1", "pass2"]


async def test_a_cancelled_error_from_inside_one_reconcile_is_that_keys_failure_only() -> None:
    """A CancelledError raised inside a reconcile while the loop itself is not being cancelled
    (an awaited future cancelled by someone else) is that object's failure, backed off like
    any other: it must not end the loop (which restarts the term and reaches the same key
    first again, so the keys after it are never reconciled)."""
    clock = Clock()
    controller = Scripted([asyncio.CancelledError(), Done(), Done()], clock)
    controller.queue.add(RUN)
    controller.queue.add(Key(Kind.RUN, "r2"))
    first = controller.queue.pop_ready(clock.now)
    await controller.process(first)  # type: ignore[arg-type]
    assert not controller.queue.processing()
    assert controller.queue.pop_ready(clock.now) == Key(Kind.RUN, "r2"), "the next key is processed at once"
    assert controller.queue.failures(RUN) == 1, "the key is retried with backoff"
    assert controller.queue.next_deadline() == pytest.approx(1.0)


async def test_cancelling_the_loop_still_cancels_a_reconcile_in_flight() -> None:
    started = asyncio.Event()

    class Hanging(Scripted):
        async def reconcile(self, key: Key, *, resync: bool) -> Result:
            started.set()
            await asyncio.Event().wait()
            return Done()

    controller = Hanging([], Clock())
    controller.queue.add(RUN)
    key = controller.queue.pop_ready(0.0)
    task = asyncio.create_task(controller.process(key))  # type: ignore[arg-type]
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not controller.queue.processing()
    assert controller.queue.failures(RUN) == 0


async def test_a_cancelled_error_while_ending_an_object_is_retried_not_the_loops_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same from inside the ending of a structurally bad object (its status write)."""

    async def cancelled(*_: object) -> Any:
        raise asyncio.CancelledError

    class Ending(Scripted):
        end = Controller.end  # the real ending, its write scripted below

    monkeypatch.setattr("controller.process.loop.end_profile", cancelled)
    clock = Clock()
    controller = Ending([TerminalError("MalformedProfile", "bad"), Done()], clock)
    controller.queue.add(RUN)
    controller.queue.add(Key(Kind.RUN, "r2"))
    await controller.process(controller.queue.pop_ready(clock.now))  # type: ignore[arg-type]
    assert controller.queue.pop_ready(clock.now) == Key(Kind.RUN, "r2"), "the next key is processed at once"
    assert controller.queue.failures(RUN) == 1, "ending it is tried again with backoff"
