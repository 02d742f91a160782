"""The watchdog of one local cluster run: when the process that started the run dies without
stopping it (SIGKILL, a crash), kill every process the run left behind and remove its files.

Run by ``localcluster.procs`` as ``python -I -S localcluster/reaper.py <record>`` in a session
of its own, its stdin the read end of a pipe whose write end only the owner holds. Standard
library only (it starts fast and imports nothing of the project). While the owner lives it
polls /proc four times a second (and at once when the owner writes ``scan``) and remembers
every descendant of the owner (pid, start time, process group) in ``<record>.seen``. Then:

* the owner writes ``stop`` and closes the pipe (a clean stop): it kills only what the run
  forgot (a remembered process that still names the run's work directory), then exits;
* the pipe reaches end-of-file without ``stop`` (the owner died): it kills every remembered
  process that is still the same process (same start time) and every process of the remembered
  process groups (except the owner's own group, shared with whatever started the owner), and
  any process whose command line or working directory lies in the run's work directory (one
  started in the last moments before the owner died), then removes the work directory (unless
  the record says to keep it) and the record.

The same clean-up (:func:`clean`) runs at the next start for a run whose owner and watchdog are
both gone (``localcluster.procs.sweep``).
"""

import contextlib
import json
import os
import select
import shutil
import signal
import sys
import time

POLL_SECONDS = 0.25


def stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, process group, start time in clock ticks since boot) of ``pid``, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rindex(b")") + 2 :].split()
    # fields[0] is the state (field 3 of proc(5)); ppid is field 4, pgrp 5, starttime 22.
    if fields[0] == b"Z":
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def processes() -> dict[int, tuple[int, int, int]]:
    """Every live process: pid -> (ppid, pgrp, start time)."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = stat(int(name))
            if info is not None:
                found[int(name)] = info
    return found


def descendants(owner: int, table: dict[int, tuple[int, int, int]]) -> dict[int, tuple[int, int]]:
    """pid -> (pgrp, start time) of every descendant of ``owner``."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _pgrp, _start) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, tuple[int, int]] = {}
    frontier = list(children.get(owner, []))
    while frontier:
        pid = frontier.pop()
        if pid in found or pid == os.getpid():
            continue
        found[pid] = (table[pid][1], table[pid][2])
        frontier += children.get(pid, [])
    return found


def in_workdir(pid: int, workdir: str) -> bool:
    """Whether the process's command line or working directory names the work directory."""
    if not workdir:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().decode(errors="replace")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return workdir in cmdline or (cwd + "/").startswith(workdir.rstrip("/") + "/")


def kill_round(seen: dict[int, tuple[int, int]], spared_groups: set[int], workdir: str = "") -> int:
    """SIGKILL every process of ``seen`` (pid -> (pgrp, start time)) that is still the same
    process, every process in one of their groups (other than ``spared_groups``) that started
    no earlier than the group's first remembered process, and every process that names
    ``workdir`` (:func:`in_workdir`). Returns how many were signalled."""
    groups: dict[int, int] = {}
    for pgrp, start in seen.values():
        if pgrp not in spared_groups:
            groups[pgrp] = min(start, groups.get(pgrp, start))
    killed = 0
    for pid, (ppid, pgrp, start) in processes().items():
        del ppid
        mine = seen.get(pid, (None, None))[1] == start or (pgrp in groups and start >= groups[pgrp])
        mine = mine or (pgrp not in spared_groups and in_workdir(pid, workdir))
        if mine and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


def clean(record_path: str) -> None:
    """Kill what the run left behind and remove its work directory (unless kept) and record."""
    try:
        with open(record_path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        record = {}
    seen = load_seen(record_path + ".seen")
    for pid, start in record.get("processes", []):
        seen.setdefault(int(pid), (-1, int(start)))
    spared = {int(g) for g in record.get("sparedGroups", [])}
    workdir = record.get("workdir") or ""
    deadline = time.monotonic() + 10
    while kill_round(seen, spared, workdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    if workdir and not record.get("keep"):
        shutil.rmtree(workdir, ignore_errors=True)
    for path in (record_path + ".seen", record_path):
        with contextlib.suppress(OSError):
            os.unlink(path)


def load_seen(path: str) -> dict[int, tuple[int, int]]:
    try:
        with open(path, encoding="utf-8") as handle:
            rows = json.load(handle)
    except (OSError, ValueError):
        return {}
    return {int(pid): (int(pgrp), int(start)) for pid, pgrp, start in rows}


def save_seen(path: str, seen: dict[int, tuple[int, int]]) -> None:
    rows = [[pid, pgrp, start] for pid, (pgrp, start) in sorted(seen.items())]
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(rows, handle)
    os.replace(path + ".tmp", path)


def watch(record_path: str, owner: int) -> None:
    seen: dict[int, tuple[int, int]] = {}
    message = b""
    while True:
        found = descendants(owner, processes())
        new = {pid: info for pid, info in found.items() if seen.get(pid) != info}
        if new:
            seen.update(new)
            save_seen(record_path + ".seen", seen)
        ready, _, _ = select.select([0], [], [], POLL_SECONDS)
        if ready:
            chunk = os.read(0, 64)
            message = (message + chunk).replace(b"scan", b"")
            if not chunk:
                break
    if message.strip() == b"stop":
        leftovers(record_path, seen)
        with contextlib.suppress(OSError):
            os.unlink(record_path + ".seen")
        return
    clean(record_path)


def leftovers(record_path: str, seen: dict[int, tuple[int, int]]) -> None:
    """After a clean stop: kill what the run started that is still there (a process it
    remembered, still the same process, whose command line or working directory names the run's
    work directory, e.g. a Pod's process in a session of its own that nothing stopped)."""
    try:
        with open(record_path, encoding="utf-8") as handle:
            workdir = json.load(handle).get("workdir") or ""
    except (OSError, ValueError):
        return
    killed = []
    table = processes()
    for pid, (_pgrp, start) in seen.items():
        if pid in table and table[pid][2] == start and in_workdir(pid, workdir):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    if killed:
        sys.stderr.write(
            f"localcluster watchdog: killed {len(killed)} process(es) left behind by the stopped run in {workdir}: "
            f"{killed}\n"
        )


def main() -> None:
    record_path, owner = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    watch(record_path, owner)


if __name__ == "__main__":
    main()
