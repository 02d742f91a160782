"""The runner result's wire rules that need no pydantic: its limits, the strict JSON parser,
the measurements check and the launcher report's compact host layout.

Standard library only: the runner (one process per check participant and per MPI rank)
imports this module and never pydantic, so that it starts in tens of milliseconds. ``json``
and ``re`` are imported by the functions that parse and check (their import, with the ``enum``
and ``functools`` that ``re`` loads, was a sixth of the start of a runner whose script writes
no measurements).
``shared.result`` builds the typed models on top of it, for the adapter. Pure; no I/O.

Measurements protocol (documented for script authors): a script may write one JSON object
to the file named by ``$SIGNAL_MEASUREMENTS_FILE``: at most ``MAX_MEASUREMENTS`` entries,
names matching ``MEASUREMENT_NAME_PATTERN``, values numbers, booleans or strings of at
most ``MAX_MEASUREMENT_TEXT`` characters. A file that breaks these rules makes the result
Inconclusive (never Pass).

Exit-code protocol (documented for script authors): 0 is Pass; ``INCONCLUSIVE_EXIT_CODE`` (3)
says "my evidence is insufficient" and makes the result Inconclusive (retried like any other
Inconclusive, shown as Unknown); any other non-zero exit is Fail, which is reserved for a
proven fault.
"""

from __future__ import annotations

import math
import os

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Final, NamedTuple
else:
    from shared.lighttuple import NamedTuple

RESULT_SCHEMA: Final = "projectsignal.dev/runner-result/v1"
INCONCLUSIVE_EXIT_CODE: Final = 3
"""A script's (or an MPI rank's) exit code for "my evidence is insufficient": Inconclusive."""
MAX_RESULT_BYTES: Final = 4096
MAX_MEASUREMENTS: Final = 16
MAX_MEASUREMENT_TEXT: Final = 128
MEASUREMENT_NAME_PATTERN: Final = r"^[a-z][a-z0-9_.-]{0,62}$"
MAX_TAIL_CHARS: Final = 1024
MAX_REASON_CHARS: Final = 256
MAX_NAME_CHARS: Final = 253
"""A node, Pod or host name in a result (a DNS subdomain's length)."""
MAX_UID_CHARS: Final = 64

MeasurementMap = dict[str, bool | int | float | str]


class ResultError(ValueError):
    """A termination message or measurements file is not a valid runner document."""


def validate_measurements(value: Any) -> MeasurementMap:
    """Check a measurements object against the documented protocol; raise ResultError."""
    if not isinstance(value, dict):
        raise ResultError("measurements must be a JSON object")
    if len(value) > MAX_MEASUREMENTS:
        raise ResultError(f"at most {MAX_MEASUREMENTS} measurements are allowed, got {len(value)}")
    import re  # noqa: PLC0415 - here alone: the module docstring says why

    for name, item in value.items():
        if not isinstance(name, str) or not re.fullmatch(MEASUREMENT_NAME_PATTERN, name):
            raise ResultError(f"measurement name {name!r} must match {MEASUREMENT_NAME_PATTERN}")
        if isinstance(item, float) and not math.isfinite(item):
            raise ResultError(f"measurement {name!r} is not a finite number")
        if isinstance(item, str) and len(item) > MAX_MEASUREMENT_TEXT:
            raise ResultError(f"measurement {name!r} is longer than {MAX_MEASUREMENT_TEXT} characters")
        if isinstance(item, str) and not is_unicode(item):
            raise ResultError(f"measurement {name!r} is not valid Unicode (a lone surrogate)")
        if not isinstance(item, bool | int | float | str):
            raise ResultError(f"measurement {name!r} must be a number, a boolean or a string")
    return value


def is_unicode(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (no lone surrogate, which Python's ``json``
    and ``os.environ`` can produce and the result's models refuse)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ResultError(f"duplicate key {key!r}")
        result[key] = value
    return result


def strict_json(payload: bytes, limit: int) -> Any:
    """Parse exactly one JSON value of at most ``limit`` bytes, refusing duplicate keys,
    NaN/Infinity, trailing data, nesting too deep for the parser and integers of too many
    digits; raise ResultError (and nothing else) for any of them."""
    if len(payload) > limit:
        raise ResultError(f"{len(payload)} bytes exceeds the limit of {limit}")
    import json  # noqa: PLC0415 - here alone: the module docstring says why

    try:
        text = payload.decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant)
    except ResultError:
        raise
    except UnicodeDecodeError as exc:
        raise ResultError(f"not UTF-8: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ResultError(f"not a single JSON document: {exc.msg} at position {exc.pos}") from exc
    # What the parser itself cannot take, from a document its writer chose (a hostile script
    # or Node): it is malformed like any other, never an exception that stops the caller.
    except RecursionError as exc:
        raise ResultError("not a single JSON document: nested too deeply for the parser") from exc
    except ValueError as exc:  # an integer of more digits than Python converts (4300 by default)
        import sys  # noqa: PLC0415 - always loaded; local, like json, with its only use

        digits = sys.get_int_max_str_digits()
        raise ResultError(f"not a single JSON document: a number of more than {digits} digits") from exc


def _reject_constant(name: str) -> Any:
    raise ResultError(f"non-standard JSON constant {name}")


class RankResult(NamedTuple):
    """One MPI rank as the launcher saw it (``host``: short host name, first DNS label)."""

    rank: int
    host: str
    exit_code: int


def short_host(name: str) -> str:
    return name.split(".", 1)[0]


RankRow = tuple[int, int, int]
"""``[rank, host index, exit code]`` of a launcher report (host index -1: not in the hostfile)."""


def host_layout(hosts: Sequence[str], ranks: Sequence[RankResult]) -> tuple[str, list[str], list[RankRow]]:
    """The launcher report's compact form of ``hosts`` (hostfile order) and ``ranks``: the
    short host names' common prefix, their suffixes, and one row per rank."""
    names = [short_host(h) for h in hosts]
    prefix = os.path.commonprefix(names) if len(names) > 1 else ""  # noqa: RUF071 - characters intended
    table = [
        (r.rank, names.index(short_host(r.host)) if short_host(r.host) in names else -1, r.exit_code) for r in ranks
    ]
    return prefix, [n[len(prefix) :] for n in names], table


def layout_hosts(prefix: str, suffixes: Sequence[str]) -> list[str]:
    return [prefix + s for s in suffixes]


def layout_ranks(hosts: Sequence[str], table: Sequence[RankRow]) -> list[RankResult]:
    return [RankResult(r, hosts[i] if 0 <= i < len(hosts) else "", code) for r, i, code in table]
