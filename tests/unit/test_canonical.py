"""shared/canonical.py writes exactly the bytes of ``json.dumps`` with the canonical options
(the evidence's digests are taken over them), refuses what it refuses, and imports no ``json``."""

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.canonical import canonical_json
from shared.verdict import Verdict

REPO = Path(__file__).resolve().parents[2]


def reference(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


CASES: list[Any] = [
    {},
    [],
    "",
    "top-level text",
    0,
    -1,
    2**70,
    1.5,
    -0.0,
    1e-300,
    1.7976931348623157e308,
    0.1 + 0.2,
    True,
    None,
    {"b": 1, "a": [1, "é", {"z": None, "y": True}]},
    {'quote"back\\slash': "tab\tnew\nline\r\x00\x1f\x7f"},
    {"emoji": "\U0001f600", "bom": "\ufeff", "line separator": "\u2028"},
    {"verdict": Verdict.PASS, "nested": {"verdict": [Verdict.FAIL, Verdict.INCONCLUSIVE]}},
    {"tuple": (1, 2, ("x",))},
    {"Z": 1, "a": 2, "_": 3, "é": 4, "": 5},
]


@pytest.mark.parametrize("document", CASES, ids=range(len(CASES)))
def test_the_bytes_are_json_dumps_canonical_bytes(document: Any) -> None:
    assert canonical_json(document) == reference(document)


def _random_document(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(2**64), 2**64)
    if kind == 2:
        return rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-20, 20)
    if kind in (3, 4):
        # Control characters, ASCII, and any code point (lone surrogates included).
        points = (rng.choice([rng.randrange(0x20), rng.randrange(0x80), rng.randrange(0x2FFFF)]) for _ in range(12))
        return "".join(chr(p) for p in points)
    if kind == 5:
        return [_random_document(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {f"k{rng.randrange(50)}": _random_document(rng, depth + 1) for _ in range(rng.randrange(6))}


def test_random_documents_match_json_dumps() -> None:
    rng = random.Random(20261205)
    for _ in range(2000):
        document = _random_document(rng)
        try:
            expected = reference(document)
        except UnicodeEncodeError:  # a lone surrogate: refused alike below
            with pytest.raises(UnicodeEncodeError):
                canonical_json(document)
            continue
        assert canonical_json(document) == expected


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_refused(number: float) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"value": [number]})


def test_what_json_cannot_write_is_refused_with_its_type() -> None:
    with pytest.raises(TypeError, match="Object of type bytes is not JSON serializable"):
        canonical_json({"raw": b"x"})
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        canonical_json([{1}])


def test_a_document_that_contains_itself_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        canonical_json(loop)
    # The markers are per document: the next one is written as usual.
    assert canonical_json([[1], [1]]) == b"[[1],[1]]"


def test_keys_are_written_as_json_dumps_writes_them() -> None:
    # Not Signal's documents' shape (their keys are text), but the same bytes all the same.
    document = {2: "int", 1.5: "float", True: "bool", None: "null"}
    with pytest.raises(TypeError):
        reference(document)  # sort_keys over mixed types
    with pytest.raises(TypeError):
        canonical_json(document)
    assert canonical_json({3: "a", 1: "b"}) == reference({3: "a", 1: "b"})


def test_canonical_json_imports_no_json() -> None:
    code = "import sys; import shared.canonical as c; c.canonical_json({'a': [1.5]}); print(sorted(m for m in ('json', 're', 'enum') if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); {code}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
