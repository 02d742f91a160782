"""The controller's HTTP endpoints on ``--metrics-port``: ``/metrics`` (Prometheus),
``/healthz`` (the process's event loop answers) and ``/readyz``.

Readiness: a replica that has not led yet (a standby, whose caches are not started) is
ready, so that rolling updates proceed; once its caches run, it is ready only while every
cache follows the API server: a cache that cannot list or watch makes ``/readyz`` answer 503
naming it, and ``signal_informer_synced`` show 0 for it."""

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controller.reconcile import metrics
from kubeio.informer import Informer


class Probes:
    def __init__(self) -> None:
        self.informers: Mapping[str, Informer[Any]] = {}
        self.leading: Callable[[], bool] = lambda: False
        self._runner: web.AppRunner | None = None

    def unsynced(self) -> dict[str, str]:
        """Caches not following the API server now, with the reason."""
        return {name: i.last_error or "not listed yet" for name, i in self.informers.items() if not i.is_synced}

    def readiness(self) -> tuple[bool, str]:
        role = "leading" if self.leading() else "standby"
        if not self.informers:
            return True, f"{role}; caches not started"
        missing = self.unsynced()
        if missing:
            return False, "caches not synced: " + "; ".join(f"{k} ({v})" for k, v in sorted(missing.items()))
        return True, f"{role}; caches synced"

    def refresh(self) -> None:
        """At each scrape: the caches' sync, leadership, and the fleet counts from the caches
        (computed here, not by the reconcile loop, so that they stay true while it is stuck)."""
        for name, informer in self.informers.items():
            metrics.INFORMER_SYNCED.labels(resource=name).set(1 if informer.is_synced else 0)
        metrics.LEADER.set(1 if self.leading() else 0)
        caches = {name: self.informers.get(name) for name in ("profiles", "nodes", "runs")}
        if all(c is not None and c.is_synced for c in caches.values()):
            profiles, nodes, runs = (c.items if c is not None else {} for c in caches.values())
            names = [str((p.get("metadata") or {}).get("name", "")) for p in profiles.values()]
            metrics.refresh_fleet(names, nodes.values(), runs.values())

    async def _metrics(self, _request: web.Request) -> web.Response:
        self.refresh()
        body = generate_latest(metrics.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        ready, why = self.readiness()
        return web.Response(text=why + "\n", status=200 if ready else 503)

    async def start(self, port: int) -> None:
        """Serve on ``port`` (0: do not serve)."""
        if not port:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, port=port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
