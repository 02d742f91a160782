"""controller/profiles.py ``progress_only``: which profile status changes may wait (only the
progress figures moved) and which are written at once. Pure."""

from typing import Any

import pytest

from controller.profiles import progress_only

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
