"""``signalctl uninstall --clean-nodes [--release-held] [--dry-run]`` (issue 43, item 6): remove
every key Signal writes on Nodes (shared/nodekeys.py; docs/reference.md, "Keys on Nodes"),
Node by Node, with a line of progress each. A Node a Run holds keeps what holds it (its
reservation label, annotation, taint and the do-not-disrupt annotations Signal added) unless
``--release-held``; ``--dry-run`` writes nothing and says what it would remove. A profile's
``onFail`` taint goes with ``--fail-taint KEY`` (signalctl/cleannodes.py says where).

Run it once Signal's controller is gone (``kubectl delete -k deploy/``): a running controller
writes its projections again. It refuses while the ``signal-controller`` Deployment of the
namespace has replicas. Every write is conditioned on the Node's resourceVersion and re-planned
on a Conflict, so it is safe to interrupt and to run again."""

import argparse
from typing import Any

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import ApiError, Conflict, Forbidden, NotFound
from signalctl.cleannodes import NodeCleanup, plan_node
from signalctl.kubectx import CommandError, explain

ATTEMPTS = 5


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``uninstall`` to signalctl's parser (signalctl/commands.py)."""
    parser = commands.add_parser(
        "uninstall", parents=[common], help="remove every key Signal wrote on Nodes (after kubectl delete -k deploy/)"
    )
    parser.add_argument("--clean-nodes", action="store_true", required=True, help="remove Signal's keys from Nodes")
    parser.add_argument(
        "--release-held", action="store_true", help="also remove the reservations of Nodes a Run still holds"
    )
    parser.add_argument("--dry-run", action="store_true", help="write nothing; print what would be removed")
    parser.add_argument(
        "--fail-taint",
        action="append",
        default=[],
        metavar="KEY",
        help="also remove this taint key (a profile's onFail taint) from Nodes Signal marked failed; repeatable",
    )
    parser.add_argument("-l", "--selector", default="", help="only Nodes with these labels (default: every Node)")
    parser.set_defaults(handler=cmd_uninstall)


async def _controller_running(kube: Kube, namespace: str) -> bool:
    path = resource_path("apps/v1", "deployments", namespace, "signal-controller")
    try:
        deployment = await kube.get(path)
    except (NotFound, Forbidden):
        return False
    return int((deployment.get("spec") or {}).get("replicas", 1) or 0) > 0


async def _nodes(kube: Kube, selector: str) -> list[Obj]:
    items: list[Obj] = []
    token = ""
    while True:
        query = {"limit": "500", **({"continue": token} if token else {})}
        if selector:
            query["labelSelector"] = selector
        try:
            page = await kube.get(resource_path("v1", "nodes"), **query)
        except ApiError as exc:
            raise CommandError(explain(exc, "list", "Nodes")) from exc
        items += page.get("items", [])
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


async def _clean(kube: Kube, node: Obj, release_held: bool, fail_taints: frozenset[str]) -> NodeCleanup:
    """Apply the Node's plan; on a Conflict read it again and plan anew."""
    path = resource_path("v1", "nodes", name=node["metadata"]["name"])
    for _ in range(ATTEMPTS):
        plan = plan_node(node, release_held=release_held, fail_taints=fail_taints)
        try:
            if plan.metadata_patch is not None:
                await kube.merge_patch(path, plan.metadata_patch)
            if plan.status_patch is not None:
                await kube.strategic_patch(f"{path}/status", plan.status_patch)
            return plan
        except Conflict:
            node = await kube.get(path)
    raise CommandError(f"Node {node['metadata']['name']} kept changing; run signalctl uninstall --clean-nodes again")


def _line(plan: NodeCleanup, dry_run: bool) -> str:
    verb = "would remove" if dry_run else "removed"
    parts = [f"{verb} {', '.join(plan.remove)}"] if plan.remove else ["nothing of Signal's"]
    if plan.keep:
        parts.append(
            f"kept (held by Run uid {plan.held_by}; --release-held to remove, or release the Run first): "
            + ", ".join(plan.keep)
        )
    return f"Node {plan.name}: " + "; ".join(parts)


async def cmd_uninstall(kube: Kube, args: argparse.Namespace) -> int:
    if not args.dry_run and await _controller_running(kube, args.namespace):
        raise CommandError(
            f"Deployment {args.namespace}/signal-controller is still running and would write its keys again: "
            "delete Signal first (kubectl delete -k deploy/), then run signalctl uninstall --clean-nodes"
        )
    nodes = sorted(await _nodes(kube, args.selector), key=lambda n: str(n["metadata"]["name"]))
    fail_taints = frozenset(args.fail_taint)
    cleaned = held = failed = 0
    for index, node in enumerate(nodes, start=1):
        try:
            if args.dry_run:
                plan = plan_node(node, release_held=args.release_held, fail_taints=fail_taints)
            else:
                plan = await _clean(kube, node, args.release_held, fail_taints)
        except NotFound:
            print(f"[{index}/{len(nodes)}] Node {node['metadata']['name']}: gone")
            continue
        except (ApiError, CommandError) as exc:
            failed += 1
            message = exc.message if isinstance(exc, CommandError) else explain(exc, "patch", "the Node")
            print(f"[{index}/{len(nodes)}] Node {node['metadata']['name']}: FAILED: {message}")
            continue
        cleaned += bool(plan.remove)
        held += bool(plan.keep)
        print(f"[{index}/{len(nodes)}] {_line(plan, args.dry_run)}")
    verb = "would be cleaned" if args.dry_run else "cleaned"
    summary = f"{cleaned} of {len(nodes)} Nodes {verb}"
    if held:
        summary += f"; {held} held by a Run kept their reservation (--release-held removes it)"
    if failed:
        summary += f"; {failed} FAILED (run the command again)"
    print(summary)
    return 1 if failed else 0
