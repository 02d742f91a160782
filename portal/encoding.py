"""Content-coding negotiation for the portal's answers (RFC 9110 §12.5.3). Pure; no I/O.
Used by portal/api.py.

A client that names gzip (or ``x-gzip``) with a weight above 0 gets gzip; so does one that
names ``*`` above 0 without naming gzip. ``gzip;q=0`` (or ``*;q=0`` without gzip) refuses it,
and no header at all means identity: the portal never sends a coding the client did not ask for.
A malformed weight counts as 0 (that coding is not chosen because of it).
"""

from typing import Final

GZIP: Final = frozenset({"gzip", "x-gzip"})


def _weight(parameters: list[str]) -> float:
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "q":
            try:
                weight = float(value.strip())
            except ValueError:
                return 0.0
            return weight if 0.0 <= weight <= 1.0 else 0.0
    return 1.0


def accepts_gzip(header: str | None) -> bool:
    """Whether an ``Accept-Encoding`` header lets the answer be gzip-compressed."""
    if not header:
        return False
    named: float | None = None
    anything: float | None = None
    for item in header.split(","):
        coding, *parameters = item.split(";")
        coding = coding.strip().lower()
        if coding in GZIP:
            named = max(named or 0.0, _weight(parameters))
        elif coding == "*":
            anything = _weight(parameters)
    if named is not None:
        return named > 0
    return anything is not None and anything > 0
