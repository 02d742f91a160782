"""Canonical JSON: sorted keys, UTF-8, no insignificant white space, no NaN or infinities.

Its own module, importing ``json`` alone, so that the runner (one process per participant and
per MPI rank) renders its result without ``shared.digests``' base64 and hashlib (OpenSSL);
``shared.digests`` re-exports it for everyone else. Pure; no I/O.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from typing import Any


def canonical_json(document: Any) -> bytes:
    """Canonical serialisation: sorted keys, UTF-8, no insignificant white space."""
    return json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
        "utf-8"
    )
