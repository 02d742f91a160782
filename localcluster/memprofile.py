"""Where a service's memory goes, for the benchmarks (bench/memory.py).

Armed by the hooks launcher
(``SIGNAL_MEMORY_PROFILE=<file>``, localcluster/hooked.py), it starts ``tracemalloc`` and, on
each SIGUSR2, appends one JSON line to ``<file>``: the process's RSS, the live Python memory by
allocating line (the top ``TOP`` lines), and the deep size of every cache (``kubeio.informer``)
in the process, each cache's objects counted once, and the bytes per cached object.

tracemalloc roughly doubles the memory of what it traces: the RSS a profiled process reports is
not the figure a benchmark states (bench/memory.py measures that in a process without it)."""

import gc
import json
import signal
import sys
import time
import tracemalloc
from dataclasses import fields, is_dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from kubeio.informer import Informer

TOP = 40


def deep_size(obj: Any, seen: set[int]) -> int:
    """The bytes of ``obj`` and everything it holds that ``seen`` has not counted yet (the ids of
    what it counts are added to ``seen``): dicts, lists, tuples, sets, dataclasses (slots too)."""
    total = 0
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in fields(item) if hasattr(item, f.name))
        elif hasattr(item, "__dict__") and type(item).__module__.split(".")[0] in ("controller", "portal"):
            stack.append(vars(item))
    return total


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def caches() -> dict[str, dict[str, int]]:
    """Every informer in the process: its path, objects, deep bytes (shared strings counted at
    the first cache that holds them, in the order found)."""
    seen: set[int] = set()
    found = {}
    for obj in gc.get_objects():
        if isinstance(obj, Informer):
            size = deep_size(obj.items, seen)
            found[obj.path] = {
                "objects": len(obj.items),
                "bytes": size,
                "per_object": size // max(1, len(obj.items)),
            }
    return found


def snapshot(label: str) -> dict[str, Any]:
    gc.collect()
    stats = tracemalloc.take_snapshot().statistics("lineno")
    traced, peak = tracemalloc.get_traced_memory()
    return {
        "label": label,
        "at": time.time(),
        "rss_kib": _rss_kib(),
        "traced": traced,
        "traced_peak": peak,
        "top": [{"where": str(s.traceback[0]), "bytes": s.size, "count": s.count} for s in stats[:TOP]],
        "caches": caches(),
    }


def arm(path: Path) -> None:
    """Start tracing; each SIGUSR2 appends a snapshot to ``path`` (its label: the count so far)."""
    tracemalloc.start()
    taken = [0]

    def dump(signum: int, frame: FrameType | None) -> None:
        taken[0] += 1
        with path.open("a") as out:
            out.write(json.dumps(snapshot(str(taken[0]))) + "\n")

    signal.signal(signal.SIGUSR2, dump)
