"""The writing operator commands: ``request`` (label Nodes for a profile), ``cancel`` and
``release`` (a Run's spec flags), each with an optional ``--wait`` that prints one line per
change until done. The decisions (may this Node be requested, which Run covers a Node, what
changed since the last look) are plain functions; the commands do the I/O around them."""

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import ApiError, Conflict, Forbidden, Invalid, NotFound
from shared import keys
from shared.run import TERMINAL_PHASES
from signalctl import progress as checks
from signalctl.kubectx import CommandError, explain, get_run

POLL_SECONDS = 1.0
TERMINAL = {p.value for p in TERMINAL_PHASES}
Observe = Callable[[list[Obj]], list[str]]
Done = Callable[[], bool]


def phase_of(run: Obj) -> str:
    return str((run.get("status") or {}).get("phase") or "Pending")


def is_released(run: Obj) -> bool:
    conditions = (run.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Released" and c.get("status") == "True" for c in conditions)


def reservation_of(node: Obj) -> str | None:
    """Who holds a reserved Node, readably (None when it is not reserved)."""
    meta = node["metadata"]
    uid = (meta.get("labels") or {}).get(keys.RESERVED_BY_LABEL)
    if not uid:
        return None
    try:
        detail = json.loads((meta.get("annotations") or {}).get(keys.RESERVATION_ANNOTATION, "{}"))
    except (ValueError, RecursionError):  # the Node's kubelet may write anything here
        detail = {}
    if isinstance(detail, dict) and detail.get("run"):
        return f"Run {detail.get('namespace')}/{detail['run']} (uid {uid})"
    return f"the Run with uid {uid}"


def request_problem(name: str, node: Obj | None, *, force: bool) -> str | None:
    """Why Node ``name`` may not be requested (None: it may)."""
    if node is None:
        return f"Node {name} not found; list Nodes with `kubectl get nodes`"
    holder = reservation_of(node)
    if holder and not force:
        return (
            f"Node {name} is reserved by {holder}; it cannot be certified again until that Run is released "
            "(`signalctl release RUN`); pass --force to leave the request waiting for it"
        )
    return None


def run_line(run: Obj) -> str:
    status = run.get("status") or {}
    line = f"Run {run['metadata'].get('namespace')}/{run['metadata']['name']}: {phase_of(run)}"
    if status.get("reason"):
        line += f" ({status['reason']}: {status.get('message') or ''})".replace(": )", ")")
    return line


@dataclass
class Progress:
    """What a ``--wait`` has already printed, so that each change is printed once."""

    nodes: list[str]
    known_runs: set[str]
    """Uids of the Runs that existed before the request: they do not cover it."""
    profile: str
    """The profile requested: only its Runs cover the request."""
    covering: dict[str, str] = field(default_factory=dict)
    """Node name -> uid of the Run admitted for it."""
    phases: dict[str, str] = field(default_factory=dict)
    foreign: set[tuple[str, str]] = field(default_factory=set)
    """(Node name, Run uid) of the other profiles' Runs already reported."""

    def observe(self, runs: list[Obj]) -> list[str]:
        """Lines for what changed in ``runs`` (the namespace's Runs) since the last call."""
        lines = []
        by_uid = {r["metadata"]["uid"]: r for r in runs}
        for run in sorted(runs, key=lambda r: str(r["metadata"].get("creationTimestamp", ""))):
            uid = run["metadata"]["uid"]
            if uid in self.known_runs:
                continue
            other = ((run.get("spec") or {}).get("profile") or {}).get("name")
            for p in sorted(run.get("spec", {}).get("participants") or [], key=lambda p: p["index"]):
                if p["nodeName"] not in self.nodes or p["nodeName"] in self.covering:
                    continue
                if other != self.profile:  # e.g. another request replaced this one: it certifies nothing for us
                    if (p["nodeName"], uid) not in self.foreign:
                        self.foreign.add((p["nodeName"], uid))
                        lines.append(
                            f"Node {p['nodeName']}: admitted into Run {run['metadata']['name']} of profile {other}, "
                            f"not {self.profile} (was the request replaced?); still waiting for a Run of {self.profile}"
                        )
                    continue
                self.covering[p["nodeName"]] = uid
                lines.append(
                    f"Node {p['nodeName']}: admitted into Run {run['metadata']['name']} as participant {p['index']}"
                )
        for uid in dict.fromkeys(self.covering.values()):
            current = by_uid.get(uid)
            if current is None:
                if self.phases.get(uid) != "<deleted>":
                    self.phases[uid] = "<deleted>"
                    lines.append(f"Run with uid {uid} was deleted")
                continue
            phase = phase_of(current)
            if self.phases.get(uid) != phase:
                self.phases[uid] = phase
                lines.append(run_line(current))
        return lines

    def done(self) -> bool:
        return set(self.nodes) <= set(self.covering) and all(
            self.phases.get(uid) in TERMINAL | {"<deleted>"} for uid in self.covering.values()
        )

    def succeeded(self) -> bool:
        return all(self.phases.get(uid) == "Succeeded" for uid in self.covering.values())


async def _namespace_runs(kube: Kube, namespace: str) -> list[Obj]:
    try:
        answer = await kube.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace))
    except ApiError as exc:
        raise CommandError(explain(exc, "list", f"Runs in namespace {namespace}")) from exc
    items: list[Obj] = answer.get("items", [])
    return items


async def _get_node(kube: Kube, name: str) -> Obj | None:
    try:
        return await kube.get(resource_path("v1", "nodes", name=name))
    except NotFound:
        return None
    except ApiError as exc:
        raise CommandError(explain(exc, "get", f"Node {name}")) from exc


async def cmd_request(kube: Kube, args: argparse.Namespace) -> int:
    if (args.output or args.no_headers) and not args.dry_run:
        raise CommandError("-o and --no-headers apply to request --dry-run only; add --dry-run or drop them")
    if args.dry_run:
        from signalctl import dryrun  # noqa: PLC0415 - the controller's rules (pydantic): only for --dry-run

        return await dryrun.cmd_dry_run(kube, args)
    try:
        await kube.get(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=args.profile))
    except Forbidden:
        print(f"signalctl: warning: may not read CertificationProfile {args.profile}; not checked", file=sys.stderr)
    except ApiError as exc:
        hint = "list profiles with `kubectl get certificationprofiles`"
        raise CommandError(explain(exc, "get", f"CertificationProfile {args.profile}", hint)) from exc
    nodes = {name: await _get_node(kube, name) for name in dict.fromkeys(args.nodes)}
    problems = [p for name, node in nodes.items() if (p := request_problem(name, node, force=args.force))]
    if problems:
        raise CommandError("no Node was requested:\n  " + "\n  ".join(problems))
    known = {r["metadata"]["uid"] for r in await _namespace_runs(kube, args.namespace)} if args.wait else set()
    for name, node in nodes.items():
        assert node is not None  # request_problem refused missing Nodes
        labels = node["metadata"].get("labels") or {}
        before = labels.get(keys.CERTIFY_LABEL)
        try:
            await kube.merge_patch(
                resource_path("v1", "nodes", name=name), {"metadata": {"labels": {keys.CERTIFY_LABEL: args.profile}}}
            )
        except ApiError as exc:
            raise CommandError(explain(exc, "patch", f"Node {name}", "it was deleted meanwhile")) from exc
        note = f" (replacing a request for {before})" if before and before != args.profile else ""
        note += f"; reserved by {reservation_of(node)}" if reservation_of(node) else ""
        print(f"Node {name}: requested for certification by {args.profile}{note}")
    if not args.wait:
        return 0
    progress = Progress(list(nodes), known, args.profile)
    await _wait(
        kube, args, progress.observe, progress.done, f"the Run(s) certifying {', '.join(nodes)} to finish", progress
    )
    if progress.succeeded():
        return 0
    print("signalctl: not every Run succeeded; see `signalctl describe run NAME`", file=sys.stderr)
    return 1


async def _wait(
    kube: Kube, args: argparse.Namespace, observe: Observe, done: Done, what: str, progress: Progress | None = None
) -> None:
    """Poll the namespace's Runs, print what ``observe`` reports, until ``done()``. With
    ``progress`` (a request), also each check of each covering Run advancing, Node by Node."""
    deadline = time.monotonic() + args.timeout.total_seconds()
    tracker = checks.Tracker()
    while True:
        runs = await _namespace_runs(kube, args.namespace)
        lines = observe(runs)
        if progress is not None:
            covering = [r for r in runs if r["metadata"]["uid"] in set(progress.covering.values())]
            lines += await checks.observe(kube.get, args.namespace, covering, tracker, (ApiError,))
        for line in lines:
            print(line, flush=True)
        if done():
            return
        if time.monotonic() > deadline:
            waiting = ""
            if progress is not None:
                pending = [n for n in progress.nodes if n not in progress.covering]
                waiting = f"; not yet admitted: {', '.join(pending)}" if pending else ""
            raise CommandError(
                f"timed out after {args.timeout} waiting for {what}{waiting}; nothing was undone, "
                f"follow it with `signalctl get runs -n {args.namespace}`"
            )
        await asyncio.sleep(POLL_SECONDS)


def one_run(name: str, until: Callable[[Obj], bool]) -> tuple[Observe, Done]:
    """observe/done for waiting on one Run until ``until(run)`` (or its deletion)."""
    seen: dict[str, object] = {}

    def observe(runs: list[Obj]) -> list[str]:
        run = next((r for r in runs if r["metadata"]["name"] == name), None)
        if run is None:
            seen["done"] = True
            return [f"Run {name} was deleted"]
        line = run_line(run) + (", released" if is_released(run) else "")
        seen["done"] = until(run)
        if seen.get("line") == line:
            return []
        seen["line"] = line
        return [line]

    return observe, lambda: bool(seen.get("done"))


async def _patch_spec(kube: Kube, run: Obj, field_name: str) -> None:
    """Set ``spec.<field_name>`` on exactly the Run that was read and judged (its uid a
    precondition): a Run deleted and created again under the same name meanwhile (a rolled-back
    admission's name is taken again) is refused, never canceled or released in its place."""
    meta = run["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, name)
    try:
        await kube.merge_patch(path, {"metadata": {"uid": meta["uid"]}, "spec": {field_name: True}})
    except ApiError as exc:
        # A uid that no longer matches is refused as an immutable-field change (422).
        now = await _get_or_none(kube, path) if isinstance(exc, Invalid | Conflict | NotFound) else None
        if isinstance(exc, Invalid | Conflict | NotFound) and (now or {}).get("metadata", {}).get("uid") != meta["uid"]:
            raise CommandError(
                f"Run {namespace}/{name} changed meanwhile: the Run read (uid {meta['uid']}) was deleted"
                + (f" and another was created under its name (uid {now['metadata']['uid']})" if now else "")
                + f"; nothing was changed. Look at it again with `signalctl describe run {name}`"
            ) from exc
        raise CommandError(
            explain(exc, f"set spec.{field_name} on", f"Run {namespace}/{name} (uid {meta['uid']})")
        ) from exc


async def _get_or_none(kube: Kube, path: str) -> Obj | None:
    try:
        return await kube.get(path)
    except ApiError:
        return None


async def cmd_cancel(kube: Kube, args: argparse.Namespace) -> int:
    run = await get_run(kube, args.namespace, args.name)
    where = f"Run {args.namespace}/{args.name}"
    if phase_of(run) in TERMINAL:
        print(f"{where} already ended {phase_of(run)}; nothing to cancel")
        return 0
    if run["spec"].get("cancel"):
        print(f"{where}: cancel was already requested")
    else:
        await _patch_spec(kube, run, "cancel")
        print(
            f"{where}: cancel requested; Signal stops its Workflow and ends it Canceled, "
            f"keeping its Nodes reserved until `signalctl release {args.name}`"
        )
    if args.wait:
        observe, done = one_run(args.name, lambda r: phase_of(r) in TERMINAL)
        await _wait(kube, args, observe, done, f"{where} to end")
    return 0


async def cmd_release(kube: Kube, args: argparse.Namespace) -> int:
    run = await get_run(kube, args.namespace, args.name)
    where = f"Run {args.namespace}/{args.name}"
    if phase_of(run) not in TERMINAL:
        raise CommandError(
            f"{where} is {phase_of(run)}, not finished; release only gives back the Nodes of a finished Run. "
            f"Cancel it first (`signalctl cancel {args.name} --wait`) or wait for it to end, then release it"
        )
    if is_released(run):
        print(f"{where} is already released")
        return 0
    if run["spec"].get("release"):
        print(f"{where}: release was already requested")
    else:
        await _patch_spec(kube, run, "release")
        print(f"{where}: release requested; Signal removes its reservations and lifts its cordon")
    if args.wait:
        observe, done = one_run(args.name, is_released)
        await _wait(kube, args, observe, done, f"{where} to be released")
    return 0
