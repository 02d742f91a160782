"""The operator commands of ``signalctl`` (everything but ``demo``): the argument parser, the
connection, and the read-only commands ``get runs``, ``describe run`` and ``evidence verify``.
The writing commands (``request``, ``cancel``, ``release``) are in signalctl/actions.py.

Every failure is a ``CommandError`` whose message says what failed, for which object, and
what to do; this module prints it and returns its exit status. Talks to the API server only
through ``kubeio.Kube`` with the operator's kubeconfig."""

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import ApiError, Forbidden, NotFound
from shared import certified, keys
from shared.durations import DurationError, parse_duration
from shared.evidence import EvidenceError, decode_document
from shared.runevidence import RUN_EVIDENCE_SCHEMAS
from signalctl import (
    actions,
    artifacts,
    completion,
    describe,
    fleet,
    getcmds,
    kubeconfigs,
    logs,
    nodeview,
    output,
    source,
    uninstall,
    verify,
)
from signalctl import version as versioncmd
from signalctl.kubectx import (
    DEFAULT_NAMESPACE,
    CommandError,
    explain,
    get_run,
    unreachable,
)

Handler = Callable[[Kube, argparse.Namespace], Awaitable[int]]


async def list_runs(kube: Kube, namespace: str | None) -> list[Obj]:
    """Every Run of ``namespace`` (all namespaces when None), page by page."""
    path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace)
    items: list[Obj] = []
    token = ""
    while True:
        query = {"limit": "500", **({"continue": token} if token else {})}
        try:
            page = await kube.get(path, **query)
        except ApiError as exc:
            where = f"namespace {namespace}" if namespace else "all namespaces"
            raise CommandError(explain(exc, "list", f"Runs in {where}")) from exc
        items += page.get("items", [])
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


async def cmd_get_runs(kube: Kube, args: argparse.Namespace) -> int:
    runs = await list_runs(kube, None if args.all_namespaces else args.namespace)
    if args.profile:
        runs = [r for r in runs if ((r.get("spec") or {}).get("profile") or {}).get("name") == args.profile]
    where = "any namespace" if args.all_namespaces else f"namespace {args.namespace}"
    suffix = f" of profile {args.profile}" if args.profile else ""
    empty = f"No Runs{suffix} found in {where}."
    output.emit(fleet.run_view(runs, datetime.now(UTC), all_namespaces=args.all_namespaces, empty=empty), args)
    return 0


async def _node_or_reason(kube: Kube, name: str) -> Obj | str | None:
    try:
        return await kube.get(resource_path("v1", "nodes", name=name))
    except NotFound:
        return None
    except ApiError as exc:
        return describe.UNREADABLE if isinstance(exc, Forbidden) else f"<error: HTTP {exc.status}>"


async def cmd_describe_run(kube: Kube, args: argparse.Namespace) -> int:
    run = await get_run(kube, args.namespace, args.name)
    nodes = {p["nodeName"]: await _node_or_reason(kube, p["nodeName"]) for p in run["spec"]["participants"]}
    events: list[Obj] | None
    try:
        answer = await kube.get(
            resource_path("v1", "events", args.namespace),
            fieldSelector=f"involvedObject.uid={run['metadata']['uid']}",
        )
        events = answer.get("items", [])
    except ApiError as exc:
        print(f"signalctl: warning: {explain(exc, 'list', f'Events in namespace {args.namespace}')}", file=sys.stderr)
        events = None
    record: dict[str, dict[str, str]] | None
    try:  # what Signal recorded for the participants (shared/certified.py), not the Nodes' labels
        profile = await kube.get(
            resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=run["spec"]["profile"]["name"])
        )
        record = certified.decode((profile.get("status") or {}).get("certifiedNodes"))
    except (ApiError, certified.RecordError) as exc:
        print(f"signalctl: warning: the profile's certified-nodes record could not be read: {exc}", file=sys.stderr)
        record = None
    text = describe.describe_run(run, nodes, events, datetime.now(UTC), record)
    output.emit(output.View(fleet.RUN_RESOURCE, [run], text=text, single=True), args)
    return 0


async def _behind(kube: Kube, node: Obj, name: str, registered: dict[str, Obj] | None) -> nodeview.Behind:
    """The profile, Run and re-verified evidence behind the projection of profile ``name``."""
    behind = nodeview.Behind(name)
    if registered is not None:
        behind.profile_obj = registered.get(name)
        behind.profile_note = "no longer exists"
    else:
        try:
            behind.profile_obj = await kube.get(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=name))
        except ApiError as exc:
            behind.profile_note = (
                "no longer exists" if isinstance(exc, NotFound) else f"could not be read (HTTP {exc.status})"
            )
    detail = nodeview.detail_of(node, name)
    if not detail or not detail.get("run") or not detail.get("namespace"):
        return behind
    namespace, run_name = detail["namespace"], detail["run"]
    try:
        behind.run = await kube.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, run_name))
    except NotFound:
        behind.run_note = "deleted (retention, or by hand): its evidence cannot be re-checked"
        return behind
    except ApiError as exc:
        behind.run_note = f"could not be read: {explain(exc, 'get', f'Run {namespace}/{run_name}')}"
        return behind
    ref = (behind.run.get("status") or {}).get("evidence") or {}
    try:
        run_cm = await _config_map(kube, namespace, ref["configMap"]) if ref.get("configMap") else None
        check_cms = {
            index: await _config_map(kube, namespace, verify.check_config_map_name(run_name, index))
            for index in range(len(behind.run["spec"]["checks"]))
        }
    except CommandError as exc:
        behind.evidence_note = f"not re-verified: {exc.message}"
        return behind
    findings = verify.verify(behind.run, run_cm, check_cms)
    behind.verify_problems = [f"{f.state} {f.subject}: {f.detail}" for f in findings if f.state != "OK"]
    if run_cm is not None:
        with contextlib.suppress(EvidenceError):
            document, behind.evidence_digest = decode_document(run_cm, RUN_EVIDENCE_SCHEMAS)
            nodes = document.get("nodes")
            behind.evidence_verdicts = {str(k): str(v) for k, v in nodes.items()} if isinstance(nodes, dict) else {}
    return behind


async def cmd_describe_node(kube: Kube, args: argparse.Namespace) -> int:
    try:
        node = await kube.get(resource_path("v1", "nodes", name=args.name))
    except ApiError as exc:
        raise CommandError(explain(exc, "get", f"Node {args.name}", "list Nodes with `kubectl get nodes`")) from exc
    registered: dict[str, Obj] | None
    note = ""
    try:
        listing = await kube.get(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL))
        registered = {p["metadata"]["name"]: p for p in listing.get("items", [])}
    except ApiError as exc:
        registered = None
        note = f"could not list CertificationProfiles (HTTP {exc.status}): only those projected on the Node are shown"
    names = set(nodeview.projected_profiles(node)) | set(registered or {})
    behinds = [await _behind(kube, node, name, registered) for name in sorted(names)]
    now = datetime.now(UTC)
    document = nodeview.node_document(node, behinds, now) if args.output in ("json", "yaml") else node
    text = nodeview.describe_node(node, behinds, now, note)
    output.emit(output.View(fleet.NODE_RESOURCE, [document], text=text, single=True), args)
    return 0


async def _config_map(kube: Kube, namespace: str, name: str) -> Obj | None:
    try:
        return await kube.get(resource_path("v1", "configmaps", namespace, name))
    except NotFound:
        return None
    except ApiError as exc:
        raise CommandError(explain(exc, "get", f"ConfigMap {namespace}/{name}")) from exc


async def cmd_verify(kube: Kube, args: argparse.Namespace) -> int:
    run = await get_run(kube, args.namespace, args.name, missing_code=2)
    ref = (run.get("status") or {}).get("evidence") or {}
    run_cm = await _config_map(kube, args.namespace, ref["configMap"]) if ref.get("configMap") else None
    count = range(len(run["spec"]["checks"]))
    check_cms = {i: await _config_map(kube, args.namespace, verify.check_config_map_name(args.name, i)) for i in count}
    results = {i: await _config_map(kube, args.namespace, verify.results_config_map_name(args.name, i)) for i in count}
    findings = verify.verify(run, run_cm, check_cms, results)
    findings += artifacts.verify_artifacts(check_cms, artifacts.configured_store())
    print("\n".join(verify.render(findings)))
    code = verify.exit_code(findings)
    verdict = {0: "verified", 1: "DOES NOT VERIFY", 2: "INCOMPLETE: something needed is missing"}[code]
    print(f"Run {args.namespace}/{args.name}: evidence {verdict}")
    return code


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def build_parser(prog: str = "signalctl") -> argparse.ArgumentParser:
    # Connection options are accepted before or after the command; SUPPRESS keeps a
    # subcommand from resetting what was given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kubeconfig", default=argparse.SUPPRESS, help="kubeconfig (default $KUBECONFIG, ~/.kube/config)"
    )
    common.add_argument(
        "-n", "--namespace", default=argparse.SUPPRESS, help=f"namespace of the Runs (default {DEFAULT_NAMESPACE})"
    )
    common.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context (default: current-context)")
    parser = argparse.ArgumentParser(prog=prog, description="Operate Project Signal certification Runs.")
    parser.add_argument("--kubeconfig", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--context", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "-n", "--namespace", default=os.environ.get("SIGNAL_NAMESPACE", DEFAULT_NAMESPACE), help=argparse.SUPPRESS
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    get = commands.add_parser("get", help="list objects").add_subparsers(dest="kind", required=True, metavar="KIND")
    runs = get.add_parser("runs", aliases=["run"], parents=[common], help="list CertificationRuns")
    runs.add_argument("-A", "--all-namespaces", action="store_true", help="Runs of every namespace")
    runs.add_argument("--profile", help="only Runs of this CertificationProfile")
    output.add_flags(runs)
    runs.set_defaults(handler=cmd_get_runs)
    desc = commands.add_parser("describe", help="show one object in detail")
    desc_kinds = desc.add_subparsers(dest="kind", required=True, metavar="KIND")
    one = desc_kinds.add_parser("run", parents=[common], help="a CertificationRun, its Nodes and Events")
    one.add_argument("name")
    output.add_flags(one)
    one.set_defaults(handler=cmd_describe_run)
    node = desc_kinds.add_parser(
        "node",
        parents=[common],
        help="every profile's result on a Node, the Run and evidence behind it, current or not",
    )
    node.add_argument("name", metavar="NODE")
    output.add_flags(node)
    node.set_defaults(handler=cmd_describe_node)
    evidence = commands.add_parser("evidence", help="work with a Run's evidence")
    evidence_kinds = evidence.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = evidence_kinds.add_parser(
        "verify", parents=[common], help="recompute a Run's evidence digests and decision (exit 0/1/2)"
    )
    check.add_argument("name", metavar="RUN")
    check.set_defaults(handler=cmd_verify)
    logs.add_parser(commands, common)
    waiting = argparse.ArgumentParser(add_help=False)
    waiting.add_argument("--wait", action="store_true", help="show progress until done")
    waiting.add_argument("--timeout", type=_duration, default=timedelta(minutes=30), help="for --wait (default 30m)")
    request = commands.add_parser(
        "request", parents=[common, waiting], help="request certification of Nodes by a profile"
    )
    request.add_argument("profile")
    request.add_argument("nodes", nargs="+", metavar="NODE")
    request.add_argument("--force", action="store_true", help="also request Nodes that a Run holds reserved")
    request.add_argument(
        "--dry-run", action="store_true", help="label nothing; say per Node whether it would be eligible, or why not"
    )
    output.add_flags(request)
    request.set_defaults(handler=actions.cmd_request)
    cancel = commands.add_parser("cancel", parents=[common, waiting], help="cancel a Run (spec.cancel)")
    cancel.add_argument("name", metavar="RUN")
    cancel.set_defaults(handler=actions.cmd_cancel)
    release = commands.add_parser(
        "release", parents=[common, waiting], help="release a finished Run's Nodes (spec.release)"
    )
    release.add_argument("name", metavar="RUN")
    release.set_defaults(handler=actions.cmd_release)
    # Each further command registers itself: adding one is an edit to its module and one line here.
    getcmds.register(get, common)
    for module in (source, versioncmd, uninstall):
        module.register(commands, common)
    completion.register(commands, lambda: build_parser(prog))
    return parser


async def _execute(handler: Handler, args: argparse.Namespace) -> int:
    offline = getattr(args, "offline", None)  # a command that needs no API server (completion, version --client)
    if offline is not None and (code := offline(args)) is not None:
        return int(code)
    kube = await kubeconfigs.connect(args.kubeconfig, args.context, dict(os.environ), Path.home())
    try:
        return await handler(kube, args)
    except (TimeoutError, OSError) as exc:
        raise CommandError(unreachable(kube, exc)) from exc
    finally:
        await kube.close()


def main(argv: list[str], prog: str = "signalctl") -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        return asyncio.run(_execute(args.handler, args))
    except CommandError as exc:
        print(f"signalctl: {exc.message}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("signalctl: interrupted", file=sys.stderr)
        return 130
