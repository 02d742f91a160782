"""The fault campaign's history: every change of the objects the invariants talk about, in the
order the API server made them.

One record per watch event (and per operator action the campaign makes itself), written as JSON
lines. Records carry the object's ``resourceVersion``: on one etcd every write of every
resource gets a larger revision than the one before, so sorting by it gives the order the
writes happened in, across resource types, whatever order the watches delivered them in.

Pure: records in, records out; the recorder (``tests/chaos/recorder.py``) does the I/O.
"""

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

KINDS = ("Node", "Run", "Workflow", "Pod", "MPIJob", "ConfigMap")
OPERATOR = "Operator"
"""Actions of the campaign itself (cordon, uncordon, request, cancel, release), recorded with the
resourceVersion the API server answered, so they sort among the watch events."""
FAULT = "Fault"
"""Injected faults, recorded with the time only: they are not API writes."""


@dataclass(frozen=True)
class Record:
    kind: str
    type: str
    """ADDED, MODIFIED, DELETED; for Operator and Fault: the action."""
    rv: int
    at: float
    """Seconds since the campaign started (the recorder's monotonic clock)."""
    obj: Obj = field(default_factory=dict)
    seq: int = 0
    """Arrival order: breaks ties (a DELETED event and the last MODIFIED cannot share an rv, but
    synthetic records may)."""

    @property
    def name(self) -> str:
        return str(self.obj.get("metadata", {}).get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.obj.get("metadata", {}).get("namespace", ""))

    @property
    def uid(self) -> str:
        return str(self.obj.get("metadata", {}).get("uid", ""))


def _keep(obj: Obj, paths: Iterable[tuple[str, ...]]) -> Obj:
    out: Obj = {}
    for path in paths:
        source: Any = obj
        for part in path:
            source = source.get(part) if isinstance(source, dict) else None
        if source is None:
            continue
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = source
    return out


_META = (("metadata", "name"), ("metadata", "namespace"), ("metadata", "uid"), ("metadata", "resourceVersion"))
TRIM: dict[str, tuple[tuple[str, ...], ...]] = {
    "Node": (
        *_META,
        ("metadata", "labels"),
        ("metadata", "annotations"),
        ("spec", "unschedulable"),
        ("spec", "taints"),
    ),
    "Run": (
        *_META,
        ("metadata", "creationTimestamp"),
        ("metadata", "deletionTimestamp"),
        ("metadata", "labels"),
        ("spec",),
        ("status",),
    ),
    "Workflow": (*_META, ("metadata", "labels"), ("metadata", "ownerReferences"), ("status", "phase")),
    "Pod": (
        *_META,
        ("metadata", "labels"),
        ("metadata", "ownerReferences"),
        ("spec", "nodeName"),
        ("status", "phase"),
        ("status", "reason"),  # with the message and the container statuses: why a step failed
        ("status", "message"),
        ("status", "containerStatuses"),
    ),
    "MPIJob": (*_META, ("metadata", "labels"), ("metadata", "ownerReferences")),
    "ConfigMap": (
        *_META,
        ("metadata", "labels"),
        ("metadata", "annotations"),
        ("metadata", "ownerReferences"),
        ("immutable",),
        ("data",),
        ("binaryData",),
    ),
}


def trim(kind: str, obj: Obj) -> Obj:
    """What the checker needs of an object (Runs and evidence ConfigMaps whole)."""
    return _keep(obj, TRIM[kind]) if kind in TRIM else obj


def ordered(records: Iterable[Record]) -> list[Record]:
    """API writes in the order etcd made them; faults (rv 0) by time, before the write that
    follows them."""
    # At one rv, the campaign's own action first: its write is what the watch event shows.
    writes = sorted((r for r in records if r.rv > 0), key=lambda r: (r.rv, r.kind != OPERATOR, r.seq))
    faults = sorted((r for r in records if r.rv == 0), key=lambda r: (r.at, r.seq))
    out: list[Record] = []
    pending = iter(faults)
    fault = next(pending, None)
    for record in writes:
        while fault is not None and fault.at <= record.at:
            out.append(fault)
            fault = next(pending, None)
        out.append(record)
    while fault is not None:
        out.append(fault)
        fault = next(pending, None)
    return out


def write(path: Path, records: Iterable[Record]) -> None:
    with path.open("a", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(asdict(record), sort_keys=True, separators=(",", ":")) + "\n")


def read(path: Path) -> Iterator[Record]:
    with path.open(encoding="utf-8") as source:
        for line in source:
            if line.strip():
                yield Record(**json.loads(line))
