"""Test hooks: crash points, an injected renewal fault and the request log.

Shipped code only *reads* them here. They are disarmed unless something in the same process
calls :func:`arm`, and nothing a service runs does: only the local cluster's launcher
(``python -m localcluster.hooked PROGRAM ...``) and in-process tests arm them, and the import
contract "Services do not import the local test control plane" keeps the services from
reaching that launcher. So an environment variable set on a production Pod (for example
``SIGNAL_CRASH_AT``) changes nothing: the images' entry points (``signal-controller``,
``signal-adapter``, ``signal-portal``, ``signal-runner``) never arm.
"""

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Hooks:
    crash_trace: Path | None = None
    """Append each crash point passed (``n<TAB>name``) to this file."""
    crash_at: int = 0
    """Exit at once (137, no clean-up, like SIGKILL) at the n-th crash point; 0: never."""
    crash_scope: str = ""
    """Count (trace, crash at) only the crash points whose name contains this text (a test's
    namespace: its own objects' paths hold it); empty: every point."""
    renewal_dies_after: int = 0
    """The leader's renewal task raises after this many renewals; 0: never."""
    request_log: Path | None = None
    """Append every API request (time, verb, path) to this file (benchmarks)."""


DISARMED = Hooks()
_hooks = DISARMED


def arm(hooks: Hooks) -> Hooks:
    """Arm ``hooks`` for this process; the hooks that were in force (to restore them)."""
    global _hooks
    previous, _hooks = _hooks, hooks
    return previous


def current() -> Hooks:
    return _hooks
