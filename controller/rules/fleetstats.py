"""What the controller's fleet metrics count, computed from its caches (controller/reconcile/metrics.py
sets the gauges from these at every scrape). Pure; no I/O; table-tested.

Counts, never one series per Node or per Run: a fleet of thousands of Nodes is a handful of
series per profile.

* ``nodes_by_result``: per profile the controller serves, how many Nodes carry each result on
  the label schedulers can trust (``node-restriction.kubernetes.io/signal-<profile>``, which a
  kubelet can neither set nor remove: shared/certified.py), ``Pass``, ``Fail``,
  ``Inconclusive`` or ``Stale``; a value Signal never writes counts as ``Unknown``.
* ``held``: Nodes still reserved by a Run that ended other than ``Succeeded`` (SPEC §4.5: the
  group stays cordoned until ``spec.release``), by that Run's phase, with the age of the
  oldest such hold (since the Run's completion, else its start, else its creation).
* ``past_deadline``: Runs not yet ended whose suite deadline (``startTime +
  suiteDeadlineSeconds``) has passed: the controller should have ended them ``Inconclusive``.
* ``check_durations``: each decided check's duration (its results' ``startedAt`` to
  ``collectedAt``) and verdict; a check without readable times has none.
* ``run_duration``: a Run's creation to its end."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.rules.nodes import NodeView
from controller.rules.runview import RunView
from shared import certified
from shared.run import TERMINAL_PHASES, Phase

RESULTS: tuple[str, ...] = ("Pass", "Fail", "Inconclusive", certified.STALE)
UNKNOWN = "Unknown"
HOLDING_PHASES: tuple[str, ...] = tuple(p.value for p in (Phase.FAILED, Phase.INCONCLUSIVE, Phase.CANCELED))


def nodes_by_result(profiles: Iterable[str], nodes: Iterable[NodeView]) -> dict[tuple[str, str], int]:
    """(profile, result) -> Nodes, every known result of every profile present (0 included)."""
    labels = {certified.trusted_label(p): p for p in profiles}
    counts = {(p, r): 0 for p in labels.values() for r in RESULTS}
    for node in nodes:
        for label, profile in labels.items():
            value = node.labels.get(label)
            if value is None:
                continue
            result = value if value in RESULTS else UNKNOWN
            counts[(profile, result)] = counts.get((profile, result), 0) + 1
    return counts


@dataclass(frozen=True)
class Held:
    nodes: int
    oldest_seconds: float


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _ended_at(run: RunView) -> datetime | None:
    created = (run.raw.get("metadata") or {}).get("creationTimestamp")
    return _parse(run.completion_time) or run.start_time or _parse(created if isinstance(created, str) else None)


def held(nodes: Iterable[NodeView], runs: Iterable[RunView], now: datetime) -> dict[str, Held]:
    """Run phase -> Nodes held by Runs that ended in it, and the oldest hold's age (every
    holding phase present, 0 included). A hold whose Run has no readable time counts with
    age 0 rather than being left out."""
    ended = {r.uid: r for r in runs if r.phase in HOLDING_PHASES}
    count = dict.fromkeys(HOLDING_PHASES, 0)
    oldest = dict.fromkeys(HOLDING_PHASES, 0.0)
    for node in nodes:
        run = ended.get(node.reservation.run_uid) if node.reservation is not None else None
        if run is None:
            continue
        count[run.phase] += 1
        since = _ended_at(run)
        age = max(0.0, (now - since).total_seconds()) if since is not None else 0.0
        oldest[run.phase] = max(oldest[run.phase], age)
    return {phase: Held(count[phase], oldest[phase]) for phase in HOLDING_PHASES}


def past_deadline(runs: Iterable[RunView], now: datetime) -> int:
    """Runs not ended whose suite deadline has passed."""
    late = 0
    for run in runs:
        if run.phase in TERMINAL_PHASES or run.start_time is None or run.suite_deadline_seconds is None:
            continue
        if (now - run.start_time).total_seconds() > run.suite_deadline_seconds:
            late += 1
    return late


def check_durations(checks: Iterable[tuple[str, str, Mapping[str, Any] | None]]) -> list[tuple[str, str, float]]:
    """(check name, verdict, duration in seconds) of each (name, verdict, evidence document)
    whose results carry a start and a collection time, in that order."""
    found = []
    for name, verdict, document in checks:
        results = (document or {}).get("results")
        if not isinstance(results, Mapping):
            continue
        started, collected = results.get("startedAt"), results.get("collectedAt")
        begin = _parse(started) if isinstance(started, str) else None
        end = _parse(collected) if isinstance(collected, str) else None
        if begin is None or end is None or end < begin:
            continue
        found.append((name, verdict, (end - begin).total_seconds()))
    return found


def run_duration(run: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds from the Run's creation to ``now`` (its end); None without a readable creation."""
    created = (run.get("metadata") or {}).get("creationTimestamp")
    begin = _parse(created) if isinstance(created, str) else None
    if begin is None:
        return None
    return max(0.0, (now - begin).total_seconds())


def depth_by_kind(kinds: Iterable[str], queued: Iterable[str]) -> dict[str, int]:
    """Kind -> keys of it queued now (every kind in ``kinds`` present, 0 included)."""
    depth = dict.fromkeys(kinds, 0)
    for kind in queued:
        depth[kind] = depth.get(kind, 0) + 1
    return depth
