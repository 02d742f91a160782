"""shared/conditions.py ``set_condition`` (as the controller uses it on profiles and Runs):
transition time kept while the status is unchanged, observedGeneration, bounded message."""

from datetime import UTC, datetime
from typing import Any

import pytest

from shared.conditions import MAX_MESSAGE, condition, is_true, set_condition

EARLIER = "2025-01-01T00:00:00Z"
NOW = datetime(2025, 3, 1, 12, 30, 45, 999_999, tzinfo=UTC)
NOW_TEXT = "2025-03-01T12:30:45Z"


def _ready(status: str, when: str | None = EARLIER, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "Ready", "status": status, "reason": "Old", "message": "old", **extra}
    if when is not None:
        body["lastTransitionTime"] = when
    return body


@pytest.mark.parametrize(
    ("existing", "status", "transition"),
    [
        pytest.param([], True, NOW_TEXT, id="new condition: now"),
        pytest.param([_ready("True")], True, EARLIER, id="status unchanged: transition time kept"),
        pytest.param([_ready("False")], False, EARLIER, id="unchanged False: transition time kept"),
        pytest.param([_ready("False")], True, NOW_TEXT, id="False to True: now"),
        pytest.param([_ready("True")], False, NOW_TEXT, id="True to False: now"),
        pytest.param([_ready("Unknown")], "Unknown", EARLIER, id="string status unchanged: kept"),
        pytest.param([_ready("Unknown")], True, NOW_TEXT, id="Unknown to True: now"),
        pytest.param([_ready("True", when=None)], True, NOW_TEXT, id="unchanged but no previous time: now"),
        pytest.param([_ready("True", when="")], True, NOW_TEXT, id="unchanged but empty previous time: now"),
    ],
)
def test_transition_time(existing: list[dict[str, Any]], status: bool | str, transition: str) -> None:
    result = set_condition(
        existing, type_="Ready", status=status, reason="New", message="new", generation=None, now=NOW
    )
    ready = condition(result, "Ready")
    assert ready is not None
    assert ready["lastTransitionTime"] == transition
    assert ready["status"] == (status if isinstance(status, str) else str(status))
    assert (ready["reason"], ready["message"]) == ("New", "new")


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        pytest.param(4, {"observedGeneration": 4}, id="generation recorded"),
        pytest.param(0, {"observedGeneration": 0}, id="generation zero is recorded"),
        pytest.param(None, {}, id="no generation: no observedGeneration"),
    ],
)
def test_observed_generation(generation: int | None, expected: dict[str, int]) -> None:
    result = set_condition([], type_="Ready", status=True, reason="R", message="m", generation=generation, now=NOW)
    assert result == [
        {"type": "Ready", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": NOW_TEXT, **expected}
    ]


def test_stale_observed_generation_is_dropped() -> None:
    existing = [_ready("True", observedGeneration=2)]
    result = set_condition(existing, type_="Ready", status=True, reason="R", message="m", generation=None, now=NOW)
    assert "observedGeneration" not in result[0]


@pytest.mark.parametrize(
    ("length", "expected_length", "truncated"),
    [
        pytest.param(0, 0, False, id="empty message"),
        pytest.param(MAX_MESSAGE - 1, MAX_MESSAGE - 1, False, id="1023 chars kept"),
        pytest.param(MAX_MESSAGE, MAX_MESSAGE, False, id="exactly 1024 chars kept"),
        pytest.param(MAX_MESSAGE + 1, MAX_MESSAGE, True, id="1025 chars truncated to 1024"),
        pytest.param(100_000, MAX_MESSAGE, True, id="a huge message truncated to 1024"),
    ],
)
def test_message_truncation(length: int, expected_length: int, truncated: bool) -> None:
    message = "".join(chr(ord("a") + i % 26) for i in range(length))
    result = set_condition([], type_="Ready", status=True, reason="R", message=message, generation=1, now=NOW)
    text = result[0]["message"]
    assert MAX_MESSAGE == 1024
    assert len(text) == expected_length
    if truncated:
        assert text == message[: MAX_MESSAGE - 3] + "..."
    else:
        assert text == message


def test_other_conditions_are_preserved_and_not_aliased() -> None:
    admissible = {"type": "Admissible", "status": "False", "reason": "X", "message": "y", "lastTransitionTime": EARLIER}
    other = {"type": "Custom", "status": "True", "reason": "Z", "message": "", "lastTransitionTime": EARLIER}
    existing = [admissible, _ready("False"), other]
    result = set_condition(existing, type_="Ready", status=True, reason="R", message="m", generation=5, now=NOW)
    assert [c["type"] for c in result] == ["Admissible", "Custom", "Ready"]
    assert result[0] == admissible
    assert result[1] == other
    assert result[0] is not admissible
    # The input is not modified.
    assert existing[1] == _ready("False")
    assert len(existing) == 3


def test_set_replaces_rather_than_duplicates() -> None:
    once = set_condition([], type_="Ready", status=False, reason="A", message="a", generation=1, now=NOW)
    twice = set_condition(once, type_="Ready", status=False, reason="B", message="b", generation=2, now=NOW)
    assert len(twice) == 1
    assert twice[0]["reason"] == "B"
    assert twice[0]["observedGeneration"] == 2


def test_condition_and_is_true() -> None:
    conditions = [_ready("True"), {"type": "Admissible", "status": "False"}]
    assert condition(conditions, "Ready") == conditions[0]
    assert condition(conditions, "Missing") is None
    assert is_true(conditions, "Ready") is True
    assert is_true(conditions, "Admissible") is False
    assert is_true(conditions, "Missing") is False
