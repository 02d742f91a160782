"""``source push DIR --profile P``: make a profile run the scripts in a directory.

1. Every regular file directly in DIR becomes a key of a new ConfigMap (UTF-8 text in ``data``,
   anything else in ``binaryData``); a name that is not a ConfigMap key, a subdirectory, or a
   check's ``scriptKey`` missing from DIR is refused before anything is written.
2. Its bundle digest is computed with the controller's own function (shared.digests.bundle_digest,
   what controller/rules/sources.py verifies), from the ConfigMap's content as it is sent.
3. The ConfigMap is created ``immutable: true``, named after the profile and the digest
   (``<profile>-source-<12 hex>``) in the profile's source namespace (or ``--source-namespace``),
   so the same content always lands in the same object: pushing again finds it, checks that its
   content has the digest, and creates nothing.
4. The profile's ``spec.source`` is patched to that namespace, name and digest (nothing is
   patched when it already names them), conditioned on the profile's resourceVersion.

``bundle`` and ``source_name`` are pure; ``cmd_source_push`` does the I/O."""

import argparse
import base64
import re
from pathlib import Path
from typing import Any

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import AlreadyExists, ApiError
from shared import keys
from shared.digests import BundleError, bundle_digest
from signalctl.kubectx import CommandError, explain

KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
MAX_NAME = 253
SOURCE_LABEL_VALUE = "source"


def bundle(directory: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(data, binaryData) of the regular files directly in ``directory``."""
    if not directory.is_dir():
        raise CommandError(f"{directory} is not a directory; pass the directory holding the check scripts")
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    for path in sorted(directory.iterdir()):
        if path.is_dir():
            raise CommandError(f"{path} is a directory; a source is flat (one file per scriptKey): move it out")
        if not path.is_file():
            raise CommandError(f"{path} is not a regular file; remove it from {directory}")
        if not KEY.match(path.name) or path.name in {".", ".."}:
            raise CommandError(f"{path.name!r} is not a valid ConfigMap key ([-._a-zA-Z0-9]+); rename it")
        content = path.read_bytes()
        try:
            data[path.name] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[path.name] = base64.b64encode(content).decode()
    if not data and not binary:
        raise CommandError(f"{directory} holds no file; put the check scripts there")
    return data, binary


def source_name(profile: str, digest: str) -> str:
    """The ConfigMap's name: the profile's and the first 12 hex of the digest (never ``-scripts``,
    the suffix of the controller's Run snapshots)."""
    suffix = f"-source-{digest.removeprefix('sha256:')[:12]}"
    return profile[: MAX_NAME - len(suffix)] + suffix


def missing_keys(profile: Obj, data: dict[str, str], binary: dict[str, str]) -> list[str]:
    checks = (profile.get("spec") or {}).get("checks") or []
    return [
        f"{c.get('scriptKey')} (check {c.get('name')})" for c in checks if c.get("scriptKey") not in {*data, *binary}
    ]


def config_map(namespace: str, name: str, profile: str, data: dict[str, str], binary: dict[str, str]) -> Obj:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {keys.PROFILE_LABEL: profile}},
        "immutable": True,
    }
    if data:
        body["data"] = data
    if binary:
        body["binaryData"] = binary
    return body


async def _ensure_config_map(kube: Kube, body: Obj, digest: str) -> str:
    """Create the ConfigMap; when it exists, check it is immutable with this digest. Says what happened."""
    meta = body["metadata"]
    what = f"ConfigMap {meta['namespace']}/{meta['name']}"
    try:
        await kube.create(resource_path("v1", "configmaps", meta["namespace"]), body)
        return f"{what} created (immutable, {digest})"
    except AlreadyExists:
        pass
    except ApiError as exc:
        raise CommandError(explain(exc, "create", what)) from exc
    try:
        existing = await kube.get(resource_path("v1", "configmaps", meta["namespace"], meta["name"]))
    except ApiError as exc:
        raise CommandError(explain(exc, "get", what)) from exc
    try:
        found = bundle_digest(existing.get("data") or {}, existing.get("binaryData") or {})
    except BundleError as exc:
        found = f"<malformed: {exc}>"
    if found != digest or existing.get("immutable") is not True:
        raise CommandError(
            f"{what} already exists with digest {found} (immutable: {existing.get('immutable')}), not {digest}; "
            "delete it (it is not what its name promises) and push again"
        )
    return f"{what} unchanged (already holds {digest})"


async def cmd_source_push(kube: Kube, args: argparse.Namespace) -> int:
    from signalctl.getcmds import get_profile  # noqa: PLC0415

    profile = await get_profile(kube, args.profile)
    data, binary = bundle(Path(args.directory))
    missing = missing_keys(profile, data, binary)
    if missing:
        raise CommandError(
            f"{args.directory} has no file for {', '.join(missing)}; add it (or fix the check's scriptKey). "
            "Nothing was written"
        )
    digest = bundle_digest(data, binary)
    current = (profile.get("spec") or {}).get("source") or {}
    namespace = args.source_namespace or current.get("namespace")
    if not namespace:
        raise CommandError(f"CertificationProfile {args.profile} names no source namespace; pass --source-namespace")
    name = source_name(args.profile, digest)
    print(await _ensure_config_map(kube, config_map(namespace, name, args.profile, data, binary), digest))
    wanted = {"namespace": namespace, "name": name, "digest": digest}
    if {k: current.get(k) for k in wanted} == wanted:
        print(f"CertificationProfile {args.profile} unchanged (already runs {namespace}/{name})")
        return 0
    patch = {"metadata": {"resourceVersion": profile["metadata"]["resourceVersion"]}, "spec": {"source": wanted}}
    try:
        await kube.merge_patch(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=args.profile), patch)
    except ApiError as exc:
        raise CommandError(explain(exc, "patch", f"CertificationProfile {args.profile}")) from exc
    print(f"CertificationProfile {args.profile} source set to {namespace}/{name} at {digest}")
    return 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]", common: argparse.ArgumentParser) -> None:
    source = commands.add_parser("source", help="a profile's check scripts")
    actions = source.add_subparsers(dest="action", required=True, metavar="ACTION")
    push = actions.add_parser(
        "push", parents=[common], help="create the immutable source ConfigMap from DIR and point the profile at it"
    )
    push.add_argument("directory", metavar="DIR", help="directory whose files are the scripts (one per scriptKey)")
    push.add_argument("--profile", required=True, help="the CertificationProfile to point at the new source")
    push.add_argument("--source-namespace", help="namespace of the ConfigMap (default: the profile's source namespace)")
    push.set_defaults(handler=cmd_source_push)
