"""Ending an object the controller cannot reconcile (structurally bad: unreadable or
foreign evidence, a document of the wrong shape, a Workflow it does not own, an error that
keeps recurring), instead of retrying it for ever:

* a Run gets the condition ``Reconciled=False`` with the reason and, unless it has already
  ended, the phase ``Inconclusive`` (its group stays reserved until ``spec.release``, as for
  every Inconclusive Run); a Warning Event says why;
* a profile gets ``Ready=False`` with the reason, and a Warning Event.

Used by the loop (controller/process/loop.py); writes only status and Events."""

from typing import Any

from controller.reconcile import events
from controller.reconcile.state import Context
from kubeio.client import Obj, resource_path
from shared import keys
from shared.conditions import set_condition
from shared.run import TERMINAL_PHASES, Phase


def _false(ctx: Context, obj: Obj, type_: str, reason: str, message: str) -> list[dict[str, Any]]:
    """``obj``'s conditions with ``type_`` set False for ``reason``."""
    return set_condition(
        (obj.get("status") or {}).get("conditions") or [],
        type_=type_,
        status=False,
        reason=reason,
        message=message[:1000],
        generation=obj["metadata"].get("generation"),
        now=ctx.clock(),
    )


async def end_run(ctx: Context, run: Obj, reason: str, message: str) -> Obj:
    status = run.get("status") or {}
    conditions = _false(ctx, run, "Reconciled", reason, message)
    update: dict[str, Any] = {"conditions": conditions}
    if (status.get("phase") or Phase.PENDING) not in TERMINAL_PHASES:
        update |= {
            "phase": Phase.INCONCLUSIVE.value,
            "reason": reason,
            "message": f"the controller cannot reconcile this Run: {message}"[:1000],
            "completionTime": status.get("completionTime") or ctx.timestamp(),
        }
    written = await ctx.patch_run_status(run, update)
    await events.emit(ctx, events.run_ref(run), reason, message, warning=True)
    return written


async def end_profile(ctx: Context, profile: Obj, reason: str, message: str) -> Obj:
    meta = profile["metadata"]
    conditions = _false(ctx, profile, "Ready", reason, message)
    path = resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=meta["name"], subresource="status")
    written = await ctx.kube.merge_patch(path, {"metadata": {"uid": meta["uid"]}, "status": {"conditions": conditions}})
    involved = {"apiVersion": keys.API_VERSION, "kind": keys.PROFILE_KIND, "name": meta["name"], "uid": meta["uid"]}
    await events.emit(ctx, involved, reason, message, warning=True)
    return written
