"""Attribute docstrings become field descriptions when a schema is generated
(shared/schema_docs.py), not when a model class is created: no Signal process reads its models'
source to start, and the published schemas still carry every field's text."""

import json
import subprocess
import sys
from typing import Annotated

import pytest
from pydantic import Field

from shared.crdgen import structural_schema
from shared.meta import WireModel
from shared.profile import CertificationProfile
from shared.schema_docs import DocumentedSchema, attribute_docstrings, field_docstring


class Base(WireModel):
    plain: int = 0
    """The plain one.

    Indented continuation."""
    overridden: int = 0
    """Base's text."""
    explicit: Annotated[int, Field(description="From Field.")] = 0
    """Loses to Field's description."""
    undocumented: int = 0
    not_a_docstring: int = 0
    42  # noqa: B018 - an expression that is not a string documents nothing


class Child(Base):
    overridden: int = 1
    added: str = ""
    """Child's own."""


@pytest.mark.parametrize(
    ("model", "field", "expected"),
    [
        (Base, "plain", "The plain one.\n\nIndented continuation."),
        (Base, "overridden", "Base's text."),
        (Base, "explicit", "Loses to Field's description."),
        (Base, "undocumented", None),
        (Base, "not_a_docstring", None),
        (Child, "plain", "The plain one.\n\nIndented continuation."),  # inherited as annotated
        (Child, "overridden", None),  # re-annotated without text: Base's does not carry over
        (Child, "added", "Child's own."),
        (Child, "missing", None),
    ],
)
def test_field_docstring(model: type[WireModel], field: str, expected: str | None) -> None:
    assert field_docstring(model, field) == expected


def test_only_the_class_own_annotations() -> None:
    assert set(attribute_docstrings(Child)) == {"added"}


def test_schema_descriptions() -> None:
    properties = Child.model_json_schema(schema_generator=DocumentedSchema)["properties"]
    described = {name: prop.get("description") for name, prop in properties.items()}
    assert described == {
        "plain": "The plain one.\n\nIndented continuation.",
        "overridden": None,
        "explicit": "From Field.",
        "undocumented": None,
        "notADocstring": None,
        "added": "Child's own.",
    }
    # Without the generator a schema has only Field's text: the models do not carry docstrings.
    plain = Child.model_json_schema()["properties"]
    assert [name for name, prop in plain.items() if "description" in prop] == ["explicit"]


def test_nested_models_are_described() -> None:
    spec = structural_schema(CertificationProfile)["properties"]["spec"]
    assert spec.get("description")
    assert all(prop.get("description") for prop in spec["properties"].values()), json.dumps(spec)[:2000]


READS_SOURCE = """
import inspect, sys
calls = []
original = inspect.findsource
def counting(obj):
    calls.append(getattr(obj, "__qualname__", repr(obj)))
    return original(obj)
inspect.findsource = counting
import adapter.main, controller.process.main, portal.main, shared.envelope, shared.profile, shared.run
print(len(calls), calls[:5])
"""


def test_starting_reads_no_source() -> None:
    """Importing the services' entrypoints reads no source file: before shared/schema_docs.py,
    pydantic read each model's class body here (about 30 ms of every start)."""
    out = subprocess.run([sys.executable, "-c", READS_SOURCE], check=True, capture_output=True, text=True).stdout
    assert out.startswith("0 "), out
