"""Opaque continuation tokens for result listings. Pure; no I/O. Used by portal/api.py.

A token encodes the sort key of the last result returned (workspace, Node, profile, check,
Run uid), never an offset: the next page starts strictly after that key in the index as it
is *then*, so results written between pages neither shift nor repeat anything, and every
result that existed when the walk started (and still exists) is returned exactly once.
"""

import base64
import binascii
import json
from typing import Final

Key = tuple[str, str, str, str, str]
TOKEN_VERSION: Final = 1
MAX_TOKEN_LENGTH: Final = 2048


class TokenError(ValueError):
    """A continuation token that this portal did not issue (or cannot read)."""


def encode_token(key: Key) -> str:
    raw = json.dumps({"v": TOKEN_VERSION, "k": list(key)}, separators=(",", ":"), ensure_ascii=True)
    return base64.urlsafe_b64encode(raw.encode("ascii")).decode("ascii").rstrip("=")


def decode_token(token: str) -> Key:
    if not token or len(token) > MAX_TOKEN_LENGTH or not token.isascii():
        raise TokenError("invalid continue token")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError) as exc:
        raise TokenError("invalid continue token") from exc
    if not isinstance(value, dict) or value.get("v") != TOKEN_VERSION:
        raise TokenError("invalid continue token")
    key = value.get("k")
    if not isinstance(key, list) or len(key) != 5 or not all(isinstance(part, str) for part in key):
        raise TokenError("invalid continue token")
    return key[0], key[1], key[2], key[3], key[4]
