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
    ("match args", lambda c: c.__match_args__),
    ("make", lambda c: (type(c._make([1, 2, "m"])) is c, tuple(c._make(iter([1, 2, "m"]))))),
    ("accessor", lambda c: (c.x.__doc__, c(5).x, c(5, 6).y, c(5).label, type(c.__dict__["x"]).__name__)),
    ("no instance dictionary", lambda c: (c.__slots__, hasattr(c(1), "__dict__"))),
    ("new arguments", lambda c: c(1, 2).__getnewargs__()),
    ("class pattern", lambda c: _matched(c, c(7, label="m"))),
    ("keyword after positional", lambda c: tuple(c(1, label="k", y=2))),
]


def _matched(cls: type, value: object) -> object:
    match value:
        case cls(x, y, label="m"):  # type: ignore[misc]
            return (x, y)
    return None


MISUSES: Sequence[tuple[str, Callable[[type], object]]] = [
    ("too many positional", lambda c: c(1, 2, "q", 4)),
    ("positional and keyword", lambda c: c(1, x=2)),
    ("unknown keyword", lambda c: c(1, z=3)),
    ("missing and unknown", lambda c: c(z=3)),
    ("make of the wrong length", lambda c: c._make([1, 2])),
    ("replace of an unknown field", lambda c: c(1)._replace(z=1)),
    ("attribute set", lambda c: setattr(c(1), "x", 2)),
]


@pytest.mark.parametrize(("what", "misuse"), MISUSES, ids=[name for name, _ in MISUSES])
def test_a_misuse_raises_what_typing_raises(what: str, misuse: Callable[[type], object]) -> None:
    raised = []
    for cls in (Light, Typed):
        with pytest.raises(Exception) as caught:  # noqa: PT011 - the same type from both is the assertion
            misuse(cls)
        raised.append(caught.type)
    assert raised[0] is raised[1], what


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
