import time

import pytest

from shared.quantity import QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("text", "milli", "expected"),
    [
        ("8", False, 8),
        ("500m", True, 500),
        ("1.5", True, 1500),
        ("2", True, 2000),
        ("64Gi", False, 64 * 2**30),
        ("1Ti", False, 2**40),
        ("1k", False, 1000),
        ("1e3", False, 1000),
        ("100Mi", False, 100 * 2**20),
        ("0.5", False, 1),
        ("250m", False, 1),
        (4, True, 4000),
        ("0", False, 0),
    ],
)
def test_parse(text: str | int, milli: bool, expected: int) -> None:
    assert parse_quantity(text, milli=milli) == expected


@pytest.mark.parametrize("text", ["", "lots", "1.2.3", "Gi", "5 Gi", "1Z"])
def test_rejects(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "milli", "expected"),
    [
        pytest.param("9223372036854775807", False, 2**63 - 1, id="the largest quantity Kubernetes holds"),
        pytest.param("-9223372036854775807", False, -(2**63 - 1), id="and its negative"),
        pytest.param("9223372036854775807", True, (2**63 - 1) * 1000, id="cpu of it in millicores"),
        pytest.param("7Ei", False, 7 * 2**60, id="the largest whole binary suffix that fits"),
        pytest.param("9.223372036854775807e18", False, 2**63 - 1, id="the bound written with an exponent"),
        pytest.param("1e-999999", False, 1, id="a vanishing fraction still rounds up to a unit"),
        pytest.param("1e-999999", True, 1, id="and to a millicore"),
        pytest.param("-1e-999999", False, 0, id="a vanishing negative rounds up to zero"),
        pytest.param("0e999999", False, 0, id="zero with any exponent is zero"),
        pytest.param("1.000000000000000000000000000001", False, 2, id="exact: no 28-digit rounding"),
        pytest.param("0.000000001", True, 1, id="a nanocore is a millicore"),
        pytest.param(2**63 - 1, False, 2**63 - 1, id="an integer at the bound"),
    ],
)
def test_parse_at_the_edges(text: str | int, milli: bool, expected: int) -> None:
    assert parse_quantity(text, milli=milli) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("9223372036854775808", "larger than 9223372036854775807", id="one past the bound"),
        pytest.param("-9223372036854775808", "larger than 9223372036854775807", id="one past the negative bound"),
        pytest.param("8Ei", "larger than", id="a binary suffix past the bound"),
        pytest.param("1e19", "larger than", id="an exponent past the bound"),
        pytest.param("1e999999", "larger than", id="a million-digit number (was 28 s of CPU)"),
        pytest.param("1e1000000", "larger than", id="past Decimal's exponent (was decimal.Overflow)"),
        pytest.param("1e" + "9" * 60, "larger than", id="an exponent of 60 digits"),
        pytest.param("1" * 65, "longer than 64 characters", id="longer than a profile may write"),
        pytest.param("1" * 1_000_000, "longer than 64 characters", id="a megabyte of digits"),
        pytest.param(2**63, "an integer of 64 bits is larger than", id="an integer past the bound"),
        pytest.param(10**5000, "is larger than", id="an integer of more digits than str() converts"),
    ],
)
def test_refuses_absurd_magnitudes_at_once(text: str | int, fragment: str) -> None:
    start = time.monotonic()
    with pytest.raises(QuantityError) as caught:
        parse_quantity(text)
    assert time.monotonic() - start < 0.1
    assert fragment in str(caught.value)
