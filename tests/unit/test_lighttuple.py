"""shared/lighttuple.py: the runner's ``NamedTuple`` without ``typing`` builds what
``typing.NamedTuple`` builds for the same class body, and refuses what it refuses."""

from __future__ import annotations

import pickle
import typing
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from shared import lighttuple


def declare(base: Any) -> type:
    class Point(base):  # type: ignore[misc]
        """A point, with a label."""

        x: int
        y: int | None = None
        label: str = "p"

        @property
        def norm(self) -> int:
            return abs(self.x) + abs(self.y or 0)

        @classmethod
        def origin(cls) -> Point:
            return cls(0, 0)

        def moved(self, dx: int) -> Point:
            return self._replace(x=self.x + dx)

    return Point


Light, Typed = declare(lighttuple.NamedTuple), declare(typing.NamedTuple)

ALIKE: Sequence[tuple[str, Callable[[type], object]]] = [
    ("fields", lambda c: c._fields),
    ("defaults", lambda c: c._field_defaults),
    ("annotation keys", lambda c: list(c.__annotations__)),
    ("name", lambda c: (c.__name__, c.__qualname__.rsplit(".", 1)[-1], c.__module__)),
    ("doc", lambda c: c.__doc__),
    ("tuple", lambda c: (issubclass(c, tuple), tuple(c(1)), tuple(c(1, 2, "q")))),
    ("keywords", lambda c: c(x=3, label="k")),
    ("as dict", lambda c: c(1, 2)._asdict()),
    ("replace", lambda c: c(1)._replace(label="r")),
    ("property", lambda c: c(-2, 3).norm),
    ("classmethod", lambda c: (type(c.origin()) is c, tuple(c.origin()))),
    ("method", lambda c: tuple(c(1, 1).moved(4))),
    ("equality and hash", lambda c: (c(1, 2) == (1, 2, "p"), hash(c(1, 2)) == hash((1, 2, "p")))),
    ("repr", lambda c: repr(c(1, 2)).replace(c.__name__, "N")),
    ("not a subclass of its base", lambda c: c.__mro__[1:]),
]


@pytest.mark.parametrize(("what", "probe"), ALIKE, ids=[name for name, _ in ALIKE])
def test_the_same_class_as_typing_builds(what: str, probe: Callable[[type], object]) -> None:
    assert probe(Light) == probe(Typed), what


def test_a_missing_field_is_refused_as_by_typing() -> None:
    for cls in (Light, Typed):
        with pytest.raises(TypeError):
            cls()


class Pair(lighttuple.NamedTuple):
    left: int
    right: str = ""


def test_instances_pickle_by_their_module_and_name() -> None:
    assert (Pair.__module__, Pair.__qualname__) == (__name__, "Pair")
    assert pickle.loads(pickle.dumps(Pair(1, "r"))) == Pair(1, "r")


def refusals() -> list[tuple[str, Callable[[], object], type[Exception]]]:
    def default_first() -> object:
        class Bad(lighttuple.NamedTuple):
            a: int = 1
            b: int

        return Bad

    def underscore() -> object:
        class Bad(lighttuple.NamedTuple):
            _a: int

        return Bad

    def overwrite() -> object:
        class Bad(lighttuple.NamedTuple):
            a: int

            def _asdict(self) -> dict[str, Any]:
                return {}

        return Bad

    def second_base() -> object:
        class Bad(lighttuple.NamedTuple, dict):  # type: ignore[misc]
            a: int

        return Bad

    def uses_super() -> object:
        class Bad(lighttuple.NamedTuple):
            a: int

            def __repr__(self) -> str:
                return super().__repr__()

        return Bad

    return [
        ("a field without a default after one with", default_first, TypeError),
        ("a field name with a leading underscore", underscore, ValueError),
        ("a body overwriting the tuple's own attribute", overwrite, AttributeError),
        ("another base class", second_base, TypeError),
        ("super() in a method", uses_super, TypeError),
    ]


@pytest.mark.parametrize(("what", "declare_bad", "error"), refusals(), ids=[r[0] for r in refusals()])
def test_what_typing_refuses_is_refused(what: str, declare_bad: Callable[[], object], error: type[Exception]) -> None:
    with pytest.raises(error):
        declare_bad()
