"""``NamedTuple`` class syntax without importing ``typing``, for the runner's start.

The runner starts once per check participant and per MPI rank, and ``import typing`` alone was
about a quarter of its start (8 of 31 ms of CPU on the development machine: typing pulls in
much that the rest of the runner never needs). Its modules therefore import ``typing`` only
for the type checker::

    TYPE_CHECKING = False  # mypy takes any name TYPE_CHECKING as true
    if TYPE_CHECKING:
        from typing import NamedTuple
    else:
        from shared.lighttuple import NamedTuple

and at run time this ``NamedTuple`` builds the same class ``typing.NamedTuple`` would for the
class bodies Signal writes: ``collections.namedtuple`` of the annotated fields, in order, with
their defaults, plus the body's docstring, methods, properties and class methods. Field
annotations are not evaluated (those modules use ``from __future__ import annotations``). What
``typing.NamedTuple`` refuses, this refuses too: a field without a default after one with a
default, a field name starting with an underscore, and an attribute that would overwrite one
of the tuple's own (``_asdict``, ``_replace``, ``_fields``...). Standard library only; pure.
"""

from __future__ import annotations

import collections

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_namedtuple: Any = collections.namedtuple  # called with names known at run time only
_CLASS_KEYS = frozenset({"__module__", "__qualname__", "__annotations__", "__doc__", "__orig_bases__"})
"""Names of a class body that describe the class rather than add to it."""
_PROTECTED = frozenset(
    {"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults", "_make", "_replace", "_asdict"}
)
"""What ``typing.NamedTuple`` refuses to let a class body overwrite."""


class _Builder(type):
    """Metaclass of :class:`NamedTuple`: a subclass's body becomes a ``collections.namedtuple``."""

    def __new__(mcls, typename: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        if namespace.get("_lighttuple_root"):
            return super().__new__(mcls, typename, bases, namespace)
        if bases != (NamedTuple,):
            raise TypeError(f"{typename}: a NamedTuple has no other base classes")
        if "__classcell__" in namespace:
            raise TypeError(f"{typename}: a NamedTuple's methods cannot use super() or __class__")
        fields = list(namespace.get("__annotations__", {}))
        defaults: list[Any] = []
        for name in fields:
            if name.startswith("_"):
                raise ValueError(f"{typename}: field names cannot start with an underscore: {name!r}")
            if name in namespace:
                defaults.append(namespace[name])
            elif defaults:
                raise TypeError(f"{typename}: non-default namedtuple field {name} cannot follow default field(s)")
        made = _namedtuple(typename, fields, defaults=defaults, module=namespace.get("__module__"))
        made.__qualname__ = namespace.get("__qualname__", typename)
        made.__annotations__ = dict(namespace.get("__annotations__", {}))
        if namespace.get("__doc__") is not None:
            made.__doc__ = namespace["__doc__"]
        for key, value in namespace.items():
            if key in _CLASS_KEYS or key in fields:
                continue
            if key in _PROTECTED:
                raise AttributeError(f"{typename}: cannot overwrite NamedTuple attribute {key}")
            setattr(made, key, value)
            if hasattr(value, "__set_name__"):
                value.__set_name__(made, key)
        return made


class NamedTuple(metaclass=_Builder):
    """Base class of the runner's named tuples (see the module docstring); never a base of the
    classes it builds, as with ``typing.NamedTuple``."""

    _lighttuple_root = True
