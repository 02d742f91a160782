"""controller/reconcile/profiles.py ``progress_only``: which profile status changes may wait (only the
progress figures moved) and which are written at once; ``short_and_reported``: when a pass may
skip its reads; ``progress_wait``: how long a progress write waits. Pure."""

from typing import Any

import pytest

from controller.reconcile.profiles import PROGRESS_INTERVAL, progress_only, progress_wait, short_and_reported

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


def _not_ready() -> Obj:
    body = status(3)
    body["conditions"][0]["status"] = "False"
    return body


@pytest.mark.parametrize(
    ("old", "candidates", "expected"),
    [
        pytest.param(status(3), 63, True, id="short and reported: only progress can change"),
        pytest.param(status(3), 64, False, id="a whole group requested: an admission is possible"),
        pytest.param(status(3), 100, False, id="more than a group requested"),
        pytest.param(status(None, "True", "Admitting"), 3, False, id="reported admissible: the flip is written"),
        pytest.param(status(3, reason="Other"), 3, False, id="another reason"),
        pytest.param(_not_ready(), 3, False, id="not Ready: the source is read again"),
        pytest.param({}, 3, False, id="no status yet"),
    ],
)
def test_a_pass_is_held_without_reads_only_when_it_could_change_progress_alone(
    old: Obj, candidates: int, expected: bool
) -> None:
    assert short_and_reported(old, candidates, 64) is expected


@pytest.mark.parametrize(
    ("last_write", "last_admission", "now", "expected"),
    [
        pytest.param(None, None, 100.0, 0.0, id="never written, never admitted: at once"),
        pytest.param(99.0, None, 100.0, PROGRESS_INTERVAL - 1.0, id="written a second ago"),
        pytest.param(90.0, None, 100.0, PROGRESS_INTERVAL - 10.0, id="written long ago: due"),
        pytest.param(None, 99.5, 100.0, PROGRESS_INTERVAL - 0.5, id="admitted half a second ago"),
        pytest.param(90.0, 99.5, 100.0, PROGRESS_INTERVAL - 0.5, id="admitting still: the later time counts"),
        pytest.param(99.5, 90.0, 100.0, PROGRESS_INTERVAL - 0.5, id="written after the last admission"),
    ],
)
def test_progress_waits_after_the_last_write_and_the_last_admission(
    last_write: float | None, last_admission: float | None, now: float, expected: float
) -> None:
    assert progress_wait(last_write, last_admission, now) == pytest.approx(expected)
