"""controller/process/leader.py: expiry on the local monotonic clock (``observe``, ``may_acquire``)
and when writes are allowed (``Leadership``). The elector against the real API server is in
tests/integration/test_leader_election.py."""

from typing import Any

import pytest

from controller.process.leader import Leadership, Observed, may_acquire, observe, record
from controller.reconcile.state import NotLeader

ME = "controller-a"


def _lease(holder: str | None, renewed: str = "2025-03-01T12:00:00.000000Z", duration: int | None = 15) -> Any:
    spec: dict[str, Any] = {"renewTime": renewed}
    if holder is not None:
        spec["holderIdentity"] = holder
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {"metadata": {"name": "signal-controller", "resourceVersion": "3"}, "spec": spec}


FOREIGN = _lease("controller-b")
SEEN_AT_100 = Observed(record(FOREIGN), 100.0)


@pytest.mark.parametrize(
    ("lease", "observed", "now", "expected"),
    [
        pytest.param(None, None, 0.0, True, id="no lease yet"),
        pytest.param(_lease(ME), None, 0.0, True, id="own lease (renewal, or a restart of this replica)"),
        pytest.param(_lease(""), None, 0.0, True, id="released lease (empty holder)"),
        pytest.param(_lease(None), None, 0.0, True, id="no holder at all"),
        pytest.param({"metadata": {}}, None, 0.0, True, id="lease without spec"),
        pytest.param(FOREIGN, None, 1e9, False, id="foreign lease never observed before is held"),
        pytest.param(FOREIGN, SEEN_AT_100, 100.0, False, id="foreign lease just observed"),
        pytest.param(FOREIGN, SEEN_AT_100, 115.0, False, id="foreign lease unchanged for exactly its duration"),
        pytest.param(FOREIGN, SEEN_AT_100, 115.001, True, id="foreign lease unchanged past its duration"),
        pytest.param(
            _lease("controller-b", renewed="2025-03-01T12:00:02.000000Z"),
            SEEN_AT_100,
            1000.0,
            False,
            id="foreign lease renewed since it was observed is held",
        ),
        pytest.param(
            _lease("controller-b", renewed="1999-01-01T00:00:00.000000Z"),
            None,
            0.0,
            False,
            id="an ancient renewTime means nothing by itself (no wall-clock comparison)",
        ),
        pytest.param(
            _lease("controller-b", duration=10),
            Observed(record(_lease("controller-b", duration=10)), 100.0),
            110.001,
            True,
            id="the holder's own shorter duration counts",
        ),
        pytest.param(
            _lease("controller-b", duration=None),
            Observed(record(_lease("controller-b", duration=None)), 100.0),
            116.0,
            True,
            id="missing duration defaults to 15s",
        ),
        pytest.param(_lease("controller-a-2"), SEEN_AT_100, 101.0, False, id="identity must match exactly"),
    ],
)
def test_may_acquire(lease: Any, observed: Observed | None, now: float, expected: bool) -> None:
    assert may_acquire(lease, ME, observed, now) is expected


@pytest.mark.parametrize(
    ("duration", "now", "expected"),
    [
        pytest.param(2147483647, 115.0, False, id="a huge duration: held for our own duration"),
        pytest.param(2147483647, 115.001, True, id="a huge duration parks no replica past our own duration"),
        pytest.param(60, 115.001, True, id="a longer duration than ours is capped at ours"),
        pytest.param(0, 100.5, False, id="a zero duration counts as our own (the API server refuses it anyway)"),
    ],
)
def test_another_holders_duration_is_honoured_at_most_up_to_our_own(duration: int, now: float, expected: bool) -> None:
    """Issue 42 M-B: anyone who may write the Lease (a third party with Lease rights, before
    the signal-identities policy) could set leaseDurationSeconds: 2147483647 and park every
    replica for ever; a replica honours at most its own configured duration."""
    lease = _lease("controller-b", duration=duration)
    assert may_acquire(lease, ME, Observed(record(lease), 100.0), now, own_duration=15) is expected


def test_observe_keeps_the_first_sighting_until_the_record_changes() -> None:
    first = observe(None, FOREIGN, 10.0)
    assert first.at == 10.0
    assert observe(first, FOREIGN, 20.0) is first, "an unchanged record keeps its first-seen time"
    renewed = _lease("controller-b", renewed="2025-03-01T12:00:05.000000Z")
    assert observe(first, renewed, 30.0).at == 30.0, "a renewal restarts the clock"
    moved = {**FOREIGN, "metadata": {"resourceVersion": "4"}}
    assert observe(first, moved, 40.0).at == 40.0, "any write to the Lease restarts the clock"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_no_write_before_leadership_was_ever_acquired() -> None:
    clock = Clock()
    leadership = Leadership(10.0, clock)
    assert not leadership.may_write(clock.now)
    with pytest.raises(NotLeader, match="refusing PATCH /x"):
        leadership.guard("PATCH", "/x")


@pytest.mark.parametrize(
    ("elapsed", "allowed"),
    [
        pytest.param(0.0, True, id="just renewed"),
        pytest.param(9.99, True, id="within the renew deadline"),
        pytest.param(10.0, False, id="at the renew deadline"),
        pytest.param(14.0, False, id="past it, before the lease could expire for another replica"),
    ],
)
def test_writes_stop_at_the_renew_deadline(elapsed: float, allowed: bool) -> None:
    clock = Clock()
    leadership = Leadership(10.0, clock)
    leadership.renewed(clock.now)
    clock.now += elapsed
    assert leadership.may_write(clock.now) is allowed


def test_a_lost_leadership_refuses_every_write_at_once_and_for_good() -> None:
    clock = Clock()
    leadership = Leadership(10.0, clock)
    leadership.renewed(clock.now)
    leadership.lose("the renewal task ended")
    assert leadership.lost.is_set()
    with pytest.raises(NotLeader, match="the renewal task ended"):
        leadership.guard("POST", "/api/v1/namespaces/x/configmaps")
    leadership.renewed(clock.now)
    assert not leadership.may_write(clock.now), "a late renewal does not bring leadership back"


def test_renewal_times_only_move_forward() -> None:
    clock = Clock()
    leadership = Leadership(10.0, clock)
    leadership.renewed(1000.0)
    leadership.renewed(995.0)  # a slower, earlier-sent request answered last
    assert leadership.renewed_at == 1000.0
