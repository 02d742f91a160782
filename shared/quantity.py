"""Kubernetes resource quantities ("500m", "64Gi", "8") as exact integers. Pure.

CPU is compared in millicores and everything else in whole units (bytes, devices), so
``parse_quantity(q, milli=True)`` is used for cpu only. Fractions round up, as a request
that needs part of a unit needs the whole unit.
"""

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_PATTERN = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity."""


def parse_quantity(text: str | int, *, milli: bool = False) -> int:
    """The quantity as an integer number of units (or of thousandths with ``milli``)."""
    if isinstance(text, int):
        return text * 1000 if milli else text
    match = _PATTERN.match(text.strip())
    if not match:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
        if suffix[:1] in {"e", "E"}:
            value *= Decimal(10) ** int(suffix[1:])
        else:
            value *= _SUFFIX[suffix]
    except InvalidOperation as exc:  # pragma: no cover - the pattern already guards this
        raise QuantityError(f"{text!r} is not a Kubernetes quantity") from exc
    if milli:
        value *= 1000
    return math.ceil(value)
