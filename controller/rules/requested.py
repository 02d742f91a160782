"""The Nodes requested for each profile, kept in selection order from the Node cache's events,
so that choosing a group neither scans nor sorts the fleet (issue 15, goal 4). Pure: the
caller feeds it the informer's ``(key, old, new)`` changes (controller/reconcile/state.py).

Every change of the cache reaches ``on_node``, a re-list included (kubeio/informer.py notifies
each difference), so the index holds exactly the cached Nodes whose request label names a
profile; ``in_order`` still reads each view from the cache as it is now."""

import bisect
from collections.abc import Iterator, Mapping

from controller.rules.nodes import NodeView
from shared import keys

Entry = tuple[str, str, str]
"""(name, uid, cache key): sorted by name, then uid, as selection takes Nodes."""


def _entry(key: str, view: NodeView | None) -> tuple[str, Entry] | None:
    if view is None:
        return None
    profile = view.labels.get(keys.CERTIFY_LABEL)
    return (profile, (view.name, view.uid, key)) if profile else None


class RequestIndex:
    def __init__(self) -> None:
        self._by_profile: dict[str, list[Entry]] = {}

    def on_node(self, key: str, old: NodeView | None, new: NodeView | None) -> None:
        before, after = _entry(key, old), _entry(key, new)
        if before == after:
            return
        if before is not None:
            profile, entry = before
            entries = self._by_profile.get(profile, [])
            at = bisect.bisect_left(entries, entry)
            if at < len(entries) and entries[at] == entry:
                del entries[at]
            if not entries:
                self._by_profile.pop(profile, None)
        if after is not None:
            profile, entry = after
            bisect.insort(self._by_profile.setdefault(profile, []), entry)

    def count(self, profile: str) -> int:
        return len(self._by_profile.get(profile, ()))

    def in_order(self, profile: str, cache: Mapping[str, NodeView]) -> Iterator[NodeView]:
        """The cached Nodes requested for ``profile``, by name then uid, lazily."""
        for _, _, key in tuple(self._by_profile.get(profile, ())):
            view = cache.get(key)
            if view is not None and view.labels.get(keys.CERTIFY_LABEL) == profile:
                yield view
