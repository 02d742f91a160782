"""A small work queue of object keys, in the shape of client-go's workqueue and
controller-runtime's reconcile results (written here, not copied).

* **Level-based and deduplicated.** A key is queued at most once; adding a key that is being
  processed marks it dirty, and it is queued again when its processing ends, so the same key
  is never processed twice at once and a change seen meanwhile is never lost.
* **Delays.** ``add_after`` queues a key once a delay has passed (the earliest wins).
* **Rate limits.** ``add_rate_limited`` waits the larger of a per-key exponential backoff
  with jitter (reset by ``forget``) and an overall token bucket, so a burst of failures
  cannot make a hot loop.
* **Results.** A reconcile returns ``Done``, ``RequeueAfter(seconds)`` or ``Terminal``
  (the object is structurally bad and was ended; do not retry until it changes), or raises
  ``TerminalError`` from deep inside to ask for the same.

The queue's bookkeeping is synchronous and takes ``now`` (``pop_ready``, ``next_deadline``)
so it is table-tested without waiting; ``get`` is the thin async wait around it. No I/O; the
controller's loop (controller/process/loop.py) decides what a key means.

Observation: ``on_wait(key, seconds)`` is called when a key is taken, with how long it was
queued (from ``add``, or from its delay falling due, to ``pop_ready``); ``on_retry(key)`` for
each ``add_rate_limited``. The loop sets them to its metrics (controller/reconcile/metrics.py)."""

import asyncio
import contextlib
import heapq
import random
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Done:
    """Converged: nothing to do until something changes."""


@dataclass(frozen=True)
class RequeueAfter:
    """Look again after ``seconds`` (waiting for time, never a sleep inside reconcile).
    ``progress`` False: nothing was reconciled (the cache was behind the controller's own
    write), so a failure streak of the key goes on (its backoff and count are kept)."""

    seconds: float
    progress: bool = True


@dataclass(frozen=True)
class Terminal:
    """The object cannot be reconciled and was ended with a condition and an Event."""

    reason: str
    message: str


Result = Done | RequeueAfter | Terminal


class TerminalError(Exception):
    """Raised from inside a reconcile: the object is structurally bad (unreadable evidence, a
    document of the wrong shape); retrying cannot help. The loop ends the object."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Backoff:
    """Per-key exponential backoff: ``base * factor**(failures-1)`` capped at ``cap``, times a
    jitter factor in ``[1 - jitter, 1 + jitter)``."""

    base: float = 0.5
    factor: float = 2.0
    cap: float = 60.0
    jitter: float = 0.2

    def delay(self, failures: int, rand: float) -> float:
        """Delay before retrying after the ``failures``-th consecutive failure (``rand`` in [0, 1))."""
        if failures <= 0:
            return 0.0
        raw = min(self.cap, self.base * self.factor ** min(failures - 1, 64))
        return raw * (1.0 - self.jitter + 2.0 * self.jitter * rand)


@dataclass
class TokenBucket:
    """An overall limit on rate-limited requeues: ``rate`` per second, bursts of ``burst``.
    ``reserve(now)`` takes one token and says how long to wait for it."""

    rate: float = 10.0
    burst: int = 100
    _tokens: float = field(default=0.0, repr=False)
    _stamp: float | None = field(default=None, repr=False)

    def reserve(self, now: float) -> float:
        if self._stamp is None:
            self._tokens, self._stamp = float(self.burst), now
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        backoff: Backoff | None = None,
        bucket: TokenBucket | None = None,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self.backoff = backoff or Backoff()
        self.bucket = bucket or TokenBucket()
        self.clock = clock
        self.rand = rand or random.Random().random
        self._queue: deque[K] = deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._waiting: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._seq = 0
        self._failures: dict[K, int] = {}
        self._since: dict[K, float] = {}
        """When each queued key was queued (for ``on_wait``)."""
        self.on_wait: Callable[[K, float], None] | None = None
        self.on_retry: Callable[[K], None] | None = None
        self._wakeup = asyncio.Event()
        self._closed = False

    # -- adding ------------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue ``key`` now (no-op if already queued; deferred if being processed)."""
        if self._closed:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._waiting.pop(key, None)
        self._enqueue(key, self.clock())
        self._wakeup.set()

    def _enqueue(self, key: K, now: float) -> None:
        self._queued.add(key)
        self._queue.append(key)
        self._since[key] = now

    def add_after(self, key: K, seconds: float) -> None:
        """Queue ``key`` once ``seconds`` have passed; an earlier deadline already set wins."""
        if self._closed:
            return
        if seconds <= 0:
            self.add(key)
            return
        if key in self._queued:
            return
        deadline = self.clock() + seconds
        current = self._waiting.get(key)
        if current is not None and current <= deadline:
            return
        self._waiting[key] = deadline
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, key))
        self._wakeup.set()

    def add_rate_limited(self, key: K, *, at_least: float = 0.0) -> float:
        """Count a failure of ``key`` and queue it after its backoff (and the overall bucket,
        and ``at_least``, e.g. the server's Retry-After). Returns the delay chosen."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        if self.on_retry is not None:
            self.on_retry(key)
        delay = max(self.backoff.delay(failures, self.rand()), self.bucket.reserve(self.clock()), at_least)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """``key`` succeeded: its next failure starts the backoff from the beginning."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    # -- taking ------------------------------------------------------------------------------

    def _promote(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            deadline, _, key = heapq.heappop(self._heap)
            if self._waiting.get(key) != deadline:
                continue  # superseded by an earlier deadline or an immediate add
            del self._waiting[key]
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._queued:
                self._enqueue(key, deadline)

    def pop_ready(self, now: float) -> K | None:
        """The next key to process (marked processing), or None if none is due at ``now``."""
        self._promote(now)
        if not self._queue:
            return None
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        since = self._since.pop(key, now)
        if self.on_wait is not None:
            self.on_wait(key, max(0.0, now - since))
        return key

    def next_deadline(self) -> float | None:
        """When the earliest delayed key falls due (None if none waits)."""
        while self._heap and self._waiting.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def done(self, key: K) -> None:
        """Processing of ``key`` ended; queue it again if it was added meanwhile."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    async def get(self) -> K | None:
        """Wait for the next key; None once the queue is shut down."""
        while not self._closed:
            self._wakeup.clear()
            key = self.pop_ready(self.clock())
            if key is not None:
                return key
            deadline = self.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - self.clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)
        return None

    def shutdown(self) -> None:
        self._closed = True
        self._wakeup.set()

    # -- introspection -----------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys queued now (not counting delayed ones or those being processed)."""
        return len(self._queue)

    def queued(self) -> tuple[K, ...]:
        """The keys queued now, in order (for the depth by kind)."""
        return tuple(self._queue)

    def waiting(self) -> int:
        return len(self._waiting)

    def processing(self) -> frozenset[K]:
        return frozenset(self._processing)
