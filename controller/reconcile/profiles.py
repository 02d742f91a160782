"""Profile reconciliation: validate, verify the source, report Ready, and admit groups.

The source ConfigMap is read with an uncached GET whenever an admission is possible, when
the profile changed, and on every resync; a profile that is not Ready is never acted on.
A pass that admits a group writes no status: the key is looked at again at once, and that
pass writes the status of what is left (no transient ``Admissible=True`` per group).
While fewer requested Nodes than a group needs are free (the cache says so) and the status
already reports that shortfall, a pass makes no read at all until its progress write is due.

Status writes that change only progress (``eligibleNodes`` and condition messages, every
condition's status and reason as they were) are made at most every ``PROGRESS_INTERVAL``
seconds per profile, and not within ``PROGRESS_INTERVAL`` of its last admission: while an
operator's request for 64 Nodes arrives Node by Node, each arrival would otherwise cost one
write, and while groups are being admitted each admission is itself the visible progress (its
Run, its Event). The key is requeued for the rest of the interval, so the last figure is
always written; a change of a condition's status or reason is written at once."""

import asyncio
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from controller.reconcile import events, metrics
from controller.reconcile.admission import admit
from controller.reconcile.reservations import AdmissionAborted
from controller.reconcile.state import Context, log
from controller.rules.ledger import LEDGER_NAME, LedgerError
from controller.rules.prerequisites import NOT_INSTALLED_REASON, RECHECK_SECONDS, missing_mpijob_api, mpijob_checks
from controller.rules.selection import Selection, Shortfall, select_participants
from controller.rules.sources import SourceCheck, source_namespace_refused, verify_source
from kubeio.client import Obj, resource_path
from kubeio.discovery import served
from shared import keys
from shared.conditions import condition, set_condition
from shared.profile import CertificationProfile

PROGRESS_INTERVAL = 2.0
"""Least seconds between two progress-only status writes of one profile."""
PROGRESS_FIELDS = frozenset({"eligibleNodes", "conditions"})
LEDGER_UNREADABLE = "AdmissionLedgerUnreadable"
"""Reason of ``Admissible=False`` while the admission ledger cannot be parsed (issue 42 M-B)."""
LEDGER_RETRY = 10.0
"""Seconds between two looks at a profile whose admission the ledger stops."""


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


def short_and_reported(status: Mapping[str, Any], candidates: int, count: int) -> bool:
    """Whether no admission is possible (fewer requested free Nodes than a group needs) and the
    status already says so (Ready, and not Admissible for want of Nodes): all a pass could
    change then is progress (``eligibleNodes``, the message). Pure."""
    conditions = status.get("conditions") or []
    ready, admissible = condition(conditions, "Ready"), condition(conditions, "Admissible")
    return (
        candidates < count
        and ready is not None
        and ready.get("status") == "True"
        and admissible is not None
        and admissible.get("status") == "False"
        and admissible.get("reason") == "InsufficientEligibleNodes"
    )


def progress_wait(last_write: float | None, last_admission: float | None, now: float) -> float:
    """Seconds until a progress-only status write of a profile may be made: ``PROGRESS_INTERVAL``
    after its last status write and after its last admission (monotonic times; None: none
    yet). Zero or less: now. Pure."""
    times = [t for t in (last_write, last_admission) if t is not None]
    return max(times) + PROGRESS_INTERVAL - now if times else 0.0


def _progress_wait(ctx: Context, name: str) -> float:
    return progress_wait(ctx.profile_status_written.get(name), ctx.profile_admitted.get(name), time.monotonic())


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
    candidates = ctx.requested.free_count(name)  # requested for it and not reserved
    if not (stale or resync or candidates or name in ctx.profile_status_owed):
        return None
    wait = _progress_wait(ctx, name)
    if not (stale or resync) and wait > 0 and short_and_reported(status, candidates, profile.spec.participants.count):
        # While a request arrives Node by Node: its progress write would be held back anyway,
        # so the reads that would only feed it are held back with it (the key comes back).
        return wait
    ref = profile.spec.source
    refused = source_namespace_refused(profile, ctx.namespace, ctx.source_namespaces)
    if refused is not None:  # nothing is read from a namespace sources may not come from
        return await _set_status(ctx, raw, refused, None)
    # The uncached reads at once (one round trip less before an admission's first write); the
    # ledger read is used only when the source verifies. A profile with an MPIJob check also
    # asks discovery whether MPIJobs are served (controller/rules/prerequisites.py).
    mpijobs = served(ctx.kube, keys.MPIJOB_API_VERSION, keys.MPIJOB_PLURAL) if mpijob_checks(profile) else _not_asked()
    try:
        source, ledger, mpijobs_served = await asyncio.gather(
            ctx.kube.get_or_none(resource_path("v1", "configmaps", ref.namespace, ref.name)), ctx.read_ledger(), mpijobs
        )
    except LedgerError as exc:
        return await _admission_stopped(ctx, raw, str(exc))
    check = verify_source(profile, source)
    missing = missing_mpijob_api(profile, mpijobs_served)
    shortfall: Shortfall | None = None
    if missing is not None:
        held = await _set_status(ctx, raw, check, None, missing=missing)
        return RECHECK_SECONDS if held is None else min(held, RECHECK_SECONDS)
    if check.ok and source is not None:
        result = select_participants(
            ctx.nodes.items.values(),
            profile,
            ledger.held_nodes(),
            ledger.all_group_nodes(),
            in_order=ctx.requested.in_order(name, ctx.nodes.items),
        )
        if isinstance(result, Selection):
            try:
                with metrics.ADMISSION_SECONDS.time():
                    await admit(ctx, profile, ledger, result, source, check.digest)
            except AdmissionAborted as exc:
                log.warning("admission aborted", profile=name, reason=str(exc))
            else:
                ctx.profile_status_owed.add(name)
                ctx.profile_admitted[name] = time.monotonic()
                # A group admitted: look again at once (another may be waiting) and write the
                # status there, of what is left; written now, it would say Admissible of Nodes
                # this admission just took, and the next pass would turn it back.
                return 0.0
        else:
            shortfall = result
    return await _set_status(ctx, raw, check, shortfall)


async def _not_asked() -> bool | None:
    return None


async def _admission_stopped(ctx: Context, raw: Obj, problem: str) -> float:
    """The admission ledger cannot be parsed: this profile admits nothing (condition
    ``Admissible=False``, reason ``AdmissionLedgerUnreadable``, and a Warning Event when it
    becomes so) until it is repaired; the key comes back every ``LEDGER_RETRY`` seconds."""
    meta, status = raw["metadata"], raw.get("status") or {}
    message = (
        f"admission is stopped: the admission ledger {ctx.namespace}/{LEDGER_NAME} cannot be parsed ({problem[:300]}); "
        "repair it by hand (docs/operator-guide.md); acceptance, releases and re-assertion go on"
    )
    current = condition(status.get("conditions") or [], "Admissible")
    if current is None or current.get("reason") != LEDGER_UNREADABLE or current.get("status") != "False":
        conditions = set_condition(
            status.get("conditions") or [],
            type_="Admissible",
            status=False,
            reason=LEDGER_UNREADABLE,
            message=message,
            generation=meta.get("generation"),
            now=ctx.clock(),
        )
        path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=meta["name"], subresource="status")
        await ctx.kube.merge_patch(path, {"metadata": {"uid": meta["uid"]}, "status": {"conditions": conditions}})
        ctx.profile_status_written[meta["name"]] = time.monotonic()
        involved = {"apiVersion": keys.API_VERSION, "kind": keys.PROFILE_KIND, "name": meta["name"], "uid": meta["uid"]}
        await events.emit(ctx, involved, "AdmissionStopped", message, warning=True)
    return LEDGER_RETRY


async def _set_status(
    ctx: Context, raw: Obj, check: SourceCheck, shortfall: Shortfall | None, *, missing: str | None = None
) -> float | None:
    status = raw.get("status") or {}
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
    if missing is not None and check.ok:
        updated["conditions"] = set_condition(
            conditions,
            type_="Admissible",
            status=False,
            reason=NOT_INSTALLED_REASON,
            message=missing,
            generation=generation,
            now=now,
        )
    elif shortfall is not None:
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
    name = raw["metadata"]["name"]
    if all(status.get(k) == v for k, v in updated.items()):
        ctx.profile_status_owed.discard(name)
        return None
    wait = _progress_wait(ctx, name)
    if wait > 0 and progress_only(status, updated):
        return wait
    path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=name, subresource="status")
    await ctx.kube.merge_patch(path, {"metadata": {"uid": raw["metadata"]["uid"]}, "status": updated})
    ctx.profile_status_written[name] = time.monotonic()
    ctx.profile_status_owed.discard(name)
    return None
