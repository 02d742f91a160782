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
PARAMETER_ENV_PREFIX: Final = "SIGNAL_PARAM_"
"""A check's parameter ``name`` reaches its script as ``SIGNAL_PARAM_<NAME upper-cased>``
(shared/profile.py; the adapter sets it, the runner passes it through to the script)."""
EXIT_PYTHON_TOO_OLD: Final = 90
"""Exit status of the injected runner (runner/launch.py) under a ``python3`` older than 3.10:
the adapter reports the check's image as unable to run the runner (adapter/collect.py)."""
