"""Issue 13, acceptance 3: leader election that cannot fail silently, on the real API server.

* In-process electors with different identities: one acquires, renews, and the other never
  takes the Lease while it is renewed; when the renewal task is cancelled or dies, the
  leader refuses every write at once (a real write is refused before it is sent), and the
  other takes the Lease only once it has seen it unchanged for its duration; a Lease handed
  back on a clean stop is taken at once.
* Two controller processes with different identities: the leader's renewal task is made to
  die; from each process's own log of the requests it sent, the old leader's last write
  precedes both its renew deadline and the new leader's first write, and the new leader
  writes only after the Lease could have expired."""

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from controller.process.leader import LeaderElector, Leadership, LeaseLost
from controller.reconcile.state import NotLeader
from kubeio import testhooks
from kubeio.client import Kube, resource_path
from localcluster import hooked, identities
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient
from tests.controller_support import ControllerProcess, World, eventually, install_rbac, profile_body

pytestmark = pytest.mark.timeout(300)
DURATION = 3
RENEW_DEADLINE = 2.0
RETRY = 0.25
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


async def _kube(cluster: LocalCluster, namespace: str, path: Path) -> Kube:
    sa = await identities.service_account(cluster.plane, namespace, "signal-controller", create=False)
    return await Kube.connect(kubeconfig=str(sa.kubeconfig(path, namespace)), field_manager="signal-controller")


def _elector(kube: Kube, namespace: str, identity: str) -> LeaderElector:
    return LeaderElector(kube, namespace, identity, DURATION, renew_deadline=RENEW_DEADLINE, retry_period=RETRY)


async def test_acquire_renew_loss_and_takeover(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    await install_rbac(admin, namespace)
    kube_a, kube_b = await _kube(cluster, namespace, tmp_path / "a"), await _kube(cluster, namespace, tmp_path / "b")
    a, b = _elector(kube_a, namespace, "replica-a"), _elector(kube_b, namespace, "replica-b")
    work_a = await _kube(cluster, namespace, tmp_path / "work")  # A's reconcile connection, guarded
    work_a.write_guard = a.guard
    try:
        assert await a.try_acquire()
        assert a.leadership.may_write(time.monotonic())
        assert not await b.try_acquire()
        keeper = asyncio.create_task(a.keep())
        # While A renews, B never gets the Lease, however long it tries (three durations).
        until = time.monotonic() + 3 * DURATION
        while time.monotonic() < until:
            assert not await b.try_acquire(), "B took a Lease that A keeps renewing"
            assert a.leadership.may_write(time.monotonic())
            await asyncio.sleep(RETRY)  # B's polling period, as its elector's
        assert a.renewals >= 3 * DURATION / RETRY / 2

        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
        stopped = time.monotonic()
        last_renewal = a.leadership.renewed_at
        assert last_renewal is not None
        assert a.leadership.lost.is_set()
        with pytest.raises(NotLeader):
            await work_a.create(resource_path("v1", "configmaps", namespace), {"metadata": {"name": "late-write"}})
        with pytest.raises(ApiError) as missing:
            await admin.get(resource_path("v1", "configmaps", namespace, "late-write"))
        assert missing.value.status == 404, "the refused write reached the API server"

        await asyncio.wait_for(b.acquire(), 5 * DURATION)
        took = time.monotonic()
        assert stopped < last_renewal + RENEW_DEADLINE < last_renewal + DURATION
        assert took - last_renewal >= DURATION, "B took the Lease before it could have expired"
        assert b.leadership.may_write(time.monotonic())

        # A clean stop hands the Lease back: the other replica takes it at once.
        assert await b.release()
        assert not b.leadership.may_write(time.monotonic())
        a.new_term()
        assert await a.try_acquire(), "a released Lease is taken at once, without waiting for it to expire"
    finally:
        for kube in (kube_a, kube_b, work_a):
            await kube.close()


async def test_a_renewal_task_that_dies_stops_every_write(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    await install_rbac(admin, namespace)
    lease = await _kube(cluster, namespace, tmp_path / "a")
    elector = _elector(lease, namespace, "replica-a")
    kube = await _kube(cluster, namespace, tmp_path / "work")  # the reconcile connection, guarded
    kube.write_guard = elector.guard
    previous = testhooks.arm(testhooks.Hooks(renewal_dies_after=2))
    try:
        await elector.acquire()
        await kube.create(resource_path("v1", "configmaps", namespace), {"metadata": {"name": "while-leading"}})
        keeper = asyncio.create_task(elector.keep())
        await asyncio.wait_for(asyncio.gather(keeper, return_exceptions=True), 10 * RETRY + 5)
        assert isinstance(keeper.exception(), RuntimeError)
        assert elector.leadership.lost.is_set()
        assert time.monotonic() < (elector.leadership.renewed_at or 0) + RENEW_DEADLINE, "stopped before the deadline"
        with pytest.raises(NotLeader, match="the renewal task ended"):
            await kube.create(resource_path("v1", "configmaps", namespace), {"metadata": {"name": "after-death"}})
        names = {
            c["metadata"]["name"] for c in (await admin.get(resource_path("v1", "configmaps", namespace)))["items"]
        }
        assert "while-leading" in names
        assert "after-death" not in names
    finally:
        testhooks.arm(previous)
        await kube.close()
        await lease.close()


async def test_a_lease_claiming_a_huge_duration_parks_no_replica(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Issue 42 M-B: one write of the Lease (by anyone RBAC lets write Leases, where the
    signal-identities policy is not in force) with leaseDurationSeconds 2147483647 must not
    park every replica: another holder's duration is honoured up to the replica's own."""
    await install_rbac(admin, namespace)
    ghost = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "signal-controller", "namespace": namespace},
        "spec": {
            "holderIdentity": "ghost",
            "leaseDurationSeconds": 2147483647,
            "renewTime": "2026-01-01T00:00:00.000000Z",
        },
    }
    await admin.create(resource_path("coordination.k8s.io/v1", "leases", namespace), ghost)
    kube = await _kube(cluster, namespace, tmp_path / "a")
    elector = _elector(kube, namespace, "replica-a")
    try:
        began = time.monotonic()
        await asyncio.wait_for(elector.acquire(), 5 * DURATION)
        assert time.monotonic() - began > DURATION, "took the ghost's Lease before it could have expired"
        lease = await admin.get(resource_path("coordination.k8s.io/v1", "leases", namespace, "signal-controller"))
        assert lease["spec"]["holderIdentity"] == "replica-a"
        assert lease["spec"]["leaseDurationSeconds"] == DURATION
    finally:
        await kube.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _SlowCredentials:
    """An exec credential plugin (or any wait before the request goes out: a free connection,
    a slow connect) that outlasts the term: the clock has passed the renew deadline by the
    time the token comes back."""

    def __init__(self, inner: Any, clock: _Clock, late: float) -> None:
        self.inner, self.clock, self.late = inner, clock, late

    async def token(self) -> str | None:
        self.clock.now += self.late
        token: str | None = await self.inner.token()
        return token


async def test_a_write_that_waited_past_the_renew_deadline_is_not_sent(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """The guard passed when the write started; the term lapsed while it waited for its
    credentials (or a connection): it must not reach the API server, since another replica
    may hold the Lease by the time it would."""
    await install_rbac(admin, namespace)
    clock = _Clock()
    term = Leadership(RENEW_DEADLINE, clock)
    term.renewed(clock.now)
    kube = await _kube(cluster, namespace, tmp_path / "work")
    kube.write_guard = term.guard
    kube.endpoint = dataclasses.replace(
        kube.endpoint, credentials=_SlowCredentials(kube.endpoint.credentials, clock, 2 * RENEW_DEADLINE)
    )
    try:
        with pytest.raises(LeaseLost):
            await kube.create(resource_path("v1", "configmaps", namespace), {"metadata": {"name": "late-send"}})
        with pytest.raises(ApiError) as missing:
            await admin.get(resource_path("v1", "configmaps", namespace, "late-send"))
        assert missing.value.status == 404, "a write sent after the term lapsed reached the API server"
        clock.now -= 4 * RENEW_DEADLINE  # a term still current all along: the write goes out
        kube.endpoint = dataclasses.replace(kube.endpoint, credentials=kube.endpoint.credentials.inner)  # type: ignore[union-attr]
        await kube.create(resource_path("v1", "configmaps", namespace), {"metadata": {"name": "in-time"}})
        await admin.get(resource_path("v1", "configmaps", namespace, "in-time"))
    finally:
        await kube.close()


def _requests(log: Path) -> list[tuple[float, str, str]]:
    rows = []
    for line in log.read_text().splitlines():
        stamp, verb, path = line.split("\t")
        rows.append((float(stamp), verb, path))
    return rows


async def test_two_replicas_compete_and_a_dead_renewal_stops_the_leader_first(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    logs = {name: tmp_path / f"requests-{name}.log" for name in ("a", "b")}
    replicas = {
        name: ControllerProcess(cluster, namespace, tmp_path, resync=1.0, identity=f"replica-{name}")
        for name in ("a", "b")
    }
    first, second = f"{namespace}-first", f"{namespace}-second"
    await world.add_nodes(world.node_names(2, "f"), requested_for=first)
    await world.add_profile(profile_body(first, namespace, 2))
    await world.add_profile(profile_body(second, namespace, 2))
    await replicas["a"].start(SIGNAL_REQUEST_LOG=str(logs["a"]), **{hooked.RENEWAL_FAULT_ENV: "4"})
    try:
        await eventually(world.runs, timeout=60, what=f"replica a admitting\n{replicas['a'].logs()}")
        await replicas["b"].start(SIGNAL_REQUEST_LOG=str(logs["b"]))
        code = await replicas["a"].wait_exit(60)
        assert code == 1, replicas["a"].logs()
        await world.add_nodes(world.node_names(2, "s"), requested_for=second)

        async def two_runs() -> bool:
            runs = await world.runs()
            return len(runs) == 2 and all((r.get("status") or {}).get("phase") == "Running" for r in runs)

        await eventually(two_runs, timeout=90, what=f"replica b admitting\n{replicas['b'].logs()}")
    finally:
        for replica in replicas.values():
            replica.stop()
        await world.cleanup()

    a, b = _requests(logs["a"]), _requests(logs["b"])
    a_lease = [t for t, verb, path in a if verb in WRITES and "/leases" in path]
    a_writes = [t for t, verb, path in a if verb in WRITES and "/leases" not in path]
    b_writes = [t for t, verb, path in b if verb in WRITES and "/leases" not in path]
    assert a_lease, "replica a never held the Lease"
    assert a_writes, "replica a never wrote as the leader"
    assert b_writes, "replica b never wrote after taking over"
    last_renewal = max(a_lease)
    assert max(a_writes) < last_renewal + 10.0, "a wrote past its renew deadline"
    assert max(a_writes) < min(b_writes), "both replicas wrote at the same time"
    assert min(b_writes) >= last_renewal + 15.0, "b wrote before a's Lease could have expired"
