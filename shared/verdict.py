"""The verdict of a check or a participant: Pass, Fail or Inconclusive.

Standard library only, so that the runner (one process per participant and per MPI rank)
can use it without importing pydantic; ``shared.run`` re-exports it for everyone else.
Pure; no I/O.
"""

from enum import StrEnum


class Verdict(StrEnum):
    """Outcome of one check or one participant."""

    PASS = "Pass"
    FAIL = "Fail"
    INCONCLUSIVE = "Inconclusive"
