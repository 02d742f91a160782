"""The verdict of a check or a participant: Pass, Fail or Inconclusive.

Standard library only, so that the runner's MPI roles can use it without importing pydantic
(a Pod check's runner uses the plain names, shared/verdict_names.py); ``shared.run`` re-exports
it for everyone else. Pure; no I/O.
"""

from enum import StrEnum

from shared import verdict_names


class Verdict(StrEnum):
    """Outcome of one check or one participant."""

    PASS = verdict_names.PASS
    FAIL = verdict_names.FAIL
    INCONCLUSIVE = verdict_names.INCONCLUSIVE
