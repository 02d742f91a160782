"""Cache transforms: what a cache keeps of an object, as little as its readers need (as
controller-runtime's cache transforms do). Pure (the controller's pure view modules use it; kubeio
is I/O and they may not import it).

* :func:`pruned` - a copy of a mapping without some of its keys, whose type remembers them:
  reading a dropped key (``[]``, ``get``, ``in``) raises :class:`DroppedField` instead of
  answering "absent", so code that starts reading a field the cache does not keep fails
  loudly (in its tests) rather than deciding on a missing value. Fail closed.
* :func:`shared_mapping` - one read-only mapping per distinct content (bounded): a fleet's Nodes
  mostly have the same resources, so their cached views can hold one mapping between them.
"""

import functools
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any


class DroppedField(KeyError):
    """A cache transform dropped this field: the cached object cannot answer for it."""


class Pruned(dict[str, Any]):
    """A dict from which a cache transform dropped ``DROPPED`` (set per subclass, see
    :func:`pruned`); reading one of those keys raises :class:`DroppedField`. Equal to, and
    serialised as, the plain dict of what it holds."""

    __slots__ = ()
    DROPPED: frozenset[str] = frozenset()
    WHERE = ""

    def _refuse(self, key: object) -> None:
        if key in self.DROPPED:
            raise DroppedField(
                f"{self.WHERE}.{key} is not kept by the cache (shared/cachetransform.py): read the object "
                "uncached, or keep the field in the cache's transform"
            )

    def __getitem__(self, key: str) -> Any:
        self._refuse(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._refuse(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._refuse(key)
        return super().__contains__(key)

    def __reduce__(self) -> Any:  # copy/pickle keep the guard
        return (type(self), (dict(self),))


@functools.cache
def _pruned_type(dropped: frozenset[str], where: str) -> type[Pruned]:
    return type("Pruned", (Pruned,), {"__slots__": (), "DROPPED": dropped, "WHERE": where})


def pruned(obj: Mapping[str, Any], drop: Iterable[str], where: str) -> Pruned:
    """``obj`` without the keys in ``drop``; reading one of them raises (``where`` names the
    field in the message, e.g. ``spec.participants[]``)."""
    dropped = frozenset(drop)
    kind = _pruned_type(dropped, where)
    return kind({k: v for k, v in obj.items() if k not in dropped})


@functools.lru_cache(maxsize=4096)
def _shared(items: tuple[tuple[str, Any], ...]) -> Mapping[str, Any]:
    return MappingProxyType(dict(items))


def shared_mapping(items: Iterable[tuple[str, Any]]) -> Mapping[str, Any]:
    """A read-only mapping of ``items`` (hashable values), the same object for the same items
    (in order) while it is among the 4,096 most recently asked for."""
    return _shared(tuple(items))
