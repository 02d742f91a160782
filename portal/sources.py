"""What the portal reads from the API server, with its own read-only identity, and how it
turns that into the index: list-watch caches of Runs (in ``--namespace``s, or all), profiles
(reduced to their checks and freshness window), Nodes (reduced to identity, health and
capacity: portal/health.py) and the metadata of evidence ConfigMaps; evidence documents
fetched by name on demand and cached by (ConfigMap uid, recorded digest), so a ConfigMap
replaced under the same name is read again. It only ever GETs, LISTs and WATCHes.

A refresh (after any change, debounced, and at least every ``resync`` seconds so results go
Stale on time) re-derives and re-classifies only the Runs whose inputs changed, then builds
the new snapshot off the event loop (the index precomputes what every query slices).

A result is Stale once older than its profile's ``freshness``, else its recurrence interval,
else shared/profile.py's DEFAULT_FRESHNESS.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import Forbidden, NotFound
from kubeio.informer import Informer
from portal import metrics
from portal.health import NodeHealth, node_health
from portal.index import Entry, Index, RegisteredCheck, entry_of
from shared import keys
from shared.classify import classified
from shared.durations import DurationError, parse_duration
from shared.envelope import RunEvidence, State, Verification, derive, read_run_evidence
from shared.profile import DEFAULT_FRESHNESS

log = structlog.get_logger("portal")
EVIDENCE_SELECTOR = f"{keys.COMPONENT_LABEL}=evidence"
FAR = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ProfileView:
    name: str
    generation: int
    checks: tuple[RegisteredCheck, ...]
    window: timedelta
    """How old a Pass may be before it is Stale (see freshness_window)."""


def reduce_run(obj: Obj) -> Obj:
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def reduce_node(obj: Obj) -> NodeHealth:
    return node_health(obj)


def reduce_config_map(obj: Obj) -> str:
    return str(obj["metadata"].get("uid", ""))


def freshness_window(spec: Obj) -> timedelta:
    """The profile's ``freshness``, else its ``recurrence.interval``, else DEFAULT_FRESHNESS
    (an unreadable duration counts as absent: the API server's schema rejects those)."""
    for value in (spec.get("freshness"), (spec.get("recurrence") or {}).get("interval")):
        if isinstance(value, str):
            with contextlib.suppress(DurationError):
                window = parse_duration(value)
                if window > timedelta():
                    return window
    return parse_duration(DEFAULT_FRESHNESS)


def reduce_profile(obj: Obj) -> ProfileView:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    window = freshness_window(spec)
    checks = tuple(
        RegisteredCheck(
            profile=meta["name"],
            name=str(c.get("name", "")),
            index=i,
            backend=str(c.get("backend", "")),
            profile_generation=int(meta.get("generation") or 1),
            source_digest=str((spec.get("source") or {}).get("digest", "")),
            freshness_seconds=int(window.total_seconds()),
        )
        for i, c in enumerate(spec.get("checks") or [])
    )
    return ProfileView(meta["name"], int(meta.get("generation") or 1), checks, window)


@dataclass
class _RunCache:
    signature: tuple[Any, ...]
    entries: list[Entry]
    valid_until: datetime


class Sources:
    """Caches of the cluster and the current index built from them."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespaces: list[str],
        cluster: str,
        resync: float = 30.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.cluster = cluster
        self.default_window = parse_duration(DEFAULT_FRESHNESS)
        self.resync = resync
        self.clock = clock
        scopes: list[str | None] = list(namespaces) or [None]
        self.runs = [Informer(kube, resource_path(keys.API_VERSION, keys.RUN_PLURAL, ns), reduce_run) for ns in scopes]
        self.evidence = [
            Informer(kube, resource_path("v1", "configmaps", ns), reduce_config_map, labelSelector=EVIDENCE_SELECTOR)
            for ns in scopes
        ]
        self.profiles = Informer(kube, resource_path(keys.API_VERSION, keys.PROFILE_PLURAL), reduce_profile)
        self.nodes = Informer(kube, resource_path("v1", "nodes"), reduce_node)
        self.index = Index([])
        self.built = asyncio.Event()
        self._documents: dict[tuple[str, str], RunEvidence] = {}
        self._runs: dict[str, _RunCache] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def informers(self) -> list[Informer[Any]]:
        return [*self.runs, *self.evidence, self.profiles, self.nodes]

    def ready(self) -> bool:
        return self.built.is_set() and all(i.synced.is_set() for i in self.informers)

    def start(self) -> None:
        for informer in self.informers:
            informer.start()
        self._task = asyncio.create_task(self._loop(), name="portal refresh")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for informer in self.informers:
            await informer.stop()

    async def _loop(self) -> None:
        for informer in self.informers:
            await informer.synced.wait()
        while True:
            for informer in self.informers:
                informer.changed.clear()
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep serving the last index
                log.warning("refresh failed", error=str(exc)[:300])
            waits = [asyncio.create_task(i.changed.wait()) for i in self.informers]
            try:
                await asyncio.wait(waits, timeout=self.resync, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
            await asyncio.sleep(0.1)  # debounce bursts of changes

    def _windows(self) -> dict[str, timedelta]:
        return {p.name: p.window for p in self.profiles.items.values()}

    async def _read_evidence(self, run: Obj, config_maps: dict[str, str]) -> tuple[tuple[str, str], RunEvidence]:
        meta, status = run["metadata"], run.get("status") or {}
        ref = status.get("evidence") or {}
        name, digest = str(ref.get("configMap") or ""), str(ref.get("digest") or "")
        uid = config_maps.get(f"{meta['namespace']}/{name}")
        if not name or not digest or uid is None:
            return ("", ""), read_run_evidence(None, expected_digest=digest or None)
        cache_key = (uid, digest)
        known = self._documents.get(cache_key)
        if known is not None:
            return cache_key, known
        path = resource_path("v1", "configmaps", meta["namespace"], name)
        try:
            body: Obj | None = await self.kube.get(path)
            forbidden = False
        except NotFound:
            body, forbidden = None, False
        except Forbidden:
            body, forbidden = None, True
        metrics.EVIDENCE_FETCHES.inc()
        if body is not None and body.get("metadata", {}).get("uid") != uid:
            return ("", ""), RunEvidence(Verification.MISSING, "the evidence ConfigMap is being replaced")
        result = read_run_evidence(body, expected_digest=digest, forbidden=forbidden)
        self._documents[cache_key] = result
        return cache_key, result

    async def refresh(self) -> None:
        began = time.perf_counter()
        now = self.clock()
        nodes: dict[str, NodeHealth] = {k.lstrip("/"): v for k, v in self.nodes.items.items()}
        node_uids: dict[str, str] = {name: health.uid for name, health in nodes.items()}
        windows = self._windows()
        config_maps: dict[str, str] = {}
        for informer in self.evidence:
            config_maps.update(informer.items)
        runs = [run for informer in self.runs for run in informer.items.values()]
        entries: list[Entry] = []
        seen: set[str] = set()
        used: set[tuple[str, str]] = set()
        for run in runs:
            meta, spec = run["metadata"], run.get("spec") or {}
            try:
                participants = sorted(spec["participants"], key=lambda p: p["index"])
                window = windows.get(spec["profile"]["name"], self.default_window)
            except (KeyError, TypeError):
                continue  # not a Run this portal can read: it has no results
            cache_key, evidence = await self._read_evidence(run, config_maps)
            used.add(cache_key)
            uid = str(meta.get("uid"))
            seen.add(uid)
            signature = (
                meta.get("resourceVersion"),
                cache_key,
                evidence.verification,
                tuple(node_uids.get(p["nodeName"]) for p in participants),
                window,
            )
            cached = self._runs.get(uid)
            if cached and cached.signature == signature and now < cached.valid_until:
                entries.extend(cached.entries)
                continue
            built, valid_until = [], FAR
            try:
                derived = derive(run, evidence, cluster=self.cluster, observed_at=now)
            except (KeyError, TypeError, ValueError) as exc:
                log.info("run unreadable", run=meta.get("name"), error=str(exc)[:200])
                continue
            for result in derived:
                final = classified(result, current_node_uid=node_uids.get(result.target.name), now=now, window=window)
                if final.state in {State.PASSED, State.FAILED} and final.finished_at is not None:
                    valid_until = min(valid_until, final.finished_at + window)
                built.append(entry_of(final))
            self._runs[uid] = _RunCache(signature, built, valid_until)
            entries.extend(built)
        for gone in set(self._runs) - seen:
            del self._runs[gone]
        for stale in set(self._documents) - used:
            del self._documents[stale]
        checks = [c for p in sorted(self.profiles.items.values(), key=lambda p: p.name) for c in p.checks]
        # Sorting and precomputing a fleet-sized snapshot is CPU-bound: off the event loop.
        self.index = await asyncio.to_thread(
            Index, entries, checks=checks, node_uids=node_uids, built_at=now, nodes=nodes
        )
        self.built.set()
        metrics.observe_index(self.index, time.perf_counter() - began)
