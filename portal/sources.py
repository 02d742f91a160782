"""What the portal reads from the API server, with its own read-only identity, and how it
turns that into the index: list-watch caches of Runs (in ``--namespace``s, or all), profiles
(reduced to their checks and freshness window), Nodes (reduced to identity, health and
capacity: portal/health.py) and the metadata of evidence ConfigMaps; evidence documents
fetched by name on demand and cached by (ConfigMap uid, recorded digest, and for a v2 document
the uids of the check evidence ConfigMaps it names, each fetched too and accepted only with the
digest the Run document names: shared/runevidence.py), so a ConfigMap replaced or deleted
under the same name is read again. It only ever GETs, LISTs and WATCHes.

A refresh (after any change, debounced, and at least every ``resync`` seconds so results go
Stale on time) re-derives and re-classifies only the Runs whose inputs changed, then makes
the new snapshot off the event loop by updating the served one for those Runs' results only
(``Index.updated``: the index precomputes what every query slices).

One Run never stops the others. A Run whose evidence cannot be read now (any API error) is
Unknown in this snapshot and read again at the next refresh: only evidence derived from a
fetched body is cached, so a Forbidden or NotFound is never remembered. A Run whose evidence
cannot be interpreted (an unexpected error) gets Unknown results too, never no results: an
older Run's Pass must not become the newest. If refreshes keep failing anyway, ``ready()``
(and so /readyz) fails once the served snapshot is older than ``2 x resync``.

Freshness windows, and results whose profile is gone, are portal/freshness.py's.
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
from kubeio.errors import ApiError, Forbidden, NotFound
from kubeio.informer import Informer
from portal import metrics
from portal.compact import Packer
from portal.evidence_cache import DEFAULT_MAX_BYTES, EvidenceCache
from portal.freshness import judged
from portal.health import NodeHealth, node_health
from portal.index import Entry, Index, RegisteredCheck, entry_of
from shared import keys
from shared.classify import freshness_window
from shared.envelope import RunEvidence, State, ValidationResult, Verification, derive, read_run_evidence
from shared.runevidence import config_map_names, materialize

log = structlog.get_logger("portal")
EVIDENCE_SELECTOR = f"{keys.COMPONENT_LABEL}=evidence"
FAR = datetime.max.replace(tzinfo=UTC)
CacheKey = tuple[str, ...]
NOT_CACHED: CacheKey = ("", "")
"""The document-cache key of evidence that was not derived from a fetched body."""
MAX_AGE_RESYNCS = 2
"""How many resync periods the served snapshot may age before the portal is not ready."""


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
        max_evidence_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.kube = kube
        self.cluster = cluster
        self.resync = resync
        self.max_age = timedelta(seconds=MAX_AGE_RESYNCS * resync)
        """How old the served snapshot may be before ``ready()`` fails (refreshes keep failing)."""
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
        self._documents = EvidenceCache(max_evidence_bytes)
        self._runs: dict[str, _RunCache] = {}
        self._served: dict[str, list[Entry]] = {}
        """Per Run uid, the entries the served snapshot holds (to update it for what changed)."""
        self._task: asyncio.Task[None] | None = None

    @property
    def informers(self) -> list[Informer[Any]]:
        return [*self.runs, *self.evidence, self.profiles, self.nodes]

    def ready(self) -> bool:
        """Every cache listed, and a snapshot built no longer than ``max_age`` ago."""
        built_at = self.index.built_at
        fresh = built_at is not None and self.clock() - built_at <= self.max_age
        return self.built.is_set() and fresh and all(i.synced.is_set() for i in self.informers)

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
            except Exception as exc:  # keep serving the last index; ready() fails once it is too old
                log.error(
                    "refresh failed",
                    error=f"{type(exc).__name__}: {str(exc)[:300]}",
                    serving_snapshot_of=self.index.built_at.isoformat() if self.index.built_at else None,
                    not_ready_after_seconds=self.max_age.total_seconds(),
                    next_step="retried at the next change or resync; if it persists, report this with the log",
                )
            waits = [asyncio.create_task(i.changed.wait()) for i in self.informers]
            try:
                await asyncio.wait(waits, timeout=self.resync, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
            await asyncio.sleep(0.1)  # debounce bursts of changes

    def _windows(self) -> dict[str, timedelta]:
        return {p.name: p.window for p in self.profiles.items.values()}

    async def _read_evidence(self, run: Obj, config_maps: dict[str, str]) -> tuple[CacheKey, RunEvidence]:
        """The Run's evidence, and its document-cache key (NOT_CACHED unless read from a body)."""
        meta, status = run["metadata"], run.get("status") or {}
        ref = status.get("evidence") or {}
        name, digest = str(ref.get("configMap") or ""), str(ref.get("digest") or "")
        namespace = meta["namespace"]
        uid = config_maps.get(f"{namespace}/{name}")
        if not name or not digest or uid is None:
            return NOT_CACHED, read_run_evidence(None, expected_digest=digest or None)
        checks = [
            config_maps.get(f"{namespace}/{keys.check_evidence_name(str(meta.get('name')), i)}", "")
            for i in range(len(run["spec"]["checks"]))
        ]
        cache_key = (uid, digest, *checks)
        known = self._documents.get(cache_key)
        if known is not None:
            return cache_key, known
        where = f"evidence ConfigMap {namespace}/{name} of Run {namespace}/{meta.get('name')}"
        metrics.EVIDENCE_FETCHES.inc()
        try:
            body = await self.kube.get(resource_path("v1", "configmaps", namespace, name))
        except NotFound:
            return NOT_CACHED, RunEvidence(
                Verification.MISSING, f"{where} is gone (deleted or being replaced); read again at the next refresh"
            )
        except Forbidden:
            return NOT_CACHED, RunEvidence(
                Verification.UNAUTHORIZED,
                f"the portal may not read {where}: grant its ServiceAccount get on configmaps in {namespace}; "
                "read again at the next refresh",
            )
        except ApiError as exc:
            log.warning("evidence unreadable", run=meta.get("name"), namespace=namespace, error=str(exc)[:300])
            message = (
                f"the portal could not read {where} ({exc.status} {exc.reason}); read again at the next refresh; "
                f"if this persists, check the API server: {exc.message}"
            )
            return NOT_CACHED, RunEvidence(Verification.MISSING, message[:1024])
        if body.get("metadata", {}).get("uid") != uid:
            return NOT_CACHED, RunEvidence(
                Verification.MISSING, f"{where} is being replaced; read again at the next refresh"
            )
        result = read_run_evidence(body, expected_digest=digest)
        if result.document is not None and config_map_names(run, result.document):
            try:
                stored = await self._check_config_maps(run, result.document, checks)
            except ApiError as exc:
                log.warning("evidence unreadable", run=meta.get("name"), namespace=namespace, error=str(exc)[:300])
                message = (
                    f"the portal could not read a check evidence ConfigMap of Run {namespace}/{meta.get('name')} "
                    f"({exc.status} {exc.reason}); read again at the next refresh: {exc.message}"
                )
                return NOT_CACHED, RunEvidence(Verification.MISSING, message[:1024])
            document = materialize(run, result.document, stored)
            result = RunEvidence(result.verification, result.message, document, result.digest)
        self._documents.put(cache_key, result)
        metrics.EVIDENCE_CACHE_BYTES.set(self._documents.bytes)
        return cache_key, result

    async def _check_config_maps(self, run: Obj, document: Obj, uids: list[str]) -> dict[int, Obj | None]:
        """The check evidence ConfigMaps a v2 document names, as stored (None: absent, per the
        list-watch cache or the GET); raise ApiError when one cannot be read now."""
        namespace = run["metadata"]["namespace"]
        found: dict[int, Obj | None] = {}
        for index, name in config_map_names(run, document).items():
            if not uids[index]:
                found[index] = None
                continue
            metrics.EVIDENCE_FETCHES.inc()
            try:
                found[index] = await self.kube.get(resource_path("v1", "configmaps", namespace, name))
            except NotFound:
                found[index] = None
        return found

    def _classify(
        self, derived: list[ValidationResult], node_uids: dict[str, str], now: datetime, window: timedelta | None
    ) -> tuple[list[Entry], datetime]:
        """The entries of one Run's results, and until when they stay valid (freshness)."""
        built, valid_until = [], FAR
        packer = Packer()  # one Run's results share their repeated JSON (portal/compact.py)
        for result in derived:
            final = judged(result, current_node_uid=node_uids.get(result.target.name), now=now, window=window)
            if final.state in {State.PASSED, State.FAILED} and final.finished_at is not None and window is not None:
                valid_until = min(valid_until, final.finished_at + window)
            built.append(entry_of(final, packer))
        return built, valid_until

    async def _run_entries(
        self,
        run: Obj,
        *,
        config_maps: dict[str, str],
        node_uids: dict[str, str],
        windows: dict[str, timedelta],
        now: datetime,
    ) -> tuple[list[Entry], CacheKey]:
        """One Run's entries (from the cache when its inputs did not change), and the
        document-cache key it used. Raises only when the Run itself cannot be read."""
        meta, spec = run["metadata"], run["spec"]
        participants = sorted(spec["participants"], key=lambda p: p["index"])
        window = windows.get(spec["profile"]["name"])
        cache_key, evidence = await self._read_evidence(run, config_maps)
        uid = str(meta.get("uid"))
        signature = (
            meta.get("resourceVersion"),
            cache_key,
            evidence.verification,
            evidence.message,
            tuple(node_uids.get(p["nodeName"]) for p in participants),
            window,
        )
        cached = self._runs.get(uid)
        if cached and cached.signature == signature and now < cached.valid_until:
            return cached.entries, cache_key
        try:
            built, valid_until = self._classify(
                derive(run, evidence, cluster=self.cluster, observed_at=now), node_uids, now, window
            )
        except Exception as exc:  # a bug or a shape nobody foresaw: Unknown, never no result
            log.error(
                "run not interpretable", run=meta.get("name"), namespace=meta.get("namespace"), error=repr(exc)[:300]
            )
            message = (
                f"the portal could not interpret Run {meta.get('namespace')}/{meta.get('name')} or its evidence "
                f"({type(exc).__name__}: {str(exc)[:300]}); its results are Unknown; report this with the portal's log"
            )
            unread = derive(
                run, RunEvidence(Verification.MALFORMED, message[:1024]), cluster=self.cluster, observed_at=now
            )
            self._runs.pop(uid, None)  # tried again at the next refresh
            return self._classify(unread, node_uids, now, window)[0], cache_key
        self._runs[uid] = _RunCache(signature, built, valid_until)
        return built, cache_key

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
        current: dict[str, list[Entry]] = {}
        used: set[CacheKey] = set()
        for run in runs:
            meta = run.get("metadata") or {}
            try:
                built, cache_key = await self._run_entries(
                    run, config_maps=config_maps, node_uids=node_uids, windows=windows, now=now
                )
            except Exception as exc:  # the Run itself is unreadable: it names no Nodes to show results for
                log.error(
                    "run unreadable",
                    run=meta.get("name"),
                    namespace=meta.get("namespace"),
                    error=repr(exc)[:300],
                    next_step="it does not match the CertificationRun schema; check the CRD version and the Run",
                )
                continue
            used.add(cache_key)
            current[str(meta.get("uid"))] = built
        for gone in set(self._runs) - set(current):
            del self._runs[gone]
        self._documents.retain(used)
        metrics.EVIDENCE_CACHE_BYTES.set(self._documents.bytes)
        checks = [c for p in sorted(self.profiles.items.values(), key=lambda p: p.name) for c in p.checks]
        # The snapshot is updated for the Runs whose entries changed (a Run's entries are the
        # same list while nothing it depends on changed): CPU-bound at fleet scale, so off the
        # event loop.
        served = self._served
        removed = [e for uid, old in served.items() if current.get(uid) is not old for e in old]
        added = [e for uid, new in current.items() if served.get(uid) is not new for e in new]
        self.index = await asyncio.to_thread(
            self.index.updated, removed, added, checks=checks, node_uids=node_uids, built_at=now, nodes=nodes
        )
        self._served = current
        self.built.set()
        metrics.observe_index(self.index, time.perf_counter() - began)
