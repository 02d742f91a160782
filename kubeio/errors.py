"""The API errors Signal distinguishes (after kopf's clients/errors.py)."""

from typing import Any


class ApiError(RuntimeError):
    """A non-2xx answer of the API server."""

    def __init__(self, status: int, reason: str, message: str, method: str = "", path: str = "") -> None:
        super().__init__(f"{method} {path}: HTTP {status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """A resourceVersion or uid precondition failed, or an optimistic update lost a race."""


class AlreadyExists(ApiError):
    pass


class Forbidden(ApiError):
    pass


class Invalid(ApiError):
    pass


class ServerError(ApiError):
    pass


def error_for(status: int, body: Any, method: str, path: str) -> ApiError:
    reason = body.get("reason", "") if isinstance(body, dict) else ""
    message = body.get("message", str(body)) if isinstance(body, dict) else str(body)
    kind: type[ApiError]
    if status == 404:
        kind = NotFound
    elif status == 409 and reason == "AlreadyExists":
        kind = AlreadyExists
    elif status == 409:
        kind = Conflict
    elif status == 403:
        kind = Forbidden
    elif status == 422:
        kind = Invalid
    elif status >= 500:
        kind = ServerError
    else:
        kind = ApiError
    return kind(status, reason, message, method, path)
