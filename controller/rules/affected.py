"""Which work-queue keys a change of a cached object affects, in the order they are queued
(controller/process/loop.py adds them as the caches report each change). Pure: the caller
passes the old and new views and the little it needs of the other caches.

* a Run: its own key; when it appears, goes or changes phase, also its profile (old and new)
  and the Node groups (budgets, orphans, retention);
* a profile: its own key; when its generation changed, also each of its Runs;
* a Node: the profile its request label names and the Run of this namespace its reservation
  names, before and after the change; when the reservation changed, every profile and the
  Node groups (a freed or taken Node changes every budget and the orphan picture);
* a Workflow: the Run its label names, before and after; when it appears or goes, the Node
  groups."""

from collections.abc import Iterable, Mapping
from typing import Any

from controller.rules.nodes import NodeView
from controller.rules.queuekeys import GROUPS, Key, Kind
from controller.rules.runview import RunView
from shared import keys


def _name(cache_key: str) -> str:
    """The object's name from its cache key (``namespace/name``, or ``/name`` if cluster-scoped)."""
    return cache_key.rpartition("/")[2]


def _generation(obj: Mapping[str, Any] | None) -> object:
    return ((obj or {}).get("metadata") or {}).get("generation")


def by_run(cache_key: str, old: RunView | None, new: RunView | None) -> list[Key]:
    found = [Key(Kind.RUN, _name(cache_key))]
    if old is None or new is None or old.phase != new.phase:
        found += [Key(Kind.PROFILE, view.profile_name) for view in (old, new) if view is not None and view.profile_name]
        found.append(GROUPS)
    return found


def by_profile(
    cache_key: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, runs: Iterable[RunView]
) -> list[Key]:
    """``runs``: the cached Runs (read only when the generation changed)."""
    name = _name(cache_key)
    found = [Key(Kind.PROFILE, name)]
    if _generation(old) != _generation(new):
        found += [Key(Kind.RUN, run.name) for run in runs if run.profile_name == name]
    return found


def by_node(old: NodeView | None, new: NodeView | None, *, namespace: str, profiles: Iterable[str]) -> list[Key]:
    """``namespace``: the controller's (a reservation of another namespace's Run is not ours);
    ``profiles``: the cached profiles' cache keys (read only when the reservation changed)."""
    found: list[Key] = []
    for view in (old, new):
        if view is None:
            continue
        requested = view.labels.get(keys.CERTIFY_LABEL)
        if requested:
            found.append(Key(Kind.PROFILE, requested))
        held = view.reservation
        if held is not None and held.run_name and held.run_namespace == namespace:
            found.append(Key(Kind.RUN, held.run_name))
    if (old.reservation if old else None) != (new.reservation if new else None):
        found += [Key(Kind.PROFILE, _name(profile)) for profile in profiles]
        found.append(GROUPS)
    return found


def by_workflow(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[Key]:
    found: list[Key] = []
    for obj in (old, new):
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(keys.RUN_NAME_LABEL):
            found.append(Key(Kind.RUN, str(labels[keys.RUN_NAME_LABEL])))
    if old is None or new is None:
        found.append(GROUPS)
    return found
