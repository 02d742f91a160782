#!/usr/bin/env python3
"""Runs make targets in lanes at once: the targets of one lane one after another, the lanes side
by side (issue 46, "First run": ``make demo`` builds the Go tools while it builds the images).

    hack/buildlanes.py "python images" "argo-cluster mpi-operator kplane coredns realnode-static"

Each argument is a lane: make targets, run in order as ``$MAKE --no-print-directory TARGET``
(each prints its own stage lines: hack/stage.py). Two lanes suit a two-core machine: a Go build
already keeps every core busy, so Go builds side by side only share the cores, while the image
lane mostly waits on downloads and the disk. On the first failure no further target starts, the
targets still running are stopped (SIGTERM to their process group, SIGKILL after a grace period:
every build here writes to a temporary name and renames, so a stopped build leaves no result),
and the exit status is the failed target's; the stage's log (``.cache/logs/<target>.log``) is
named. Standard library only: it runs before the project's virtual environment exists.
"""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

GRACE_SECONDS = 30.0
LOGS = Path(".cache") / "logs"
INTERRUPTED = "(interrupted)"


class UsageError(ValueError):
    """The lanes given cannot be run."""


def parse_lanes(arguments: list[str]) -> list[list[str]]:
    """Pure: each argument a lane of whitespace-separated targets. Refuses no lane, an empty
    lane, and a target named twice (two lanes building one target would race)."""
    lanes = [argument.split() for argument in arguments]
    if not lanes:
        raise UsageError("no lanes given: each argument is a lane of make targets")
    if any(not lane for lane in lanes):
        raise UsageError(f"an empty lane in {arguments!r}: each lane names at least one target")
    targets = [target for lane in lanes for target in lane]
    twice = sorted({target for target in targets if targets.count(target) > 1})
    if twice:
        raise UsageError(f"target(s) {', '.join(twice)} named in more than one place: each runs once")
    return lanes


@dataclass
class Outcome:
    """What happened to each target: its exit status, or None when it never ran (stopped before
    it started) or was stopped while it ran (``stopped``)."""

    statuses: dict[str, int | None] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    first_failure: str | None = None


def summary(lanes: list[list[str]], outcome: Outcome, logs: Path = LOGS) -> tuple[int, list[str]]:
    """Pure: the exit status and the lines to print. 0 and no lines when every target passed;
    else the first failed target's status, its log, what was stopped and what never ran."""
    failed = outcome.first_failure
    if failed is None:
        missing = [t for lane in lanes for t in lane if outcome.statuses.get(t) != 0]
        if not missing:
            return 0, []
        # Nothing failed yet something did not pass: a runner bug or an interruption; never 0.
        return 1, [f"builds: {', '.join(missing)} did not run to the end; nothing reported a failure"]
    status = outcome.statuses.get(failed)
    code = status if status else 1
    if failed == INTERRUPTED:
        lines = ["builds: interrupted"]
    else:
        lines = [f"builds: {failed} FAILED (exit {status}); its whole output: {logs / f'{failed}.log'}"]
    if outcome.stopped:
        lines.append(f"builds: stopped {', '.join(outcome.stopped)} (running beside it; run again to finish)")
    never = [t for lane in lanes for t in lane if t not in outcome.statuses and t not in outcome.stopped]
    if never:
        lines.append(f"builds: not started: {', '.join(never)}")
    return code, lines


class Runner:
    """The lanes' threads, the processes they run, and the first failure."""

    def __init__(self, lanes: list[list[str]], make: list[str], grace: float = GRACE_SECONDS) -> None:
        self.lanes, self.make, self.grace = lanes, make, grace
        self.outcome = Outcome()
        self.lock = threading.Lock()
        self.failed = threading.Event()
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def run(self) -> Outcome:
        threads = [threading.Thread(target=self._lane, args=(lane,), daemon=True) for lane in self.lanes]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            if self.failed.wait(0.2):
                self._stop_others()
                break
        for thread in threads:
            thread.join()
        return self.outcome

    def _lane(self, lane: list[str]) -> None:
        for target in lane:
            with self.lock:
                if self.failed.is_set():
                    return
                try:
                    # Its own process group, so that stopping it stops its children (go, buildah).
                    process = subprocess.Popen([*self.make, target], start_new_session=True)
                except OSError as error:
                    print(f"builds: cannot start {self.make[0]} for {target}: {error}", file=sys.stderr, flush=True)
                    self.outcome.statuses[target] = 127
                    self.outcome.first_failure = target
                    self.failed.set()
                    return
                self.running[target] = process
            status = process.wait()
            with self.lock:
                del self.running[target]
                if target in self.outcome.stopped:
                    return
                self.outcome.statuses[target] = status
                if status != 0:
                    if self.outcome.first_failure is None:
                        self.outcome.first_failure = target
                    self.failed.set()
                    return

    def _stop_others(self) -> None:
        with self.lock:
            others = dict(self.running)
            self.outcome.stopped.extend(sorted(others))
        for process in others.values():
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for process in others.values():
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()


def _signal_group(process: "subprocess.Popen[bytes]", signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def main(argv: list[str]) -> int:
    try:
        lanes = parse_lanes(argv)
    except UsageError as error:
        print(f'usage: hack/buildlanes.py LANE [LANE...] (a lane: "TARGET TARGET..."): {error}', file=sys.stderr)
        return 2
    make = [os.environ.get("MAKE") or "make", "--no-print-directory"]
    runner = Runner(lanes, make)
    previous = signal.getsignal(signal.SIGINT)

    def interrupted(_signum: int, _frame: object) -> None:
        # Ctrl-C reaches this process only (each target runs in a session of its own): stop them.
        with runner.lock:
            if runner.outcome.first_failure is None:
                runner.outcome.first_failure = INTERRUPTED
                runner.outcome.statuses[INTERRUPTED] = 130
        runner.failed.set()

    signal.signal(signal.SIGINT, interrupted)
    try:
        outcome = runner.run()
    finally:
        signal.signal(signal.SIGINT, previous)
    code, lines = summary(lanes, outcome)
    for line in lines:
        print(f"    {line}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
