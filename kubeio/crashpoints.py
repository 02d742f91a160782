"""Crash points: every write the gateway makes passes one before and one after it.

In production this does nothing. Tests set ``SIGNAL_CRASH_TRACE=<file>`` to record the
sequence of points a run passes, and ``SIGNAL_CRASH_AT=<n>`` to kill the process (exit 137,
no clean-up, like a SIGKILL) at the n-th point, which is how recovery after a crash at any
write is tested: a new write cannot escape, because it goes through the gateway."""

import os
from pathlib import Path

_counter = 0


def hit(name: str) -> None:
    global _counter  # noqa: PLW0603 - one process-wide sequence of points
    _counter += 1
    trace = os.environ.get("SIGNAL_CRASH_TRACE")
    if trace:
        with Path(trace).open("a", encoding="utf-8") as handle:
            handle.write(f"{_counter}\t{name}\n")
    target = os.environ.get("SIGNAL_CRASH_AT")
    if target and int(target) == _counter:
        os._exit(137)
