"""Run a Signal service with the test hooks armed from the environment.

``python -m localcluster.hooked signal-controller ARGS...`` runs the controller as
``signal-controller ARGS...`` would, after arming :mod:`kubeio.testhooks` from these variables:

* ``SIGNAL_CRASH_TRACE=<file>``: record the crash points passed;
* ``SIGNAL_CRASH_AT=<n>``: exit 137 at the n-th crash point;
* ``SIGNAL_CRASH_SCOPE=<text>``: count only the crash points whose name contains it;
* ``SIGNAL_FAULT_RENEWAL_DIES_AFTER=<n>``: the leader's renewal task dies after n renewals;
* ``SIGNAL_REQUEST_LOG=<file>``: record every API request (benchmarks);
* ``SIGNAL_MEMORY_PROFILE=<file>``: trace allocations, a snapshot per SIGUSR2 (localcluster/memprofile.py).

Only the local cluster's tests and benchmarks start services this way; the images' entry points
never read these variables (``kubeio/testhooks.py`` says why that holds)."""

import os
import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path

from kubeio import testhooks
from localcluster import memprofile

CRASH_TRACE_ENV = "SIGNAL_CRASH_TRACE"
CRASH_AT_ENV = "SIGNAL_CRASH_AT"
CRASH_SCOPE_ENV = "SIGNAL_CRASH_SCOPE"
RENEWAL_FAULT_ENV = "SIGNAL_FAULT_RENEWAL_DIES_AFTER"
REQUEST_LOG_ENV = "SIGNAL_REQUEST_LOG"
MEMORY_PROFILE_ENV = "SIGNAL_MEMORY_PROFILE"

PROGRAMS = {
    "signal-controller": "controller.process.main",
    "signal-adapter": "adapter.main",
    "signal-portal": "portal.main",
}


def hooks_from(environ: Mapping[str, str]) -> testhooks.Hooks:
    """The hooks the variables above ask for; a malformed number is an error, not 0."""

    def path(name: str) -> Path | None:
        return Path(environ[name]) if environ.get(name) else None

    def count(name: str) -> int:
        text = environ.get(name) or "0"
        if not text.isdigit():
            raise SystemExit(f"{name}={text!r} is not a count; set a whole number or unset it")
        return int(text)

    return testhooks.Hooks(
        crash_trace=path(CRASH_TRACE_ENV),
        crash_at=count(CRASH_AT_ENV),
        crash_scope=environ.get(CRASH_SCOPE_ENV, ""),
        renewal_dies_after=count(RENEWAL_FAULT_ENV),
        request_log=path(REQUEST_LOG_ENV),
    )


def command(program: str) -> list[str]:
    """The argv prefix that starts ``program`` with the hooks armed."""
    return [sys.executable, "-m", "localcluster.hooked", program]


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in PROGRAMS:
        raise SystemExit(f"usage: python -m localcluster.hooked {{{','.join(PROGRAMS)}}} ARGS...")
    testhooks.arm(hooks_from(os.environ))
    if os.environ.get(MEMORY_PROFILE_ENV):
        memprofile.arm(Path(os.environ[MEMORY_PROFILE_ENV]))
    entry: Callable[[list[str]], int] = import_module(PROGRAMS[argv[0]]).main
    sys.argv = [argv[0], *argv[1:]]
    return entry(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
