"""Kubernetes resource quantities ("500m", "64Gi", "8") as exact integers. Pure.

CPU is compared in millicores and everything else in whole units (bytes, devices), so
``parse_quantity(q, milli=True)`` is used for cpu only. Fractions round up, as a request
that needs part of a unit needs the whole unit.

Bounds. The text comes from a profile (the CRD's pattern admits "1e999999") and from Nodes
(whose kubelet may be hostile), so nothing here may cost more than a few integer operations:

* at most ``MAX_QUANTITY_CHARS`` characters, the profile schema's own limit for a quantity
  (shared/meta.py); the API server rewrites a Node's quantities in canonical form, which for
  any number within the bound below is under 40 characters;
* a magnitude of at most ``MAX_QUANTITY`` (2^63-1) units: k8s.io/apimachinery's
  resource.Quantity says no quantity may represent a number greater than 2^63-1 in magnitude,
  and the scheduler compares requests as 64-bit integers. Kubernetes caps a larger number;
  Signal refuses it (QuantityError), since no Node has such an amount and a profile asking for
  one is a mistake to show, not to round. The test is made on the number's digits and
  exponent before anything is multiplied out, so "1e999999" costs as little as "1".

Anything else is exact integer arithmetic: no float, no 28-digit ``Decimal`` rounding.
"""

import re
from typing import Final

MAX_QUANTITY: Final = 2**63 - 1
"""The largest magnitude, in units, of a quantity (Kubernetes' own, resource.Quantity)."""
MAX_QUANTITY_CHARS: Final = 64
"""The longest quantity text parsed (the profile schema's maxLength for a quantity)."""

_DECIMAL: Final = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_PATTERN = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_DIGITS_OF_MAX: Final = len(str(MAX_QUANTITY))
_VANISHING: Final = -128
"""A power of ten below which a mantissa of at most MAX_QUANTITY_CHARS digits, even times
2^60 and 1000 (under 10^86 in all), stays under one: a sliver of a unit, or of a millicore."""


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity, or not one within the bounds above."""


def parse_quantity(text: str | int, *, milli: bool = False) -> int:
    """The quantity as an integer number of units (or of thousandths with ``milli``)."""
    if isinstance(text, int):
        if abs(text) > MAX_QUANTITY:  # not written out: it may have more digits than str() converts
            raise QuantityError(_too_large(f"an integer of {text.bit_length()} bits"))
        return text * 1000 if milli else text
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(
            f"{text[:16]!r}... ({len(text)} characters) is longer than {MAX_QUANTITY_CHARS} characters; "
            "not a Kubernetes quantity Signal reads"
        )
    match = _PATTERN.match(text.strip())
    if not match or not (match.group(2) or match.group(3)):
        raise QuantityError(f"{text!r} is not a Kubernetes quantity (such as 500m, 64Gi or 8)")
    sign, whole, fraction, suffix = match.group(1), match.group(2), match.group(3) or "", match.group(4) or ""
    mantissa = int(whole + fraction or "0")  # at most MAX_QUANTITY_CHARS digits
    # "E" is exa and "Ei" exbi; only "e"/"E" followed by digits is an exponent.
    twos = _BINARY.get(suffix, 0)
    tens = _DECIMAL[suffix] if suffix in _DECIMAL else 0 if twos else int(suffix[1:])
    tens -= len(fraction)
    # The quantity is mantissa * 2**twos * 10**tens units.
    if mantissa == 0:
        return 0
    if len(str(mantissa)) - 1 + tens > _DIGITS_OF_MAX:  # at least 10**20: refused before 10**tens
        raise QuantityError(_too_large(repr(text)))
    negative = sign == "-"
    if tens < _VANISHING:
        return 0 if negative else 1
    numerator = mantissa << twos
    denominator = 1
    if tens >= 0:
        numerator *= 10**tens
    else:
        denominator = 10**-tens
    if numerator > MAX_QUANTITY * denominator:
        raise QuantityError(_too_large(repr(text)))
    if milli:
        numerator *= 1000
    # Round up: a positive fraction to the next unit, a negative one towards zero.
    whole_units = numerator // denominator if negative else -(-numerator // denominator)
    return -whole_units if negative else whole_units


def _too_large(what: str) -> str:
    return (
        f"{what} is larger than {MAX_QUANTITY} (2^63-1) units, the largest quantity Kubernetes "
        "represents; use a smaller quantity"
    )
