"""Leader election with a coordination.k8s.io Lease (compare-and-swap on resourceVersion),
which cannot fail silently.

* **Expiry on the local monotonic clock.** Another holder's Lease counts as expired only once
  this replica has seen the same record, unchanged, for ``leaseDurationSeconds`` of its own
  monotonic clock (as client-go does): the holder's ``renewTime`` is never compared with the
  local wall clock, so clock skew cannot steal a live Lease. The holder's duration is honoured
  up to this replica's own configured one, never beyond (``held_for``).
* **Writes stop at once.** ``Leadership`` allows writes only while the last successful renewal
  was *sent* less than ``renew_deadline`` ago (``renew_deadline < duration``, so the other
  replica cannot take the Lease while this one may still write) and the renewal task is
  alive. The controller's gateway calls ``Leadership.guard`` before every write, and again
  once its credentials and a connection are in hand, right before it is sent; when the
  renewal task ends, for any reason, ``lost`` is set and the process stops.

Leadership alone does not fence writes against a paused leader: admission is additionally
fenced by the ledger (see ledger.py). Pure: ``observe``, ``may_acquire``,
``Leadership.may_write``; I/O: ``LeaderElector``."""

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from controller.reconcile.state import NotLeader, log
from kubeio import testhooks
from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import AlreadyExists, ApiError, Conflict, NotFound

LEASE_NAME = "signal-controller"
DEFAULT_DURATION = 15


def _micro(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record(lease: Obj | None) -> tuple[Any, ...] | None:
    """What identifies one version of the Lease's holding (changes on every renewal)."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    meta = lease.get("metadata") or {}
    return (
        spec.get("holderIdentity"),
        spec.get("renewTime"),
        spec.get("acquireTime"),
        spec.get("leaseDurationSeconds"),
        spec.get("leaseTransitions"),
        meta.get("resourceVersion"),
    )


@dataclass(frozen=True)
class Observed:
    """The Lease record last seen and when (local monotonic seconds) it was first seen."""

    record: tuple[Any, ...] | None
    at: float


def observe(previous: Observed | None, lease: Obj | None, now: float) -> Observed:
    """Pure: keep the first-seen time while the record is unchanged, restart it on a change."""
    current = record(lease)
    if previous is not None and previous.record == current:
        return previous
    return Observed(current, now)


def held_for(lease: Obj, own_duration: int = DEFAULT_DURATION) -> int:
    """Pure: how long another holder's unchanged record keeps the Lease: its own
    ``leaseDurationSeconds``, but never longer than this replica's configured duration (the
    Lease is a plain object: whoever can write it could otherwise set 2147483647 and park
    every replica for ever, issue 42 M-B). A missing, zero or unreadable value counts as ours."""
    raw = (lease.get("spec") or {}).get("leaseDurationSeconds")
    try:
        claimed = int(raw) if raw is not None else own_duration
    except (TypeError, ValueError):
        claimed = own_duration
    if claimed <= 0:
        claimed = own_duration
    return min(claimed, own_duration)


def may_acquire(
    lease: Obj | None, identity: str, observed: Observed | None, now: float, *, own_duration: int = DEFAULT_DURATION
) -> bool:
    """Pure: a missing, released or own Lease may be taken; another holder's only once this
    replica has seen its record unchanged for longer than its duration, at most
    ``own_duration`` (``held_for``; ``now`` and ``observed.at`` on the same monotonic clock)."""
    if lease is None:
        return True
    spec = lease.get("spec") or {}
    if spec.get("holderIdentity") in (None, "", identity):
        return True
    if observed is None or observed.record != record(lease):
        return False
    return now - observed.at > held_for(lease, own_duration)


class LeaseLost(NotLeader):
    """A write refused because this replica's leadership term has ended or lapsed."""


class Leadership:
    """One term of leadership: whether this replica may write now. ``renewed(at)`` records a
    successful acquire or renewal whose request was sent at monotonic ``at``; ``lose`` ends
    the term for good (a new term starts with a new ``Leadership``)."""

    def __init__(self, renew_deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.renew_deadline = renew_deadline
        self.clock = clock
        self.renewed_at: float | None = None
        self.lost = asyncio.Event()
        self.reason = ""

    def renewed(self, at: float) -> None:
        if not self.lost.is_set():
            self.renewed_at = at if self.renewed_at is None else max(self.renewed_at, at)

    def lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.reason = reason
            self.lost.set()

    def may_write(self, now: float) -> bool:
        return not self.lost.is_set() and self.renewed_at is not None and now < self.renewed_at + self.renew_deadline

    def guard(self, method: str, path: str) -> None:
        """The gateway's write guard: refuse every write unless leadership is current."""
        if not self.may_write(self.clock()):
            why = self.reason or "the Lease was not renewed within the renew deadline"
            raise LeaseLost(f"refusing {method} {path}: not the leader ({why})")


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        duration: int = DEFAULT_DURATION,
        *,
        renew_deadline: float | None = None,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.identity = identity
        self.duration = duration
        self.retry_period = retry_period
        self.clock = clock
        self.path = resource_path("coordination.k8s.io/v1", "leases", namespace, LEASE_NAME)
        self.renew_deadline = renew_deadline if renew_deadline is not None else duration * 2 / 3
        self.leadership = Leadership(self.renew_deadline, clock)
        self.observed: Observed | None = None
        self.renewals = 0

    def new_term(self) -> Leadership:
        """Start a new term (after one was lost): writes stay refused until it is acquired."""
        self.leadership.lose("a new term started")
        self.leadership = Leadership(self.renew_deadline, self.clock)
        self.renewals = 0
        return self.leadership

    def guard(self, method: str, path: str) -> None:
        """The gateway's write guard, for whichever term is current."""
        self.leadership.guard(method, path)

    def _spec(self, lease: Obj | None, now: datetime) -> dict[str, Any]:
        spec = (lease or {}).get("spec") or {}
        transitions = int(spec.get("leaseTransitions") or 0)
        if spec.get("holderIdentity") != self.identity:
            transitions += 1
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "acquireTime": spec.get("acquireTime") if spec.get("holderIdentity") == self.identity else _micro(now),
            "renewTime": _micro(now),
            "leaseTransitions": transitions,
        }

    async def try_acquire(self) -> bool:
        """One attempt to take or renew the Lease. Raises ApiError when the API server cannot
        be asked (the caller decides how long that may last)."""
        sent = self.clock()
        lease = await self.kube.get_or_none(self.path)
        self.observed = observe(self.observed, lease, self.clock())
        if not may_acquire(lease, self.identity, self.observed, self.clock(), own_duration=self.duration):
            return False
        body: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": self.namespace},
            "spec": self._spec(lease, datetime.now(UTC)),
        }
        try:
            if lease is None:
                written = await self.kube.create(
                    resource_path("coordination.k8s.io/v1", "leases", self.namespace), body
                )
            else:
                body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
                written = await self.kube.replace(self.path, body)
        except (Conflict, AlreadyExists, NotFound):
            return False
        self.observed = observe(self.observed, written, self.clock())
        self.leadership.renewed(sent)
        return True

    async def release(self) -> bool:
        """On a clean stop, hand the Lease back (holder emptied, compare-and-swap) so that
        another replica may take it at once instead of waiting for it to expire. Writes are
        refused from here on. False when it was not ours (or could not be reached)."""
        self.leadership.lose("the Lease was released")
        try:
            lease = await self.kube.get_or_none(self.path)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            lease["spec"] = {**lease["spec"], "holderIdentity": "", "renewTime": _micro(datetime.now(UTC))}
            await self.kube.replace(self.path, lease)
        except ApiError as exc:
            log.warning("could not release the Lease", identity=self.identity, error=str(exc)[:300])
            return False
        log.info("lease released", identity=self.identity)
        return True

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        while True:
            try:
                if await self.try_acquire():
                    break
            except ApiError as exc:
                log.warning("cannot reach the Lease; retrying", identity=self.identity, error=str(exc)[:300])
            await asyncio.sleep(self.retry_period)
        log.info("leadership acquired", identity=self.identity)

    async def keep(self) -> None:
        """Renew every ``retry_period`` until a renewal is refused (another replica holds the
        Lease) or none succeeded within the renew deadline (the API server could not be
        reached); then, and whenever this task ends, even by an exception, the term is lost
        and every write is refused."""
        fault = testhooks.current().renewal_dies_after
        try:
            while True:
                await asyncio.sleep(self.retry_period)
                if fault and self.renewals >= fault:
                    raise RuntimeError("fault injected by the test hooks: the renewal task dies")
                renewed = self.leadership.renewed_at or 0.0
                remaining = renewed + self.leadership.renew_deadline - self.clock()
                if remaining <= 0:
                    self.leadership.lose("no renewal succeeded within the renew deadline")
                    return
                try:
                    async with asyncio.timeout(remaining):
                        ok = await self.try_acquire()
                except (ApiError, TimeoutError) as exc:
                    log.warning("lease renewal failed; retrying", identity=self.identity, error=str(exc)[:300])
                    continue
                if not ok:
                    self.leadership.lose("another replica holds the Lease")
                    return
                self.renewals += 1
        except asyncio.CancelledError:
            self.leadership.lose("the controller is stopping")
            raise
        finally:
            self.leadership.lose("the renewal task ended")
            log.warning("leadership ended", identity=self.identity, reason=self.leadership.reason)
