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
