"""Leader election with a coordination.k8s.io Lease (compare-and-swap on resourceVersion).

Only the leader reconciles. Leadership alone does not fence writes (a paused, deposed leader
may wake up and write): admission is additionally fenced by the ledger (see ledger.py)."""

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from controller.state import log
from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import AlreadyExists, Conflict, NotFound

LEASE_NAME = "signal-controller"


def _micro(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def may_acquire(lease: Obj | None, identity: str, now: datetime) -> bool:
    """Pure: a missing, own, or expired Lease may be taken."""
    if lease is None:
        return True
    spec = lease.get("spec") or {}
    if spec.get("holderIdentity") in (None, "", identity):
        return True
    renewed = _parse(spec.get("renewTime"))
    duration = int(spec.get("leaseDurationSeconds") or 15)
    return renewed is None or renewed + timedelta(seconds=duration) < now


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, identity: str, duration: int = 15) -> None:
        self.kube = kube
        self.namespace = namespace
        self.identity = identity
        self.duration = duration
        self.path = resource_path("coordination.k8s.io/v1", "leases", namespace, LEASE_NAME)

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
        now = datetime.now(UTC)
        lease = await self.kube.get_or_none(self.path)
        if not may_acquire(lease, self.identity, now):
            return False
        body: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": self.namespace},
            "spec": self._spec(lease, now),
        }
        try:
            if lease is None:
                await self.kube.create(resource_path("coordination.k8s.io/v1", "leases", self.namespace), body)
            else:
                body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
                await self.kube.replace(self.path, body)
        except (Conflict, AlreadyExists, NotFound):
            return False
        return True

    async def acquire(self, retry: float = 2.0) -> None:
        while True:
            if await self.try_acquire():
                break
            await asyncio.sleep(retry)
        log.info("leadership acquired", identity=self.identity)

    async def keep(self, lost: asyncio.Event, every: float = 5.0) -> None:
        """Renew until renewal fails; then set ``lost``."""
        while True:
            await asyncio.sleep(every)
            if not await self.try_acquire():
                log.error("leadership lost", identity=self.identity)
                lost.set()
                return
