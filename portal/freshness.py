"""What a result is when its freshness cannot be known. Pure; no I/O, ``now`` is an argument.
Used by portal/sources.py for every result it serves.

A result's freshness window is its profile's ``freshness``, else its ``recurrence.interval``,
else shared/profile.py's DEFAULT_FRESHNESS (SPEC §3 and §6), read from the profile as it is
now: a Run records its profile's name, uid and generation, not its window.

When the profile is gone nothing says how long its results stay fresh, and a default would
turn a result that was Stale under a shorter window back into Passed. So a verified result
whose state depends on the window (Passed, Failed, or Stale by age) is Unknown
(``ProfileMissing``) until the profile exists again; a result the window does not decide
(Running, Unknown, Stale without a finish time) keeps its state.
"""

from datetime import datetime, timedelta
from typing import Final

from shared.classify import classified
from shared.envelope import State, ValidationResult

PROFILE_MISSING: Final = "ProfileMissing"
_NEVER_OLD: Final = timedelta.max
"""A window no result outlives: classification by everything except age."""


def judged(
    result: ValidationResult, *, current_node_uid: str | None, now: datetime, window: timedelta | None
) -> ValidationResult:
    """``result`` classified (shared/classify.py) against ``window``, its profile's freshness
    window; None when the profile is gone (see the module docstring)."""
    if window is not None:
        return classified(result, current_node_uid=current_node_uid, now=now, window=window)
    final = classified(result, current_node_uid=current_node_uid, now=now, window=_NEVER_OLD)
    if final.state not in {State.PASSED, State.FAILED}:
        return final
    proven = result.verdict.value if result.verdict is not None else "result"
    message = (
        f"the evidence proves a {proven} on Node {result.target.name}, but profile {result.check.profile} no longer "
        "exists, so nothing says how long its results stay fresh; recreate the profile, or certify the Node "
        "with a profile that exists"
    )
    return final.model_copy(update={"state": State.UNKNOWN, "reason": PROFILE_MISSING, "message": message[:1024]})
