"""The request log a service writes with ``SIGNAL_REQUEST_LOG`` (kubeio: one ``time verb path``
line per request, the time it was sent, millisecond resolution), read back by the benchmarks so
that each counts requests and time only inside the window it claims to measure (issue 15, goal
7), and the cuts made in it."""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.rules.ledger import LEDGER_NAME
from shared import keys

WRITES = ("POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True)
class Request:
    at: float
    verb: str
    path: str


class RequestLog:
    """One service's request log file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[Request]:
        if not self.path.exists():
            return []
        found = []
        for line in self.path.read_text().splitlines():
            parts = line.split("\t", 2)
            if len(parts) == 3:  # a line still being written is read whole next time
                found.append(Request(float(parts[0]), parts[1], parts[2]))
        return found

    @staticmethod
    def window(requests: Sequence[Request], start: float, end: float) -> list[Request]:
        """The requests sent in [start, end]."""
        return [r for r in requests if start <= r.at <= end]

    @staticmethod
    def verbs(requests: Sequence[Request]) -> Counter[str]:
        return Counter(r.verb for r in requests)


class RequestTail:
    """A request log read as it grows: each :meth:`read` parses only the whole lines appended
    since the last (a probe polled every few milliseconds stays cheap); ``seen`` holds them all."""

    def __init__(self, log: RequestLog) -> None:
        self.log = log
        self.offset = 0
        self.seen: list[Request] = []

    def read(self) -> list[Request]:
        if not self.log.path.exists():
            return self.seen
        with self.log.path.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        whole = data.rfind(b"\n") + 1
        self.offset += whole
        for line in data[:whole].decode("utf-8").splitlines():
            at, verb, path = line.split("\t", 2)
            self.seen.append(Request(float(at), verb, path))
        return self.seen


def writes(requests: Sequence[Request]) -> int:
    return sum(1 for r in requests if r.verb in WRITES)


def running_cut(requests: Sequence[Request], since: float, count: int = 1) -> float | None:
    """The time the controller sent the ``count``-th Run status PATCH to Running after ``since``:
    each the first status PATCH of a Run after a Workflow's create. None before it has."""
    submitted = False
    for r in requests:
        if r.at < since:
            continue
        if r.verb == "POST" and r.path.endswith("/workflows"):
            submitted = True
        elif submitted and r.verb == "PATCH" and f"/{keys.RUN_PLURAL}/" in r.path and r.path.endswith("/status"):
            submitted = False
            count -= 1
            if count == 0:
                return r.at
    return None


def new_runs_status_cut(requests: Sequence[Request], since: float, count: int, existing: set[str]) -> float | None:
    """The time of the first status PATCH, after ``since``, of the ``count``-th Run not in
    ``existing``: an admission writes a Run's status once, to Running, after its Workflow's create
    (whatever the order in which admissions made at once interleave). None before it has."""
    patched: set[str] = set()
    for r in requests:
        if r.at < since or r.verb != "PATCH" or not r.path.endswith("/status"):
            continue
        segments = r.path.split("/")
        if len(segments) < 3 or segments[-3] != keys.RUN_PLURAL:
            continue
        name = segments[-2]
        if name in existing or name in patched:
            continue
        patched.add(name)
        if len(patched) == count:
            return r.at
    return None


def admission_phases(requests: Sequence[Request], start: float, requested: float, end: float) -> dict[str, float]:
    """Where one admission window's seconds went (goal 1), from the controller's request log:
    ``start`` the requester's first write, ``requested`` the moment its last was answered, ``end``
    the Run's Running PATCH. Each phase in seconds: the requester's own writes (the controller
    admits once a whole group is requested, often before the requester has its last answer);
    from ``start`` to the ledger head's compare-and-swap (after the reads of the source and the
    ledger, and the create of the group's segment); from there to the first Node PATCH (the Run, the ledger read
    again, the snapshot); the Node PATCHes, first sent to last sent; the Workflow's create and the
    Run's status. Empty when the window holds no ledger write or no Node PATCH."""
    window = [r for r in requests if start <= r.at <= end]
    ledger = [r.at for r in window if r.verb == "PUT" and r.path.endswith(f"/configmaps/{LEDGER_NAME}")]
    patches = [r.at for r in window if r.verb == "PATCH" and r.path.startswith("/api/v1/nodes/")]
    if not ledger or not patches:
        return {}
    return {
        "requester's writes": requested - start,
        "to the ledger write": ledger[0] - start,
        "to the first Node PATCH": patches[0] - ledger[0],
        "Node PATCHes": patches[-1] - patches[0],
        "Workflow and Run status": end - patches[-1],
    }
