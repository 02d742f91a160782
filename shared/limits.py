"""The bounds of a group and of an MPI world, shared by the profile's schema (shared/profile.py)
and the runner's result (shared/result_wire.py). Standard library only: the runner imports them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from typing import Final

MAX_PARTICIPANTS: Final = 64
"""Nodes in one group (a profile's ``participants.count``); participant indexes are below it."""
MAX_RANKS: Final = 64
"""Ranks in one crossNode MPI world (participants x slots per worker)."""
