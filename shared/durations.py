"""Go-style duration strings ("90s", "1h30m") as used in Kubernetes APIs.

Parsing and formatting only; pure. The CRD schema accepts the same grammar (pattern)
and CEL's ``duration()`` checks positivity on the API server.
"""

import re
from datetime import timedelta
from typing import Final

DURATION_PATTERN: Final = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class DurationError(ValueError):
    """A string is not a Go-style duration."""


def parse_duration(text: str) -> timedelta:
    """Parse ``text`` ("1h30m", "45s", "250ms") into a timedelta; raise DurationError."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise DurationError(f"{text!r} is not a duration such as '90s', '15m' or '1h30m'")
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text))
    return timedelta(seconds=seconds)


def format_seconds(seconds: int) -> str:
    """Format whole seconds as the shortest Go-style duration ("1h2m3s")."""
    if seconds < 0:
        raise DurationError(f"negative duration: {seconds}s")
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    parts.append(f"{secs}s" if secs or not (hours or minutes) else "")
    return "".join(parts)
