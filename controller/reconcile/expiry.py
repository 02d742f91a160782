"""Certification that expires (issue 43, item 4). A result on a Node proves something only while
it is fresh and about the suite the profile runs now. Its labels (the plain one and the trusted
``node-restriction.kubernetes.io/`` one schedulers select on) say ``Stale`` instead of its
verdict, and its Node condition is False with reason ``Stale``, once

* its profile's freshness window has passed since the Run completed (``freshness``, else
  ``recurrence.interval``, else 168h: shared/classify.freshness_window), or
* the profile's suite changed: the record entry's ``sourceDigest`` is not the profile's
  ``spec.source.digest``, or
* the profile is gone (``expire_orphaned``): no record keeps the result any more.

The re-assertion (controller/reconcile/reassert.py) keeps them so on every resync; the record itself
keeps the verdict and its evidence (recurrence, `signalctl describe node`). ``stale_reason`` is
pure; ``expire_orphaned`` is the fleet pass for profiles that no longer exist."""

import contextlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controller.reconcile import events, metrics
from controller.reconcile.state import Context, log
from controller.rules.projection import LABEL, STALE
from kubeio.client import Obj, resource_path
from kubeio.errors import Conflict, NotFound
from shared import certified, keys
from shared.classify import freshness_window

EXPIRED = "FreshnessExpired"
SUITE_CHANGED = "SuiteChanged"
PROFILE_DELETED = "ProfileDeleted"


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def stale_reason(spec: Mapping[str, Any], entry: Mapping[str, str] | None, now: datetime) -> str | None:
    """Why the record ``entry`` proves nothing current about its Node any more (None: it
    does, or there is no entry). An entry whose completion time cannot be read is stale."""
    if entry is None:
        return None
    source = spec.get("source")
    digest = source.get("digest") if isinstance(source, Mapping) else None
    if entry.get("sourceDigest") != digest:
        return f"{SUITE_CHANGED}: the profile now runs suite {digest}, the result is of {entry.get('sourceDigest')}"
    completed = _time(entry.get("completionTime"))
    window = freshness_window(dict(spec))
    if completed is None or now - completed > window:
        return f"{EXPIRED}: completed {entry.get('completionTime')}, older than the profile's freshness window {window}"
    return None


def orphaned_keys(copy: Mapping[str, str], live_profiles: set[str]) -> dict[str, str]:
    """Label key -> profile-or-key of the result labels on a Node (``copy``:
    controller/rules/projection.node_copy) whose profile no longer exists and which do not already say
    ``Stale``. A trusted label's key is matched against every existing profile's (a long profile
    name is hashed in it)."""
    trusted_live = {certified.trusted_label(p) for p in live_profiles}
    found: dict[str, str] = {}
    for item, value in copy.items():
        if not item.startswith(LABEL) or value == STALE:
            continue
        key = item[len(LABEL) :]
        if key.startswith(keys.CERTIFIED_LABEL_PREFIX):
            profile = key[len(keys.CERTIFIED_LABEL_PREFIX) :]
            if profile not in live_profiles:
                found[key] = profile
        elif key.startswith(certified.TRUSTED_LABEL_PREFIX + "signal-") and key not in trusted_live:
            found[key] = key
    return found


async def _live_profiles(ctx: Context) -> set[str]:
    """Every profile of the cluster (uncached: this controller may serve only some of them)."""
    listed = await ctx.kube.get(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL))
    return {str(p["metadata"]["name"]) for p in listed.get("items") or []}


async def expire_orphaned(ctx: Context) -> int:
    """Set to ``Stale`` every result label whose profile is gone (the record went with it);
    the number of Nodes changed. Conditioned on each Node's resourceVersion."""
    if not any(key.startswith(LABEL) for node in ctx.nodes.items.values() for key in node.projection):
        return 0
    live = await _live_profiles(ctx)
    changed = 0
    for node in sorted(ctx.nodes.items.values(), key=lambda n: n.name):
        orphaned = orphaned_keys(node.projection, live)
        if not orphaned:
            continue
        patch: Obj = {"metadata": {"resourceVersion": node.resource_version, "labels": dict.fromkeys(orphaned, STALE)}}
        path = resource_path("v1", "nodes", name=node.name)
        stamp = ctx.timestamp()
        conditions = [
            {
                "type": key,
                "status": "False",
                "reason": STALE,
                "message": f"{PROFILE_DELETED}: profile {profile} no longer exists",
                "lastTransitionTime": stamp,
                "lastHeartbeatTime": stamp,
            }
            for key, profile in sorted(orphaned.items())
            if key.startswith(keys.CERTIFIED_LABEL_PREFIX) and f"condition:{key}" in node.projection
        ]
        with contextlib.suppress(Conflict, NotFound):  # changed meanwhile: the next resync looks again
            await ctx.kube.merge_patch(path, patch)
            if conditions:
                await ctx.kube.strategic_patch(f"{path}/status", {"status": {"conditions": conditions}})
            changed += 1
            for profile in sorted(set(orphaned.values())):
                metrics.CERTIFICATION_EXPIRED.labels(PROFILE_DELETED).inc()
                log.info("result of a deleted profile marked Stale", node=node.name, profile=profile)
                await events.emit(
                    ctx,
                    events.node_ref(node.name),
                    "CertificationExpired",
                    f"{profile}: {PROFILE_DELETED}: the profile no longer exists, so its result on this Node proves "
                    f"nothing current; labels set to {STALE}. Certify the Node with a profile that exists.",
                )
    return changed
