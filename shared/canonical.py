"""Canonical JSON: sorted keys, UTF-8, no insignificant white space, no NaN or infinities.

Its own module, so that the runner (one process per participant and per MPI rank) renders its
result without ``shared.digests``' base64 and hashlib (OpenSSL); ``shared.digests`` re-exports
it for everyone else. Pure; no I/O.

The bytes are ``json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
allow_nan=False)``'s, made by the same C encoder ``json.dumps`` itself calls for those options
(``_json.make_encoder``, called as ``json.encoder`` calls it), without importing the ``json``
package: its decoder and encoder modules import ``re`` (and through it ``enum`` and
``functools``), a sixth of a runner's start, and a runner that reads no measurements parses
no JSON. Where the interpreter has no such encoder (or builds it differently), ``json.dumps``
itself is used: the same bytes either way (tests/unit/test_canonical.py).
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_ITEM_SEPARATOR = ","
_KEY_SEPARATOR = ":"


def _not_serialisable(value: Any) -> Any:
    """What ``json.JSONEncoder.default`` does: refuse, naming the type."""
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _c_encoder() -> Callable[[Any], Any] | None:
    """A maker of the C encoder json.dumps uses for canonical options, or None (then json.dumps)."""
    try:
        from _json import encode_basestring, make_encoder  # noqa: PLC0415
    except ImportError:  # pragma: no cover - CPython has it
        return None

    def encoder(markers: Any) -> Any:
        # json.encoder's own call: markers, default, string encoder, indent, key and item
        # separators, sort_keys, skipkeys, allow_nan.
        return make_encoder(
            markers, _not_serialisable, encode_basestring, None, _KEY_SEPARATOR, _ITEM_SEPARATOR, True, False, False
        )

    try:
        encoder({})
    except TypeError:  # pragma: no cover - an interpreter whose encoder takes other arguments
        return None
    return encoder


_ENCODER = _c_encoder()


def canonical_json(document: Any) -> bytes:
    """Canonical serialisation: sorted keys, UTF-8, no insignificant white space."""
    if _ENCODER is None:  # pragma: no cover - CPython has the C encoder
        import json  # noqa: PLC0415

        text = json.dumps(
            document, sort_keys=True, ensure_ascii=False, separators=(_ITEM_SEPARATOR, _KEY_SEPARATOR), allow_nan=False
        )
    else:
        # A fresh markers map per document, as json.dumps's check_circular makes: a document
        # that contains itself is refused (ValueError), not recursed into.
        text = "".join(_ENCODER({})(document, 0))
    return text.encode("utf-8")
