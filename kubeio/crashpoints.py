"""Crash points: every write the gateway makes passes one before and one after it.

In production this does nothing: the points act only when the local cluster's launcher armed
:mod:`kubeio.testhooks` in this process (never from a shipped entry point). Tests then record
the sequence of points a run passes (``crash_trace``) or kill the process (exit 137, no
clean-up, like a SIGKILL) at the n-th point (``crash_at``), which is how recovery after a crash
at any write is tested: a new write cannot escape, because it goes through the gateway."""

import os

from kubeio import testhooks

_counter = 0


def hit(name: str) -> None:
    hooks = testhooks.current()
    if hooks.crash_trace is None and not hooks.crash_at:
        return
    if hooks.crash_scope and hooks.crash_scope not in name:
        return  # another test's object on the shared cluster: not this test's sequence
    global _counter  # noqa: PLW0603 - one process-wide sequence of points
    _counter += 1
    if hooks.crash_trace is not None:
        with hooks.crash_trace.open("a", encoding="utf-8") as handle:
            handle.write(f"{_counter}\t{name}\n")
    if hooks.crash_at == _counter:
        os._exit(137)
