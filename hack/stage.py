#!/usr/bin/env python3
"""One line per stage of ``make demo`` / ``make test`` instead of thousands of lines of package
and module downloads (issue 46, "First run").

    hack/stage.py NAME "what it does" COMMAND [ARG...]

Runs COMMAND with its stdout and stderr appended to ``.cache/logs/NAME.log`` (the repository's,
made anew each run), prints ``==> NAME: what it does`` when it starts, the command's own status
lines (those starting with ``NAME:``, which the project's build scripts print: what they are
doing, whether the cache held the result) as they come, a line a minute while a long stage runs
(its elapsed time and the last line it logged), and ``NAME: done in 12.3s``. On failure
it prints the log's last lines and its path, and exits with the command's status. Standard
library only: it runs before the project's virtual environment exists.
"""

import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

TAIL_LINES = 30
HEARTBEAT_SECONDS = 60.0
LOGS = Path(__file__).resolve().parent.parent / ".cache" / "logs"


def _shown(path: Path) -> Path:
    """The path relative to the working directory when under it (the checkout), else whole."""
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: hack/stage.py NAME DESCRIPTION COMMAND [ARG...]", file=sys.stderr)
        return 2
    name, description, command = argv[0], argv[1], argv[2:]
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"{name}.log"
    print(f"==> {name}: {description}", flush=True)
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with log_path.open("w", encoding="utf-8") as log:
        try:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
            )
        except OSError as exc:
            print(f"    {name}: FAILED to start {command[0]}: {exc}", file=sys.stderr)
            return 127
        assert process.stdout is not None
        done = threading.Event()

        def heartbeat() -> None:
            while not done.wait(HEARTBEAT_SECONDS):
                last = tail[-1][:100] if tail else "(nothing yet)"
                print(f"    {name}: still running after {time.monotonic() - started:.0f}s; last: {last}", flush=True)

        beat = threading.Thread(target=heartbeat, daemon=True)
        beat.start()
        try:
            for line in process.stdout:
                log.write(line)
                tail.append(line.rstrip("\n"))
                if line.startswith(f"{name}:"):
                    print(f"    {line.rstrip()}", flush=True)
            status = process.wait()
        finally:
            done.set()
    elapsed = time.monotonic() - started
    if status != 0:
        print(f"    {name}: FAILED (exit {status}) after {elapsed:.1f}s; its last lines:", file=sys.stderr)
        for line in tail:
            print(f"      {line}", file=sys.stderr)
        print(f"    {name}: the whole output: {log_path}", file=sys.stderr)
        return status
    print(f"    {name}: done in {elapsed:.1f}s (log: {_shown(log_path)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
