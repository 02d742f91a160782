"""Freshness windows and results whose profile is gone (portal/freshness.py): the window
comes from the profile, and without a profile a result the window would decide is Unknown,
never judged against a default."""

from datetime import timedelta
from typing import Any

import pytest

from portal.freshness import PROFILE_MISSING, judged
from shared.classify import freshness_window
from shared.envelope import State, ValidationResult, derive
from tests.unit.test_envelope_builders import NOW, accepted, evidence, make_run, read

Obj = dict[str, Any]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"freshness": "2h", "recurrence": {"interval": "5h"}}, timedelta(hours=2), id="freshness first"),
        pytest.param({"recurrence": {"interval": "5h"}}, timedelta(hours=5), id="else the recurrence interval"),
        pytest.param({}, timedelta(hours=168), id="else the default"),
        pytest.param({"freshness": "nonsense"}, timedelta(hours=168), id="unreadable counts as absent"),
        pytest.param({"freshness": "0s"}, timedelta(hours=168), id="zero counts as absent"),
        pytest.param({"recurrence": "5h"}, timedelta(hours=168), id="a recurrence that is not an object"),
    ],
)
def test_the_window_comes_from_the_profile(spec: Obj, expected: timedelta) -> None:
    assert freshness_window(spec) == expected


def _result(verdicts: dict[int, str] | None = None) -> ValidationResult:
    run = make_run(participants=2)
    done, cm, _, digest = accepted(run, [evidence(run, verdicts=verdicts)])
    return derive(done, read(done, cm, digest), cluster="test", observed_at=NOW)[-1]


@pytest.mark.parametrize(
    ("result", "replaced", "expected"),
    [
        pytest.param(_result(), False, (State.UNKNOWN, PROFILE_MISSING), id="a pass is Unknown, however old"),
        pytest.param(_result({1: "Fail"}), False, (State.UNKNOWN, PROFILE_MISSING), id="so is a failure"),
        pytest.param(_result(), True, (State.UNKNOWN, "NodeReplaced"), id="a state the window does not decide stays"),
    ],
)
def test_without_its_profile_a_result_the_window_decides_is_unknown(
    result: ValidationResult, replaced: bool, expected: tuple[State, str]
) -> None:
    uid = "uid-replaced" if replaced else result.target.uid
    final = judged(result, current_node_uid=uid, now=NOW + timedelta(days=400), window=None)
    assert (final.state, final.reason) == expected, final.message
    if final.reason == PROFILE_MISSING:
        assert result.check.profile in final.message
        assert "recreate the profile" in final.message


def test_with_its_profile_a_result_is_classified_against_the_window() -> None:
    result = _result()
    uid = result.target.uid
    assert judged(result, current_node_uid=uid, now=NOW, window=timedelta(hours=1)).state == State.PASSED
    old = judged(result, current_node_uid=uid, now=NOW + timedelta(hours=2), window=timedelta(hours=1))
    assert (old.state, old.reason) == (State.STALE, "OlderThanWindow")
