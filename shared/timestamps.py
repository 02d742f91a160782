"""Signal's timestamps: to the millisecond, and rendered as the API models render them.

Standard library only (the runner uses it without pydantic, and takes ``datetime`` and ``UTC``
from here: the same classes as the ``datetime`` module's, see below); ``shared.meta`` re-exports
``to_millisecond``. Pure; no I/O.
"""

TYPE_CHECKING = False  # mypy takes the name as true
if TYPE_CHECKING:
    from datetime import UTC, datetime, timedelta
else:
    try:  # the C classes themselves, without datetime.py's pure-Python twin of them, which that
        # module defines before replacing it with these: a sixth of the runner's start
        from _datetime import UTC, datetime, timedelta
    except ImportError:  # an interpreter without the C module
        from datetime import UTC, datetime, timedelta

__all__ = ["UTC", "datetime", "to_millisecond", "utc_text"]


def to_millisecond(moment: datetime) -> datetime:
    """``moment`` to the millisecond: the resolution of the times in Signal's evidence (whole
    seconds hid where a check's overhead goes)."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def utc_text(moment: datetime) -> str:
    """A UTC ``moment`` exactly as pydantic's JSON mode writes it: ISO 8601 with a ``Z``,
    six fractional digits unless the microseconds are zero (``2026-12-02T15:04:05.123000Z``,
    ``2026-12-02T15:04:05Z``)."""
    if moment.utcoffset() != timedelta(0):
        raise ValueError(f"{moment!r} is not a UTC time")
    return moment.replace(tzinfo=None).isoformat() + "Z"
