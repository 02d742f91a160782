"""``request PROFILE NODE... --dry-run``: per Node, whether the controller would find it
eligible once requested, or the exact reason not. Nothing is written.

The reason is the controller's own text (``controller.rules.eligibility.ineligibility``), computed on
the Node as the request would leave it (labelled for the profile), with the Nodes the admission
ledger holds. ``explain`` is pure; ``cmd_dry_run`` reads the profile, the Nodes and the ledger."""

import argparse
import sys
from collections.abc import Mapping, Set
from typing import Any

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import ApiError, NotFound
from shared import keys
from signalctl import output
from signalctl.kubectx import CommandError, explain

NOT_FOUND = "not found; list Nodes with `kubectl get nodes`"


def requested(node: Obj, profile: str) -> Obj:
    """``node`` as ``signalctl request`` leaves it: labelled for ``profile``."""
    meta = node.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), keys.CERTIFY_LABEL: profile}
    return {**node, "metadata": {**meta, "labels": labels}}


def explain_nodes(profile: Any, nodes: Mapping[str, Obj | None], held: Set[str], *, force: bool) -> list[Obj]:
    """Per Node name (in the order given): ``{"node", "eligible", "reason", "requestRefused"}``.
    ``profile`` is a parsed ``CertificationProfile``; ``requestRefused`` says why the request
    itself (without --dry-run) would refuse the Node (None: it would label it)."""
    from controller.rules.eligibility import ineligibility  # noqa: PLC0415 - pydantic and the controller's rules: only here
    from controller.rules.nodes import node_view  # noqa: PLC0415
    from controller.rules.requirements import per_node_requirement  # noqa: PLC0415
    from signalctl.actions import request_problem  # noqa: PLC0415

    requirement = per_node_requirement(profile.spec.checks)
    results = []
    for name, node in nodes.items():
        if node is None:
            results.append({"node": name, "eligible": False, "reason": NOT_FOUND, "requestRefused": NOT_FOUND})
            continue
        reason = ineligibility(node_view(requested(node, profile.metadata.name)), profile, requirement, held)
        refused = request_problem(name, node, force=force)
        results.append({"node": name, "eligible": reason is None, "reason": reason, "requestRefused": refused})
    return results


def view(results: list[Obj], profile: str, count: int) -> output.View:
    eligible = sum(1 for r in results if r["eligible"])
    items = [
        {"kind": "EligibilityResult", "metadata": {"name": r["node"]}, "profile": profile, **r, "participants": count}
        for r in results
    ]
    rows = [[r["node"], "yes" if r["eligible"] else "no", r["reason"] or "-"] for r in results]
    wide = [["refused: " + r["requestRefused"] if r["requestRefused"] else "labels it"] for r in results]
    return output.View(
        "node",
        items,
        ("NODE", "ELIGIBLE", "REASON"),
        rows,
        ("REQUEST",),
        wide,
        empty=f"{eligible} of {len(results)} Nodes eligible",
    )


async def _held(kube: Kube, namespace: str) -> set[str]:
    """The Nodes the admission ledger holds (empty, with a warning, when it cannot be read)."""
    from controller.reconcile.ledgerstore import read_ledger  # noqa: PLC0415
    from controller.rules.ledger import LEDGER_NAME, LedgerError  # noqa: PLC0415

    try:
        return (await read_ledger(kube, namespace, {})).held_nodes()
    except NotFound:
        return set()
    except (ApiError, LedgerError) as exc:
        what = f"ConfigMap {namespace}/{LEDGER_NAME} or its segments ({LEDGER_NAME}-*)"
        text = explain(exc, "read", what) if isinstance(exc, ApiError) else str(exc)
        print(
            f"signalctl: warning: the admission ledger was not read ({text}); Nodes it holds look free", file=sys.stderr
        )
        return set()


async def cmd_dry_run(kube: Kube, args: argparse.Namespace) -> int:
    from pydantic import ValidationError  # noqa: PLC0415

    from shared.profile import CertificationProfile  # noqa: PLC0415
    from signalctl.getcmds import get_profile  # noqa: PLC0415

    raw = await get_profile(kube, args.profile)
    try:
        profile = CertificationProfile.model_validate(raw)
    except ValidationError as exc:
        raise CommandError(f"CertificationProfile {args.profile} is not valid: {exc}; fix the profile") from exc
    nodes: dict[str, Obj | None] = {}
    for name in dict.fromkeys(args.nodes):
        try:
            nodes[name] = await kube.get(resource_path("v1", "nodes", name=name))
        except NotFound:
            nodes[name] = None
        except ApiError as exc:
            raise CommandError(explain(exc, "get", f"Node {name}")) from exc
    results = explain_nodes(profile, nodes, await _held(kube, args.namespace), force=args.force)
    shown = view(results, args.profile, profile.spec.participants.count)
    output.emit(shown, args)
    if getattr(args, "output", None) in (None, "wide"):
        eligible = sum(1 for r in results if r["eligible"])
        count = profile.spec.participants.count
        print(
            f"dry run: {eligible} of {len(results)} Nodes eligible for {args.profile} "
            f"({count} per Run); nothing was requested",
            file=sys.stderr,
        )
    return 0
