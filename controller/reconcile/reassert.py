"""The authoritative projection (issue 12, item 6; shared/certified.py) and the Nodes' copies
of it.

* ``record_run``: when a Run ends, its per-Node results (participants only) go into the
  profile's ``status.certifiedNodes`` first, with a compare-and-swap on the profile's
  resourceVersion and monotonic (an older Run never replaces a newer one); the Node labels,
  annotation and condition (controller/reconcile/accept.py) are written after it, as copies.
* ``reassert_projections``: on every resync, each Node's copy of every profile this controller
  serves is compared with the record and, where it differs (a kubelet wrote a forged ``Pass``
  or a far-future annotation, removed a ``Fail``, or set a condition), rewritten from it,
  conditioned on the Node's resourceVersion, with a Warning Event ``ProjectionTampered`` on the
  Node and ``signal_projection_tampered_total{profile}``. A Node with no entry (or replaced:
  another uid) carries no result at all. A difference is judged against the record read afresh
  (the cached profile can lag the Node: ``read_record``). A result that expired (its freshness
  window passed, or the profile's suite changed: controller/reconcile/expiry.py) is expected as ``Stale``;
  moving a faithful copy there is a ``CertificationExpired`` Event, not tampering.

A record the controller cannot decode is treated as empty (fail closed: no Node keeps a
result from it) and logged. A ``Pass`` entry is projected only when the Run evidence it cites
proves it (controller/reconcile/recordproof.py); an unproven one is projected ``Inconclusive``.
"""

import contextlib
from collections.abc import Mapping

from controller.reconcile import events, metrics
from controller.reconcile.expiry import stale_reason
from controller.reconcile.recordproof import proven
from controller.reconcile.state import Context, log
from controller.rules.projection import reassert_patches, record_entry
from kubeio.client import Obj, resource_path
from kubeio.errors import Conflict, NotFound
from shared import certified, keys

RECORD_ATTEMPTS = 8


def profile_path(name: str, subresource: str | None = None) -> str:
    return resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=name, subresource=subresource)


def record_of(profile: Obj) -> dict[str, certified.Entry]:
    """The profile's record; empty (and logged) when it cannot be decoded."""
    text = (profile.get("status") or {}).get("certifiedNodes")
    try:
        return certified.decode(text)
    except certified.RecordError as exc:
        log.warning(
            "unreadable certified-nodes record; treated as empty", profile=profile["metadata"]["name"], error=str(exc)
        )
        return {}


def run_entries(run: Obj, node_verdicts: Mapping[str, str], digest: str, completed: str) -> dict[str, certified.Entry]:
    """The record entries of a finished Run: one per participant that has a verdict."""
    uids = {p["nodeName"]: p["nodeUID"] for p in run["spec"]["participants"]}
    return {
        name: record_entry(run, verdict, digest, completed, uids[name])
        for name, verdict in node_verdicts.items()
        if name in uids
    }


async def record_run(
    ctx: Context, run: Obj, node_verdicts: Mapping[str, str], digest: str, completed: str
) -> dict[str, certified.Entry] | None:
    """Merge a finished Run's results into its profile's record (safe to repeat); the record as
    it stands afterwards (None when the profile is gone), which projection is decided against."""
    name = run["spec"]["profile"]["name"]
    entries = run_entries(run, node_verdicts, digest, completed)
    for _ in range(RECORD_ATTEMPTS):
        profile = await ctx.kube.get_or_none(profile_path(name))
        if profile is None:
            log.warning("profile gone; the Run's results are kept only in its evidence", run=run["metadata"]["name"])
            return None
        merged = certified.with_run(record_of(profile), entries)
        if merged is None:
            return record_of(profile)
        meta = profile["metadata"]
        patch = {
            "metadata": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
            "status": {"certifiedNodes": certified.encode(merged)},
        }
        try:
            await ctx.kube.merge_patch(profile_path(name, "status"), patch)
            return merged
        except Conflict:
            continue
    raise Conflict(
        409, "Conflict", f"CertificationProfile {name} kept changing while recording Run {run['metadata']['name']}"
    )


async def read_record(ctx: Context, profile: str) -> dict[str, certified.Entry] | None:
    """The profile's record as the API server has it now (None: the profile is gone).

    The cached profile can lag the cached Node: a Run's result is recorded before it is
    projected (``record_run``), and the two caches follow separate watches. A Node that shows a
    result the cached record does not have yet is not tampered with; rewriting it from the cache
    would take its result back to an older Run's. So before anything is rewritten the record is
    read afresh: a read made after the Node was seen includes every result the Node can show.
    One read per profile and pass suffices because every Node is seen before the first read.
    """
    profile_obj = await ctx.kube.get_or_none(profile_path(profile))
    return None if profile_obj is None else record_of(profile_obj)


async def _expire(ctx: Context, node: str, profile: str, meta: Obj | None, status: Obj | None, why: str) -> bool:
    """Write a result's move to ``Stale`` (controller/reconcile/expiry.py); False when the Node changed."""
    path = resource_path("v1", "nodes", name=node)
    try:
        if meta is not None:
            await ctx.kube.merge_patch(path, meta)
        if status is not None:
            await ctx.kube.strategic_patch(f"{path}/status", status)
    except (Conflict, NotFound):  # changed meanwhile: the next resync looks again
        return False
    metrics.CERTIFICATION_EXPIRED.labels(why.split(":", 1)[0]).inc()
    log.info("result marked Stale", node=node, profile=profile, why=why)
    message = f"{profile}: {why}; labels set to Stale until the Node is certified again"
    await events.emit(ctx, events.node_ref(node), "CertificationExpired", message[:1000])
    return True


async def reassert_projections(ctx: Context) -> int:
    """Make every Node's copy of each served profile equal its record; the number corrected."""
    corrected = 0
    profiles = sorted(ctx.profiles.items.values(), key=lambda p: p["metadata"]["name"])
    records = {p["metadata"]["name"]: record_of(p) for p in profiles}
    read: set[str] = set()
    # Every Node is seen as the cache had it here, before any read below (see read_record).
    specs = {p["metadata"]["name"]: p.get("spec") or {} for p in profiles}
    now = ctx.clock()
    for node in sorted(ctx.nodes.items.values(), key=lambda n: n.name):
        for profile in list(records):
            entry = await proven(ctx, profile, node.name, certified.current(records[profile], node.name, node.uid))
            stale = stale_reason(specs[profile], entry, now)
            copy = dict(node.projection)
            meta, status, differs = reassert_patches(profile, entry, copy, node.resource_version, stale)
            if differs and profile not in read:
                read.add(profile)
                fresh = await read_record(ctx, profile)
                if fresh is None:
                    del records[profile]
                    continue
                records[profile] = fresh
                entry = await proven(ctx, profile, node.name, certified.current(fresh, node.name, node.uid))
                stale = stale_reason(specs[profile], entry, now)
                meta, status, differs = reassert_patches(profile, entry, copy, node.resource_version, stale)
            if not differs:
                continue
            if stale is not None and entry is not None and not reassert_patches(profile, entry, copy, "")[2]:
                # The Node carried the record's result as it was: it expired, nobody tampered.
                if await _expire(ctx, node.name, profile, meta, status, stale):
                    corrected += 1
                continue
            path = resource_path("v1", "nodes", name=node.name)
            with contextlib.suppress(Conflict, NotFound):  # changed meanwhile: the next resync looks again
                if meta is not None:
                    await ctx.kube.merge_patch(path, meta)
                if status is not None:
                    await ctx.kube.strategic_patch(f"{path}/status", status)
                corrected += 1
                metrics.PROJECTION_TAMPERED.labels(profile).inc()
                shown = f"{entry['verdict']} (Run {entry['namespace']}/{entry['run']})" if entry else "no result"
                message = (
                    f"{profile}: the Node carried {', '.join(differs)} unlike the controller's record "
                    f"(CertificationProfile {profile} status.certifiedNodes: {shown}); rewritten from the record"
                )
                log.warning("projection tampered; re-asserted", node=node.name, profile=profile, keys=differs)
                await events.emit(ctx, events.node_ref(node.name), "ProjectionTampered", message[:1000], warning=True)
    return corrected
