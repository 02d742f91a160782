"""controller/leader.py ``may_acquire``: whether a Lease may be taken now."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.leader import may_acquire

ME = "controller-a"
NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def _micro(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease(holder: str | None, renewed: datetime | None, duration: int | None = 15) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed is not None:
        spec["renewTime"] = _micro(renewed)
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {"metadata": {"name": "signal-controller", "resourceVersion": "3"}, "spec": spec}


@pytest.mark.parametrize(
    ("lease", "expected"),
    [
        pytest.param(None, True, id="no lease yet"),
        pytest.param(_lease(ME, NOW), True, id="own fresh lease (renewal)"),
        pytest.param(_lease(ME, NOW - timedelta(hours=1)), True, id="own expired lease"),
        pytest.param(_lease("", NOW), True, id="empty holder (released lease)"),
        pytest.param(_lease(None, NOW), True, id="no holder at all"),
        pytest.param({"metadata": {}}, True, id="lease without spec"),
        pytest.param({"metadata": {}, "spec": None}, True, id="lease with null spec"),
        pytest.param(_lease("controller-b", NOW), False, id="foreign lease renewed just now"),
        pytest.param(_lease("controller-b", NOW - timedelta(seconds=14)), False, id="foreign lease 14s of 15s old"),
        pytest.param(
            _lease("controller-b", NOW - timedelta(seconds=15)),
            False,
            id="foreign lease exactly at expiry is still held",
        ),
        pytest.param(
            _lease("controller-b", NOW - timedelta(seconds=15, microseconds=1)),
            True,
            id="foreign lease a microsecond past expiry",
        ),
        pytest.param(_lease("controller-b", NOW - timedelta(minutes=5)), True, id="foreign lease long expired"),
        pytest.param(
            _lease("controller-b", NOW - timedelta(seconds=50), duration=60),
            False,
            id="foreign lease within its own longer duration",
        ),
        pytest.param(
            _lease("controller-b", NOW - timedelta(seconds=20), duration=None),
            True,
            id="missing duration defaults to 15s: expired after 20s",
        ),
        pytest.param(
            _lease("controller-b", NOW - timedelta(seconds=10), duration=None),
            False,
            id="missing duration defaults to 15s: held after 10s",
        ),
        pytest.param(_lease("controller-b", None), True, id="foreign lease without renewTime"),
        pytest.param(
            {"spec": {"holderIdentity": "controller-b", "renewTime": None}}, True, id="foreign lease renewTime null"
        ),
        pytest.param(
            _lease("controller-b", NOW + timedelta(seconds=30)),
            False,
            id="foreign lease renewed in the future (clock skew) is held",
        ),
    ],
)
def test_may_acquire(lease: dict[str, Any] | None, expected: bool) -> None:
    assert may_acquire(lease, ME, NOW) is expected


def test_renew_time_without_fraction_is_accepted() -> None:
    lease = {"spec": {"holderIdentity": "controller-b", "renewTime": "2025-03-01T11:59:55Z"}}
    assert may_acquire(lease, ME, NOW) is False
    assert may_acquire(lease, ME, NOW + timedelta(seconds=11)) is True


def test_identity_must_match_exactly() -> None:
    assert may_acquire(_lease("controller-a-2", NOW), ME, NOW) is False
