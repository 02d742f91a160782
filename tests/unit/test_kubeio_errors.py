"""kubeio as the edge: which answers become which errors, what is retryable, Retry-After,
when a request is sent again, and the informer's backoff. Pure parts only; the behaviour
against a stopped API server is tests/integration/test_api_server_outage.py."""

import pytest

from kubeio.client import _may_resend, _retry_delay
from kubeio.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    TransportError,
    error_for,
    parse_retry_after,
)
from kubeio.informer import backoff_delay


@pytest.mark.parametrize(
    ("status", "reason", "kind", "retryable"),
    [
        pytest.param(404, "NotFound", NotFound, False, id="404"),
        pytest.param(409, "AlreadyExists", AlreadyExists, False, id="409 exists"),
        pytest.param(409, "Conflict", Conflict, False, id="409 conflict"),
        pytest.param(403, "Forbidden", Forbidden, False, id="403"),
        pytest.param(410, "Expired", Gone, False, id="410 gone"),
        pytest.param(422, "Invalid", Invalid, False, id="422"),
        pytest.param(429, "TooManyRequests", TooManyRequests, True, id="429"),
        pytest.param(500, "InternalError", ServerError, True, id="500"),
        pytest.param(503, "ServiceUnavailable", ServerError, True, id="503"),
        pytest.param(400, "BadRequest", ApiError, False, id="other 4xx"),
    ],
)
def test_error_for(status: int, reason: str, kind: type[ApiError], retryable: bool) -> None:
    error = error_for(status, {"reason": reason, "message": "m"}, "GET", "/p")
    assert type(error) is kind
    assert error.retryable is retryable
    assert (error.status, error.reason, error.message) == (status, reason, "m")


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        pytest.param(10**400, 3600.0, id="more digits than a float holds"),
        pytest.param(7200, 3600.0, id="longer than an hour"),
        pytest.param(True, None, id="a boolean"),
        pytest.param(0, None, id="zero"),
        pytest.param("5", None, id="a string"),
    ],
)
def test_retry_after_from_the_status_details_is_bounded(seconds: object, expected: float | None) -> None:
    body = {"kind": "Status", "reason": "TooManyRequests", "details": {"retryAfterSeconds": seconds}}
    assert error_for(429, body, "GET", "/p").retry_after == expected


def test_retry_after_from_the_status_details_when_no_header() -> None:
    body = {"reason": "TooManyRequests", "message": "slow down", "details": {"retryAfterSeconds": 3}}
    assert error_for(429, body, "GET", "/p").retry_after == 3.0
    assert error_for(429, body, "GET", "/p", retry_after=7.0).retry_after == 7.0, "the header wins"


def test_a_transport_error_is_a_retryable_api_error_that_says_what_failed() -> None:
    error = TransportError("ClientConnectorError: connection refused", "GET", "/api/v1/nodes")
    assert isinstance(error, ApiError)
    assert error.retryable
    assert error.status == 0
    assert str(error) == "GET /api/v1/nodes: no answer from the API server: ClientConnectorError: connection refused"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param("", None, id="empty"),
        pytest.param("5", 5.0, id="delta seconds"),
        pytest.param(" 12 ", 12.0, id="whitespace"),
        pytest.param("-1", None, id="negative is not a number of seconds"),
        pytest.param("soon", None, id="garbage"),
        pytest.param("Sun, 06 Nov 1994 08:49:47 GMT", 10.0, id="http date"),
        pytest.param("Sun, 06 Nov 1994 08:49:30 GMT", 0.0, id="http date in the past"),
        pytest.param("7200", 3600.0, id="longer than an hour: an hour"),
        pytest.param("9" * 400, 3600.0, id="more digits than a float holds"),
        pytest.param("9" * 5000, 3600.0, id="more digits than int() converts"),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    now = 784111777.0  # 1994-11-06T08:49:37Z
    assert parse_retry_after(value, now) == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("method", "error", "resend"),
    [
        pytest.param("GET", TransportError("reset", "GET", "/p"), True, id="read without answer"),
        pytest.param("GET", error_for(503, {}, "GET", "/p"), True, id="read answered 503"),
        pytest.param("GET", error_for(404, {}, "GET", "/p"), False, id="read answered 404"),
        pytest.param("POST", TransportError("reset", "POST", "/p"), False, id="write without answer may be applied"),
        pytest.param("PATCH", error_for(500, {}, "PATCH", "/p"), False, id="write answered 500 may be applied"),
        pytest.param("PUT", error_for(429, {}, "PUT", "/p"), True, id="write shed with 429 was not applied"),
        pytest.param("PATCH", error_for(409, {}, "PATCH", "/p"), False, id="conflict goes back to the caller"),
    ],
)
def test_may_resend(method: str, error: ApiError, resend: bool) -> None:
    assert _may_resend(method, error) is resend


@pytest.mark.parametrize(
    ("retry_after", "attempt", "expected"),
    [
        pytest.param(None, 0, 0.2, id="first retry"),
        pytest.param(None, 2, 0.8, id="doubling"),
        pytest.param(None, 10, 5.0, id="capped"),
        pytest.param(2.0, 0, 2.0, id="Retry-After honoured"),
        pytest.param(120.0, 0, 5.0, id="a long Retry-After goes back to the work queue"),
    ],
)
def test_retry_delay(retry_after: float | None, attempt: int, expected: float) -> None:
    error = error_for(429, {}, "GET", "/p", retry_after=retry_after)
    assert _retry_delay(error, attempt) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("failures", "rand", "expected"),
    [
        pytest.param(1, 0.5, 0.5, id="first"),
        pytest.param(3, 0.5, 2.0, id="doubling"),
        pytest.param(9, 0.5, 10.0, id="capped"),
        pytest.param(1, 0.0, 0.375, id="jitter low"),
    ],
)
def test_informer_backoff(failures: int, rand: float, expected: float) -> None:
    assert backoff_delay(failures, rand=rand) == pytest.approx(expected)
