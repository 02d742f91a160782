"""The verdicts' names on the wire, as plain text: what ``shared.verdict.Verdict``'s members are.

Without ``enum``: the runner (one process per participant and per MPI rank) writes a verdict as
its name, and a Pod check's runner starts without ``enum`` (with the ``functools`` and
``operator`` it loads); ``shared.verdict`` builds the enumeration from these names for everyone
else. Pure; no I/O.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from typing import Final

PASS: Final = "Pass"
FAIL: Final = "Fail"
INCONCLUSIVE: Final = "Inconclusive"
