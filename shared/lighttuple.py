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

and at run time this ``NamedTuple`` builds, for the class bodies Signal writes, the class
``typing.NamedTuple`` would: a tuple of the annotated fields, in order, with their defaults, the
same attributes as ``collections.namedtuple`` (``_fields``, ``_field_defaults``, ``_make``,
``_replace``, ``_asdict``, a field's accessor, ``__repr__``, ``__match_args__``, pickling), plus the
body's docstring, methods, properties and class methods. It is built without
``collections.namedtuple``: that module's import and the source it compiles for each class were a
tenth of the runner's start (tests/unit/test_lighttuple.py holds both to the same behaviour).
Field annotations are not evaluated (those modules use ``from __future__ import annotations``).
What ``typing.NamedTuple`` refuses, this refuses too: a field without a default after one with a
default, a field name starting with an underscore, and an attribute that would overwrite one
of the tuple's own (``_asdict``, ``_replace``, ``_fields``...). Standard library only; pure.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

try:
    from _collections import _tuplegetter  # type: ignore[import-not-found]  # what namedtuple gives a field
except ImportError:  # an interpreter without it: a property reading the same item

    def _tuplegetter(index: int, doc: str) -> Any:
        return property(lambda self: self[index], doc=doc)


_CLASS_KEYS = frozenset({"__module__", "__qualname__", "__annotations__", "__doc__", "__orig_bases__"})
"""Names of a class body that describe the class rather than add to it."""
_PROTECTED = frozenset(
    {"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults", "_make", "_replace", "_asdict"}
)
"""What ``typing.NamedTuple`` refuses to let a class body overwrite."""


class _Builder(type):
    """Metaclass of :class:`NamedTuple`: a subclass's body becomes a tuple class (``_tuple_class``)."""

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
        made = _tuple_class(typename, fields, dict(zip(fields[len(fields) - len(defaults) :], defaults, strict=True)))
        made.__module__ = namespace.get("__module__", made.__module__)
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


def _tuple_class(typename: str, fields: list[str], defaults: dict[str, Any]) -> Any:
    """What ``collections.namedtuple(typename, fields, defaults=...)`` returns, without compiling
    source: its arguments are bound by :func:`_bind` instead."""
    names = tuple(fields)
    count = len(names)

    def __new__(cls: type[tuple[Any, ...]], *args: Any, **kwargs: Any) -> Any:  # noqa: N807 - the tuple's own
        return tuple.__new__(cls, _bind(typename, names, defaults, args, kwargs))

    def _make(cls: type[tuple[Any, ...]], iterable: Iterable[Any]) -> Any:
        made = tuple.__new__(cls, iterable)
        if len(made) != count:
            raise TypeError(f"Expected {count} arguments, got {len(made)}")
        return made

    def _replace(self: tuple[Any, ...], /, **changes: Any) -> Any:
        made = self._make(changes.pop(name, value) for name, value in zip(names, self, strict=True))  # type: ignore[attr-defined]
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return made

    def __repr__(self: tuple[Any, ...]) -> str:  # noqa: N807 - the tuple's own
        shown = ", ".join(f"{name}={value!r}" for name, value in zip(names, self, strict=True))
        return f"{self.__class__.__name__}({shown})"

    def _asdict(self: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(names, self, strict=True))

    def __getnewargs__(self: tuple[Any, ...]) -> tuple[Any, ...]:  # noqa: N807 - the tuple's own
        return tuple(self)

    __new__.__qualname__ = f"{typename}.__new__"
    body: dict[str, Any] = {
        "__doc__": f"{typename}({', '.join(names)})",
        "__slots__": (),
        "_fields": names,
        "_field_defaults": dict(defaults),
        "__new__": __new__,
        "_make": classmethod(_make),
        "_replace": _replace,
        "__repr__": __repr__,
        "_asdict": _asdict,
        "__getnewargs__": __getnewargs__,
        "__match_args__": names,
    }
    for index, name in enumerate(names):
        body[name] = _tuplegetter(index, f"Alias for field number {index}")
    return type(typename, (tuple,), body)


def _bind(typename: str, names: tuple[str, ...], defaults: dict[str, Any], args: Any, kwargs: Any) -> list[Any]:
    """``args`` and ``kwargs`` as the values of ``names`` in order, as Python binds a call to a
    function of those parameters with those defaults; the same ``TypeError``s."""
    if len(args) > len(names):
        given = len(args) + 1
        raise TypeError(f"{typename}.__new__() takes {len(names) + 1} positional arguments but {given} were given")
    values = list(args)
    for name in names[: len(args)]:
        if name in kwargs:
            raise TypeError(f"{typename}.__new__() got multiple values for argument {name!r}")
    missing = []
    for name in names[len(args) :]:
        if name in kwargs:
            values.append(kwargs.pop(name))
        elif name in defaults:
            values.append(defaults[name])
        else:
            missing.append(name)
    if missing:
        listed = ", ".join(map(repr, missing))
        raise TypeError(f"{typename}.__new__() missing {len(missing)} required argument(s): {listed}")
    if kwargs:
        raise TypeError(f"{typename}.__new__() got an unexpected keyword argument {next(iter(kwargs))!r}")
    return values
