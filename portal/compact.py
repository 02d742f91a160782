"""A compact in-memory form of a result's JSON (portal/index.py's entries). Pure; no I/O.

At fleet scale (1.5 million results: 100,000 Nodes x 15 checks) one kilobyte of JSON per
result is 1.6 GiB, although most of it repeats: the check, profile version, Run and scope are
the same for every result of a (Run, check); the target for every result of a (Run, Node); the
state, reason, verification and cleanup for most results of a Run. So the JSON is kept as a
tuple of byte segments, each a contiguous slice of the JSON as serialised, cut before the
members named in :data:`CUTS`; segments equal to one already seen in the same batch (one Run's
results) are the same object. Joining the segments gives back the JSON byte for byte, whatever
the cuts found: a cut that is not found (another shape) only shares less, never changes what is
served.

Strings that key the index (workspace, Node, profile, check, Run uid, the Run's creation) are
interned, so a Node's name is held once however many results name it.
"""

import sys
from collections.abc import Iterable
from typing import Final

Segments = tuple[bytes, ...]
CUTS: Final = (
    b',"id":',
    b',"check":',
    b',"target":',
    b',"startedAt":',
    b',"observedAt":',
    b',"evidence":',
)
"""Where a result's JSON is cut (top-level members, in the envelope's order): the schema (one
for all); the id (one per result); check, version, Run and scope (one per Run and check); the target (one per Run
and Node); start and finish (one per result); observation, state, reason, message, verdict,
verification and cleanup (shared by a Run's results in the same state); evidence and details
schema (one per Run and check). A quote inside a JSON string is always escaped, so a cut, which
begins with a comma and a quote, can only match a member boundary; nested members come after
their own top-level member, and each cut is looked for after the previous one."""


def split(body: bytes) -> list[bytes]:
    """``body`` cut before each of :data:`CUTS` found in order; ``b"".join`` gives ``body`` back."""
    pieces: list[bytes] = []
    start = 0
    for cut in CUTS:
        at = body.find(cut, start)
        if at < 0:
            continue
        pieces.append(body[start:at])
        start = at
    pieces.append(body[start:])
    return pieces


class Packer:
    """Cuts the JSON of one batch of results (one Run's) and shares equal segments between them."""

    def __init__(self) -> None:
        self._seen: dict[bytes, bytes] = {}

    def pack(self, body: bytes) -> Segments:
        seen = self._seen
        return tuple(seen.setdefault(piece, piece) for piece in split(body))


def join(segments: Segments) -> bytes:
    return b"".join(segments)


def joined(many: Iterable[Segments], separator: bytes = b",") -> bytes:
    """The JSON of several results, separated: one join, no intermediate copies."""
    return separator.join(b"".join(segments) for segments in many)


def intern(value: str) -> str:
    """One object per distinct key string, however many results hold it."""
    return sys.intern(value)
