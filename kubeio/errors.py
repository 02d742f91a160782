"""The API errors Signal distinguishes (after kopf's clients/errors.py).

Everything that can go wrong talking to the API server leaves kubeio as an ``ApiError``:
a non-2xx answer becomes the subclass for its status, and a request that got no answer at
all (connection refused or reset, a timeout, a truncated body) becomes a ``TransportError``.
No transport type leaks past this edge. ``retryable`` says whether
sending the same request again later can succeed; ``retry_after`` is the server's
Retry-After (seconds), when it sent one."""

import email.utils
import time
from typing import Any


class ApiError(RuntimeError):
    """A failed request: a non-2xx answer of the API server, or (``TransportError``) none."""

    retryable = False

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        method: str = "",
        path: str = "",
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{method} {path}: HTTP {status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class TransportError(ApiError):
    """No answer: the connection failed, was reset or timed out. Retryable; a write that
    failed this way may or may not have been applied (writes here are safe to repeat)."""

    retryable = True

    def __init__(self, message: str, method: str = "", path: str = "") -> None:
        super().__init__(0, "Transport", message, method, path)
        self.args = (f"{method} {path}: no answer from the API server: {message}".strip(),)


class NotFound(ApiError):
    pass


class Gone(ApiError):
    """410: a watch's resourceVersion is too old; list again."""


class Conflict(ApiError):
    """A resourceVersion or uid precondition failed, or an optimistic update lost a race."""


class AlreadyExists(ApiError):
    pass


class Forbidden(ApiError):
    pass


class Invalid(ApiError):
    pass


class TooManyRequests(ApiError):
    """429: the server shed the request before acting on it; retry after ``retry_after``."""

    retryable = True


class ServerError(ApiError):
    retryable = True


MAX_RETRY_AFTER = 3600.0
"""The longest Retry-After (header or ``details.retryAfterSeconds``) honoured, in seconds."""


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if absent or bad."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        # More digits than an hour has never converts (float() of 400 digits overflows, int() of
        # 5,000 is refused): any such wait is the longest Signal honours.
        return MAX_RETRY_AFTER if len(text) > 6 else min(float(text), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_for(status: int, body: Any, method: str, path: str, *, retry_after: float | None = None) -> ApiError:
    reason = body.get("reason", "") if isinstance(body, dict) else ""
    message = body.get("message", str(body)) if isinstance(body, dict) else str(body)
    if retry_after is None and isinstance(body, dict):
        details = body.get("details")
        seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0:
            retry_after = float(min(seconds, int(MAX_RETRY_AFTER)))
    kind: type[ApiError]
    if status == 404:
        kind = NotFound
    elif status == 410:
        kind = Gone
    elif status == 409 and reason == "AlreadyExists":
        kind = AlreadyExists
    elif status == 409:
        kind = Conflict
    elif status == 403:
        kind = Forbidden
    elif status == 422:
        kind = Invalid
    elif status == 429:
        kind = TooManyRequests
    elif status >= 500:
        kind = ServerError
    else:
        kind = ApiError
    return kind(status, reason, message, method, path, retry_after=retry_after)
