"""Classification of a validation result (SPEC §6): Passed / Failed / Running / Stale / Unknown.
Pure; no I/O, ``now`` is an argument. Used by the portal for every result it serves.

In this order, first match wins:

1. **Running** while the Run is in progress (Pending, Admitted, Running) for that Node.
2. **Unknown** unless the evidence chain verified (missing, malformed, unsupported schema
   version, digest mismatch, unauthorized, incomplete target list, foreign, inconsistent).
3. **Unknown** if the target Node is gone (``NodeMissing``) or was replaced (uid changed,
   ``NodeReplaced``).
4. **Unknown** unless cleanup completed (``CleanupFailed``).
5. **Unknown** when the verified verdict is Inconclusive or absent, or when a Pass comes
   from a Run that did not end with a proven outcome (``Succeeded`` or ``Failed``).
6. **Stale** when the verified result (Pass or Fail) finished longer ago than the freshness
   window (the profile's ``freshness``, else its ``recurrence.interval``, else
   shared/profile.py's DEFAULT_FRESHNESS), or has no finish time.
7. **Failed** for a verified proven failure; **Passed** for a verified pass.

Missing, malformed, incomplete, unauthorized or unsupported results are never Passed.
"""

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, assert_never

from shared.durations import DurationError, parse_duration
from shared.envelope import CleanupState, State, ValidationResult, Verification, parse_envelope
from shared.profile import DEFAULT_FRESHNESS
from shared.run import TERMINAL_PHASES, Phase, Verdict


@dataclass(frozen=True)
class Classification:
    state: State
    reason: str
    message: str


def _unknown(reason: str, message: str) -> Classification:
    return Classification(State.UNKNOWN, reason, message[:1024])


def classify(
    result: ValidationResult, *, current_node_uid: str | None, now: datetime, window: timedelta
) -> Classification:
    """The state of ``result`` given the Node's uid now, the time and the freshness window."""
    if result.run.phase not in TERMINAL_PHASES:
        return Classification(State.RUNNING, "RunInProgress", f"Run {result.run.name} is {result.run.phase.value}")
    verification = result.verification
    if verification.state != Verification.VERIFIED:
        return _unknown(verification.state.value, verification.message or "the evidence did not verify")
    if current_node_uid is None:
        return _unknown("NodeMissing", f"Node {result.target.name} no longer exists")
    if current_node_uid != result.target.uid:
        return _unknown("NodeReplaced", f"Node {result.target.name} was replaced (uid changed) since the Run")
    match result.cleanup:
        case CleanupState.COMPLETE:
            pass
        case CleanupState.FAILED | CleanupState.PENDING | CleanupState.UNKNOWN:
            return _unknown("CleanupFailed", verification.message or "the check's workloads were not proven gone")
        case _:
            assert_never(result.cleanup)
    verdict = result.verdict
    if verdict is None or verdict == Verdict.INCONCLUSIVE:
        return _unknown("Inconclusive", verification.message or "the evidence proves neither pass nor failure")
    if verdict == Verdict.PASS and result.run.phase not in {Phase.SUCCEEDED, Phase.FAILED}:
        return _unknown("RunInconclusive", f"the Run ended {result.run.phase.value}")
    if result.finished_at is None:
        return Classification(State.STALE, "NoFinishTime", "the evidence does not say when it was taken")
    age = now - result.finished_at
    if age > window:
        return Classification(
            State.STALE, "OlderThanWindow", f"finished {_span(age)} ago; the freshness window is {_span(window)}"
        )
    match verdict:
        case Verdict.FAIL:
            return Classification(State.FAILED, "CheckFailed", "verified evidence proves a failure on this Node")
        case Verdict.PASS:
            return Classification(State.PASSED, "CheckPassed", "verified, complete and fresh evidence of a pass")
        case Verdict.INCONCLUSIVE:  # pragma: no cover - handled above
            return _unknown("Inconclusive", "")
        case _:
            assert_never(verdict)


def classified(
    result: ValidationResult, *, current_node_uid: str | None, now: datetime, window: timedelta
) -> ValidationResult:
    """``result`` with its state, reason and message set."""
    outcome = classify(result, current_node_uid=current_node_uid, now=now, window=window)
    return result.model_copy(update={"state": outcome.state, "reason": outcome.reason, "message": outcome.message})


def classify_document(
    document: dict[str, Any], *, current_node_uid: str | None, now: datetime, window: timedelta
) -> Classification:
    """Classify an envelope received as JSON: another version or a malformed one is Unknown."""
    result = parse_envelope(document)
    if result is None:
        return _unknown(
            "UnsupportedVersion", f"not a valid envelope of a supported version ({document.get('schema')!r})"
        )
    return classify(result, current_node_uid=current_node_uid, now=now, window=window)


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{(seconds % 3600) // 60}m"
    return f"{seconds}s"


def freshness_window(spec: dict[str, object]) -> timedelta:
    """The profile's ``freshness``, else its ``recurrence.interval``, else DEFAULT_FRESHNESS
    (an unreadable duration counts as absent: the API server's schema rejects those)."""
    recurrence = spec.get("recurrence")
    interval = recurrence.get("interval") if isinstance(recurrence, dict) else None
    for value in (spec.get("freshness"), interval):
        if isinstance(value, str):
            with contextlib.suppress(DurationError):
                window = parse_duration(value)
                if window > timedelta():
                    return window
    return parse_duration(DEFAULT_FRESHNESS)
