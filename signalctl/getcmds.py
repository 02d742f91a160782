"""``get profiles`` and ``get nodes [--profile P]``: the I/O around signalctl/fleet.py's views."""

import argparse
from datetime import UTC, datetime

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import ApiError
from shared import keys
from signalctl import fleet, output
from signalctl.kubectx import CommandError, explain

PROFILES_HINT = "list profiles with `signalctl get profiles`"


async def list_all(kube: Kube, path: str, what: str) -> list[Obj]:
    """Every object at ``path`` (a list URL), page by page."""
    items: list[Obj] = []
    token = ""
    while True:
        query = {"limit": "500", **({"continue": token} if token else {})}
        try:
            page = await kube.get(path, **query)
        except ApiError as exc:
            raise CommandError(explain(exc, "list", what)) from exc
        items += page.get("items", [])
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


async def get_profile(kube: Kube, name: str) -> Obj:
    try:
        return await kube.get(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=name))
    except ApiError as exc:
        raise CommandError(explain(exc, "get", f"CertificationProfile {name}", PROFILES_HINT)) from exc


async def cmd_get_profiles(kube: Kube, args: argparse.Namespace) -> int:
    if args.name:
        view = fleet.profile_view([await get_profile(kube, args.name)], datetime.now(UTC))
        view.single = True
    else:
        profiles = await list_all(kube, resource_path(keys.API_VERSION, keys.PROFILE_PLURAL), "CertificationProfiles")
        view = fleet.profile_view(profiles, datetime.now(UTC))
    output.emit(view, args)
    return 0


async def cmd_get_nodes(kube: Kube, args: argparse.Namespace) -> int:
    if args.profile:
        profiles = [await get_profile(kube, args.profile)]
    else:
        profiles = await list_all(kube, resource_path(keys.API_VERSION, keys.PROFILE_PLURAL), "CertificationProfiles")
    if args.name:
        try:
            nodes = [await kube.get(resource_path("v1", "nodes", name=args.name))]
        except ApiError as exc:
            raise CommandError(explain(exc, "get", f"Node {args.name}", "list Nodes with `kubectl get nodes`")) from exc
    else:
        nodes = await list_all(kube, resource_path("v1", "nodes"), "Nodes")
    output.emit(fleet.node_view(nodes, profiles, datetime.now(UTC)), args)
    return 0


def register(get: "argparse._SubParsersAction[argparse.ArgumentParser]", common: argparse.ArgumentParser) -> None:
    """Add ``get profiles`` and ``get nodes`` to the ``get`` command."""
    profiles = get.add_parser(
        "profiles", aliases=["profile"], parents=[common], help="list CertificationProfiles and how many Nodes passed"
    )
    profiles.add_argument("name", nargs="?", metavar="PROFILE", help="only this profile")
    output.add_flags(profiles)
    profiles.set_defaults(handler=cmd_get_profiles)
    nodes = get.add_parser(
        "nodes",
        aliases=["node"],
        parents=[common],
        help="each Node's result per profile (Signal's record), fresh or stale, held or not",
    )
    nodes.add_argument("name", nargs="?", metavar="NODE", help="only this Node")
    nodes.add_argument("--profile", help="only this CertificationProfile")
    output.add_flags(nodes)
    nodes.set_defaults(handler=cmd_get_nodes)
