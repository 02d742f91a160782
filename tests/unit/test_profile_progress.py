"""controller/profiles.py ``progress_only``: which profile status changes may wait (only the
progress figures moved) and which are written at once; ``status_to_compare``: a cached profile
older than the controller's own last status write is compared with that write. Pure."""

from typing import Any

import pytest

from controller.profiles import progress_only, status_to_compare
from controller.requeue import STALE_LIMIT
from controller.state import StatusWrite

Obj = dict[str, Any]


def status(
    eligible: int | None = 3, admissible: str = "False", reason: str = "InsufficientEligibleNodes", **kw: Any
) -> Obj:
    conditions = [
        {"type": "Ready", "status": "True", "reason": "SourceVerified", "message": "ok", "observedGeneration": 1},
        {
            "type": "Admissible",
            "status": admissible,
            "reason": reason,
            "message": f"{eligible} of 64 eligible Nodes requested",
            "observedGeneration": kw.pop("generation", 1),
            "lastTransitionTime": kw.pop("transition", "2026-12-01T00:00:00Z"),
        },
    ]
    body: Obj = {"observedGeneration": 1, "conditions": conditions, **kw}
    if eligible is not None:
        body["eligibleNodes"] = eligible
    return body


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (status(3), status(4), True),  # one more Node requested: only the figures moved
        (status(3), status(3), True),
        (status(None), status(4), False),  # the first figure is written at once
        (status(3), status(None, "True", "Admitting"), False),  # Admissible turned True
        (status(3), status(4, reason="Other"), False),  # another reason
        (status(3), status(4, generation=2), False),  # a new generation observed
        (status(3), status(4, transition="2026-12-01T00:00:09Z"), False),
        (status(3), status(4, observedGeneration=2), False),  # another field changed
    ],
    ids=["count", "same", "first", "admissible", "reason", "generation", "transition", "other-field"],
)
def test_progress_only(old: Obj, new: Obj, expected: bool) -> None:
    assert progress_only(old, new) is expected


def cached(rv: str, uid: str = "u1") -> Obj:
    return {"metadata": {"name": "p", "uid": uid, "resourceVersion": rv}, "status": status(3)}


MINE = StatusWrite("u1", "120", status(None, "True", "Admitting"), at=100.0)


@pytest.mark.parametrize(
    ("raw", "own", "now", "expected"),
    [
        (cached("110"), MINE, 100.5, MINE.status),  # the cache has not seen the write yet
        (cached("120"), MINE, 100.5, status(3)),  # the write itself
        (cached("130"), MINE, 100.5, status(3)),  # newer than the write (someone else's change)
        (cached("110", uid="u2"), MINE, 100.5, status(3)),  # another object of the same name
        (cached("110"), MINE, 100.0 + STALE_LIMIT + 1, status(3)),  # not seen for too long
        (cached("110"), None, 100.5, status(3)),  # no write of this controller
        (cached("x"), MINE, 100.5, MINE.status),  # not a number: any difference counts
    ],
    ids=["older", "same", "newer", "other-uid", "too-long", "none", "opaque"],
)
def test_status_to_compare(raw: Obj, own: StatusWrite | None, now: float, expected: Obj) -> None:
    assert status_to_compare(raw, own, now) == expected
