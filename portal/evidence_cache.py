"""The portal's cache of Run evidence it has read, bounded in bytes. Pure.

Each refresh reads a Run's evidence only when its inputs changed (the Run evidence ConfigMap and
every check evidence ConfigMap it names, by uid and digest); what was read is kept here. A
document holds every check's evidence (each participant's output tails), so at 64 participants
x 32 checks one Run is megabytes: kept without a bound, a fleet's retained Runs would grow the
portal without limit. Entries are evicted least recently used once ``max_bytes`` is passed (an
evicted Run's evidence is read again at its next refresh; one larger than the bound is never
kept), and entries no Run uses any more are dropped at each refresh (``retain``)."""

import json
from collections import OrderedDict
from collections.abc import Hashable, Set

from shared.envelope import RunEvidence

DEFAULT_MAX_BYTES = 256 * 1024 * 1024


def size_of(evidence: RunEvidence) -> int:
    """About how many bytes ``evidence`` holds: its document as compact JSON, and its message."""
    document = 0 if evidence.document is None else len(json.dumps(evidence.document, separators=(",", ":")))
    return document + len(evidence.message) + 64


class EvidenceCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[Hashable, tuple[int, RunEvidence]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> RunEvidence | None:
        held = self._items.get(key)
        if held is None:
            return None
        self._items.move_to_end(key)
        return held[1]

    def put(self, key: Hashable, evidence: RunEvidence) -> None:
        self._drop(key)
        size = size_of(evidence)
        if size > self.max_bytes:
            return  # read again at each refresh rather than held beyond the bound
        while self._items and self.bytes + size > self.max_bytes:
            self._drop(next(iter(self._items)))
        self._items[key] = (size, evidence)
        self.bytes += size

    def retain(self, used: Set[Hashable]) -> None:
        """Drop every entry not in ``used`` (the keys the last refresh's Runs used)."""
        for key in [k for k in self._items if k not in used]:
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        held = self._items.pop(key, None)
        if held is not None:
            self.bytes -= held[0]
