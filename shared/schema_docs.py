"""Field descriptions for published JSON Schemas, taken from attribute docstrings when a schema
is generated rather than when a model class is created.

pydantic's ``use_attribute_docstrings`` reads every model's source at class creation (it
tokenizes each class body and parses it twice), which cost every Signal process about 30 ms of
its start, the adapter's at every check's step included (issue 15), for text only a schema
uses. ``DocumentedSchema`` gives a ``WireModel``'s fields the same descriptions at schema
time: a field's docstring is the string literal right after its annotated assignment in the
class that annotates it, cleaned as ``inspect.cleandoc`` does; an explicit
``Field(description=...)`` wins. Pass it as ``schema_generator=`` to ``model_json_schema``
(shared/crdgen.py, shared/envelope.py, portal/openapi.py). Pure; reads only source files.
"""

import ast
import inspect
import textwrap
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from shared.meta import WireModel


def attribute_docstrings(cls: type) -> dict[str, str]:
    """The docstrings of the attributes ``cls`` itself annotates (not its bases')."""
    return dict(_own_docstrings(cls))


@cache
def _own_docstrings(cls: type) -> tuple[tuple[str, str], ...]:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return ()
    node = ast.parse(textwrap.dedent(source)).body[0]
    if not isinstance(node, ast.ClassDef):
        return ()
    found: list[tuple[str, str]] = []
    for previous, statement in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(previous, ast.AnnAssign)
            and isinstance(previous.target, ast.Name)
            and isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            found.append((previous.target.id, inspect.cleandoc(statement.value.value)))
    return tuple(found)


def field_docstring(model: type[BaseModel], field: str) -> str | None:
    """The docstring of ``field`` in the class of ``model``'s MRO that annotates it last."""
    for cls in model.__mro__:
        if field in inspect.get_annotations(cls):
            return attribute_docstrings(cls).get(field)
    return None


class DocumentedSchema(GenerateJsonSchema):
    """pydantic's JSON Schema generator, with each ``WireModel`` field's docstring as its
    description where the field declares none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._models: list[type[BaseModel]] = []

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        self._models.append(schema["cls"])
        try:
            return super().model_schema(schema)
        finally:
            self._models.pop()

    def model_fields_schema(self, schema: core_schema.ModelFieldsSchema) -> JsonSchemaValue:
        model = self._models[-1] if self._models else None
        if model is None or not issubclass(model, WireModel):
            return super().model_fields_schema(schema)
        fields: dict[str, core_schema.ModelField] = {}
        for name, field in schema["fields"].items():
            metadata: dict[str, Any] = dict(field.get("metadata") or {})
            updates = dict(metadata.get("pydantic_js_updates") or {})
            doc = field_docstring(model, name)
            if doc and "description" not in updates:
                metadata["pydantic_js_updates"] = {**updates, "description": doc}
                fields[name] = {**field, "metadata": metadata}
            else:
                fields[name] = field
        return super().model_fields_schema({**schema, "fields": fields})
