"""Every process the local cluster starts dies with the process that started it, and what a
killed run left behind is removed by the next start.

* :func:`popen` starts a long-lived child in a session of its own with the parent-death signal
  (``prctl(PR_SET_PDEATHSIG, SIGKILL)``): the kernel kills it as soon as its parent dies. The
  signal fires when the *thread* that forked the child exits, so children are forked from the
  main thread, or, when called from any other thread, from one long-lived spawner thread.
* :class:`RunRecord`: one JSON file per running local cluster under :func:`runs_dir` (the
  owner's pid and start time, the work directory, whether to keep it) and its watchdog
  (``localcluster/reaper.py``), which remembers every descendant of the owner and, if the owner
  dies without stopping the run, kills them all (their process groups included: the children
  of a component killed by its parent-death signal) and removes the work directory.
* :func:`sweep`, at every start: a record whose owner and watchdog are both gone (a machine
  that lost both, a watchdog killed by hand) is cleaned up the same way.
"""

import concurrent.futures
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import structlog

from localcluster import reaper

log = structlog.get_logger("localcluster")

PR_SET_PDEATHSIG = 1
REAPER = Path(__file__).with_name("reaper.py")
_libc = ctypes.CDLL(None, use_errno=True)
_spawner: concurrent.futures.ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()
T = TypeVar("T")
_open_records: "set[RunRecord]" = set()


def runs_dir() -> Path:
    """Where run records live: ``$SIGNAL_RUNS_DIR``, default ``<temp dir>/signal-localcluster-runs``."""
    configured = os.environ.get("SIGNAL_RUNS_DIR")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "signal-localcluster-runs"


def _die_with_parent(parent: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child between fork and exec
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody will signal us
            os._exit(137)

    return preexec


def on_spawner_thread(make: Callable[[], T]) -> T:
    """Run ``make`` (which forks) on the main thread if called there, else on the one long-lived
    spawner thread, so that the parent-death signal fires only when this process dies."""
    global _spawner  # noqa: PLW0603 - one spawner thread per process, created on first use
    if threading.current_thread() is threading.main_thread():
        return make()
    with _spawner_lock:
        if _spawner is None:
            _spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="localcluster-spawner")
    return _spawner.submit(make).result()


def popen(argv: list[str], **kwargs: Any) -> "subprocess.Popen[bytes]":
    """``subprocess.Popen(argv, **kwargs)`` in a new session, killed when this process dies
    (and by the watchdogs of the runs this process owns, whom it asks to take note at once)."""
    preexec = _die_with_parent(os.getpid())
    # preexec_fn only calls prctl and getppid (async-signal-safe), so forking with threads is fine.
    process = on_spawner_thread(
        lambda: subprocess.Popen(argv, start_new_session=True, preexec_fn=preexec, **kwargs)  # noqa: PLW1509
    )
    for record in list(_open_records):
        record.nudge()
    return process


def start_time(pid: int) -> int | None:
    info = reaper.stat(pid)
    return None if info is None else info[2]


@dataclass(eq=False)
class RunRecord:
    """The record and watchdog of one running local cluster."""

    path: Path
    workdir: Path
    keep: bool
    watchdog: "subprocess.Popen[bytes] | None" = None
    _pipe: int = field(default=-1, repr=False)

    @classmethod
    def open(cls, workdir: Path, keep: bool) -> "RunRecord":
        """Sweep what earlier killed runs left behind, then record this run and start its watchdog."""
        sweep()
        directory = runs_dir()
        directory.mkdir(parents=True, exist_ok=True)
        record = cls(directory / f"run-{os.getpid()}-{uuid.uuid4().hex[:8]}.json", workdir, keep)
        record._start_watchdog()
        _open_records.add(record)
        return record

    def nudge(self) -> None:
        """Ask the watchdog to look for new descendants now (not at its next poll)."""
        if self._pipe >= 0:
            with contextlib.suppress(OSError):
                os.write(self._pipe, b"scan")

    def _start_watchdog(self) -> None:
        read_end, write_end = os.pipe()
        os.set_inheritable(write_end, False)
        argv = [sys.executable, "-I", "-S", str(REAPER), str(self.path), str(os.getpid())]
        try:
            # Not popen(): the watchdog must outlive this process, not die with it.
            self.watchdog = subprocess.Popen(argv, stdin=read_end, start_new_session=True, close_fds=True)
        finally:
            os.close(read_end)
        self._pipe = write_end
        self._write()

    def _write(self) -> None:
        owner = os.getpid()
        watchdog = self.watchdog.pid if self.watchdog else 0
        body = {
            "owner": [owner, start_time(owner)],
            "watchdog": [watchdog, start_time(watchdog) if watchdog else None],
            "workdir": str(self.workdir),
            "keep": self.keep,
            "sparedGroups": sorted({os.getpgid(0)}),
        }
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(body, indent=1))
        temporary.replace(self.path)

    def close(self) -> None:
        """The run stopped cleanly: tell the watchdog and remove the record."""
        _open_records.discard(self)
        if self._pipe >= 0:
            with contextlib.suppress(OSError):
                os.write(self._pipe, b"stop")
            os.close(self._pipe)
            self._pipe = -1
        if self.watchdog is not None:
            try:
                self.watchdog.wait(10)
            except subprocess.TimeoutExpired:
                self.watchdog.kill()
                self.watchdog.wait()
        self.path.unlink(missing_ok=True)


def _alive(entry: list[int | None] | None) -> bool:
    """Whether [pid, start time] is still that same process."""
    if not entry or not entry[0]:
        return False
    return start_time(int(entry[0])) == entry[1]


def sweep() -> list[str]:
    """Clean up every run whose owner and watchdog are both gone; returns their work directories."""
    directory = runs_dir()
    if not directory.is_dir():
        return []
    cleaned = []
    for path in sorted(directory.glob("run-*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _alive(record.get("owner")) or _alive(record.get("watchdog")):
            continue
        log.warning("cleaning up a local cluster run that was killed", record=str(path), workdir=record.get("workdir"))
        reaper.clean(str(path))
        cleaned.append(str(record.get("workdir")))
    return cleaned
