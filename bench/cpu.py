"""CPU seconds by process over a benchmark's window: where a window's time goes when the
machine (two cores here) is shared by Signal's process, the API server and etcd.

:func:`processes` finds the local control plane's processes (``/proc/*/cmdline``: the
kplane binary, the component's name) plus the pids a benchmark names; :class:`CpuWindow` reads
their user+system CPU time (``/proc/PID/stat``) at the window's start and end. A figure printed
by it is the seconds of CPU each one used inside the window, and
their share of the window's wall time (1.0: one core busy throughout)."""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager")
"""The local control plane's processes: each one the kplane binary with its name as argv[1]."""
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0.0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15 of stat)


def processes(named: Mapping[str, int]) -> dict[str, int]:
    """``named`` plus the running control plane's processes, by name (the first of each name)."""
    found = dict(named)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        name = argv[1].decode(errors="replace") if len(argv) > 1 else ""
        if Path(argv[0].decode(errors="replace")).name.startswith("kplane") and name in CONTROL_PLANE:
            found.setdefault(name, int(entry.name))
    return found


@dataclass
class CpuWindow:
    pids: dict[str, int]
    start: dict[str, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)

    def begin(self) -> "CpuWindow":
        self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def end(self) -> dict[str, float]:
        self.used = {name: cpu_seconds(pid) - self.start.get(name, 0.0) for name, pid in self.pids.items()}
        return self.used

    def describe(self, wall: float) -> str:
        parts = [f"{name} {seconds:.2f}s ({seconds / wall:.2f} of one core)" for name, seconds in self.used.items()]
        total = sum(self.used.values())
        return f"CPU in the window ({wall:.2f}s, two cores: 2.00 at most): " + ", ".join(parts) + f"; sum {total:.2f}s"
