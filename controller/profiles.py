"""Profile reconciliation: validate, verify the source, report Ready, and admit groups.

The source ConfigMap is read with an uncached GET whenever an admission is possible, when
the profile changed, and on every resync; a profile that is not Ready is never acted on.

Status writes that change only progress (``eligibleNodes`` and condition messages, every
condition's status and reason as they were) are made at most every ``PROGRESS_INTERVAL``
seconds per profile: while an operator's request for 64 Nodes arrives Node by Node, each
arrival would otherwise cost one write. The key is requeued for the rest of the interval, so
the last figure is always written. After an admission the status is that of what is left
(``left_after_admission``), not a transient ``Admitting`` the next pass would turn back.

A status write is decided against the cached profile, unless that predates this controller's
own last status write of it (the write's watch event not seen yet): then against what that
write stored, so one change is never written twice (``status_to_compare``)."""

import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from controller import metrics
from controller.admission import admit
from controller.ledger import Group, Ledger
from controller.nodes import NodeView
from controller.requeue import STALE_LIMIT, predates
from controller.reservations import AdmissionAborted
from controller.selection import Selection, Shortfall, select_participants
from controller.sources import SourceCheck, verify_source
from controller.state import Context, StatusWrite, log
from kubeio.client import Obj, resource_path
from shared import keys
from shared.conditions import condition, set_condition
from shared.profile import CertificationProfile

PROGRESS_INTERVAL = 2.0
"""Least seconds between two progress-only status writes of one profile."""
PROGRESS_FIELDS = frozenset({"eligibleNodes", "conditions"})


def progress_only(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether status ``new`` differs from ``old`` only in progress: ``eligibleNodes`` and the
    conditions' messages (each condition's status, reason, generation and transition kept)."""

    def shape(conditions: Any) -> list[tuple[Any, ...]]:
        return sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("observedGeneration"), c.get("lastTransitionTime"))
            for c in conditions or []
        )

    if any(old.get(k) != v for k, v in new.items() if k not in PROGRESS_FIELDS):
        return False
    return "eligibleNodes" in old and shape(old.get("conditions")) == shape(new.get("conditions"))


def status_to_compare(raw: Mapping[str, Any], own: StatusWrite | None, now: float) -> Mapping[str, Any]:
    """Pure: the status the next write of profile ``raw`` (as cached) is decided against: the
    cached one, or ``own`` (this controller's last status write of it) when the cached
    profile is the same object at an older resourceVersion. A write not seen within
    STALE_LIMIT seconds is no longer preferred (the cache reports its own trouble)."""
    meta = raw.get("metadata") or {}
    cached: Mapping[str, Any] = raw.get("status") or {}
    if own is None or own.uid != meta.get("uid") or now - own.at > STALE_LIMIT:
        return cached
    return own.status if predates(str(meta.get("resourceVersion") or ""), own.resource_version) else cached


def left_after_admission(
    nodes: Iterable[NodeView], profile: CertificationProfile, ledger: Ledger, run: Obj, admitted: Selection
) -> Shortfall | None:
    """Pure: what the profile's status says once ``admitted`` (Run ``run``) holds its Nodes:
    the shortfall among the Nodes still requested (what the next pass or resync would write
    anyway: the admitted Nodes no longer carry the request), or None when another group can
    be admitted (the pass the reservations' Node events bring admits it). Written instead of
    a transient ``Admitting`` that the next pass turned back, one status write per group."""
    taken = {n.name for n in admitted.nodes}
    after = ledger.with_group(run["metadata"]["name"], Group(profile.metadata.name, tuple(sorted(taken))))
    # The admitted Nodes stay in view (their zones count against the budget), their request consumed.
    left = [_unrequested(n) if n.name in taken else n for n in nodes]
    result = select_participants(left, profile, after.held_nodes(), after.all_group_nodes())
    return result if isinstance(result, Shortfall) else None


def _unrequested(node: NodeView) -> NodeView:
    return replace(node, labels={k: v for k, v in node.labels.items() if k != keys.CERTIFY_LABEL})


def _candidates(ctx: Context, name: str) -> bool:
    return any(n.labels.get(keys.CERTIFY_LABEL) == name and n.reservation is None for n in ctx.nodes.items.values())


async def reconcile_profile(ctx: Context, raw: Obj, *, resync: bool) -> float | None:
    """One pass over a profile; returns the seconds after which to look again (a progress
    write held back), or None."""
    name = raw["metadata"]["name"]
    status = raw.get("status") or {}
    generation = raw["metadata"].get("generation")
    try:
        profile = CertificationProfile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return await _set_status(ctx, raw, SourceCheck(False, "InvalidSpec", f"{where}: {first['msg']}"), None)
    stale = status.get("observedGeneration") != generation or condition(status.get("conditions") or [], "Ready") is None
    held = name in ctx.profile_status_held  # a progress write held back is made even with no request left
    if not (stale or resync or held or _candidates(ctx, name)):
        return None
    ref = profile.spec.source
    source = await ctx.kube.get_or_none(resource_path("v1", "configmaps", ref.namespace, ref.name))
    check = verify_source(profile, source)
    shortfall: Shortfall | None = None
    if check.ok and source is not None:
        ledger = await ctx.read_ledger()
        result = select_participants(ctx.nodes.items.values(), profile, ledger.held_nodes(), ledger.all_group_nodes())
        if isinstance(result, Selection):
            try:
                with metrics.ADMISSION_SECONDS.time():
                    run = await admit(ctx, profile, ledger, result, source, check.digest)
            except AdmissionAborted as exc:
                log.warning("admission aborted", profile=name, reason=str(exc))
            else:
                shortfall = left_after_admission(ctx.nodes.items.values(), profile, ledger, run, result)
        else:
            shortfall = result
    return await _set_status(ctx, raw, check, shortfall)


async def _set_status(ctx: Context, raw: Obj, check: SourceCheck, shortfall: Shortfall | None) -> float | None:
    name = raw["metadata"]["name"]
    last = ctx.profile_status_written.get(name)
    status = status_to_compare(raw, last, time.monotonic())
    generation = raw["metadata"].get("generation")
    now: datetime = ctx.clock()
    conditions = set_condition(
        status.get("conditions") or [],
        type_="Ready",
        status=check.ok,
        reason=check.reason,
        message=check.message,
        generation=generation,
        now=now,
    )
    updated: dict[str, Any] = {"observedGeneration": generation, "conditions": conditions}
    if shortfall is not None:
        updated["conditions"] = set_condition(
            conditions,
            type_="Admissible",
            status=False,
            reason="InsufficientEligibleNodes",
            message=shortfall.message,
            generation=generation,
            now=now,
        )
        updated["eligibleNodes"] = shortfall.eligible
    elif check.ok:
        updated["conditions"] = set_condition(
            conditions,
            type_="Admissible",
            status=True,
            reason="Admitting",
            message="enough eligible Nodes were requested",
            generation=generation,
            now=now,
        )
    if all(status.get(k) == v for k, v in updated.items()):
        ctx.profile_status_held.discard(name)
        return None
    wait = 0.0 if last is None else last.at + PROGRESS_INTERVAL - time.monotonic()
    if wait > 0 and progress_only(status, updated):
        ctx.profile_status_held.add(name)
        return wait
    path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=name, subresource="status")
    written = await ctx.kube.merge_patch(path, {"metadata": {"uid": raw["metadata"]["uid"]}, "status": updated})
    meta = written.get("metadata") or {}
    ctx.profile_status_written[name] = StatusWrite(
        str(meta.get("uid") or ""),
        str(meta.get("resourceVersion") or ""),
        written.get("status") or {},
        time.monotonic(),
    )
    ctx.profile_status_held.discard(name)
    return None
