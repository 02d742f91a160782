"""``signalctl logs RUN [--check C] [--node N] [--artifact NAME]``: a participant's full log (or
an output file) from the artifact store, printed only after its sha256 and size match what the
check evidence records; without a store (``$SIGNAL_ARTIFACT_STORE`` unset), the bounded tail the
evidence itself keeps, said so.

The evidence is read as ``evidence verify`` trusts it: the Run's evidence ConfigMap must decode to
``status.evidence.digest``, and each check's evidence must resolve from it
(shared/runevidence.resolve: the adapter's name, owned by the Run, the digest the Run's document
names). A replaced artifact is not printed (exit 1), a missing one neither (exit 2).
"""

import argparse
import shutil
import sys
from typing import Any

from kubeio.client import Kube, resource_path
from kubeio.errors import ApiError, NotFound
from shared.artifacts import StoreConfig
from shared.evidence import EvidenceError, decode_document
from shared.runevidence import RUN_EVIDENCE_SCHEMAS, by_reference, resolve
from signalctl import artifacts
from signalctl.kubectx import CommandError, explain, get_run

Obj = dict[str, Any]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``logs`` on signalctl's command parser."""
    logs = commands.add_parser(
        "logs", parents=[common], help="a participant's full log from the artifact store, digest verified"
    )
    logs.add_argument("name", metavar="RUN")
    logs.add_argument("--check", help="the check's name or index (default: every check)")
    logs.add_argument("--node", help="the participant's Node (default: every participant)")
    logs.add_argument("--artifact", default="stdout", help="stdout (default), stderr or out/<file>")
    logs.set_defaults(handler=cmd_logs)


async def _config_map(kube: Kube, namespace: str, name: str) -> Obj | None:
    try:
        return await kube.get(resource_path("v1", "configmaps", namespace, name))
    except NotFound:
        return None
    except ApiError as exc:
        raise CommandError(explain(exc, "get", f"ConfigMap {namespace}/{name}")) from exc


async def check_documents(kube: Kube, run: Obj) -> list[tuple[int, Obj]]:
    """Each check's evidence document, trusted as ``evidence verify`` trusts it; CommandError
    (exit 2) when the Run has no evidence yet or a link of the chain does not hold."""
    meta = run["metadata"]
    ref = (run.get("status") or {}).get("evidence") or {}
    where = f"Run {meta['namespace']}/{meta['name']}"
    if not ref.get("configMap"):
        raise CommandError(f"{where} has no evidence yet (status.evidence is not set); wait for it to finish", 2)
    run_cm = await _config_map(kube, meta["namespace"], ref["configMap"])
    if run_cm is None:
        raise CommandError(f"{where}: its evidence ConfigMap {ref['configMap']} is gone", 2)
    try:
        document, digest = decode_document(run_cm, RUN_EVIDENCE_SCHEMAS)
    except EvidenceError as exc:
        raise CommandError(f"{where}: {exc}; run `signalctl evidence verify {meta['name']}`") from exc
    if digest != ref.get("digest"):
        raise CommandError(f"{where}: its evidence is {digest}, status.evidence says {ref.get('digest')}")
    found = []
    for index, entry in enumerate(document.get("checks") or []):
        if by_reference(document):
            config_map = await _config_map(kube, meta["namespace"], str(entry.get("configMap")))
            check, problem = resolve(run, entry, config_map)
        else:
            check, problem = entry.get("evidence"), None if entry.get("evidence") else "no evidence embedded"
        if check is None:
            print(f"signalctl: check {index}: no evidence to read logs from ({problem})", file=sys.stderr)
            continue
        found.append((index, check))
    return found


def _selected(document: Obj, index: int, args: argparse.Namespace) -> list[Obj]:
    results = document.get("results") or {}
    name = (results.get("check") or {}).get("name")
    if args.check is not None and args.check not in (name, str(index)):
        return []
    return [p for p in results.get("participants") or [] if args.node is None or p.get("nodeName") == args.node]


def _tail(participant: Obj, artifact: str) -> tuple[str, int] | None:
    stream = participant.get(artifact) if artifact in ("stdout", "stderr") else None
    return (str(stream.get("tail", "")), int(stream.get("bytes", 0))) if isinstance(stream, dict) else None


def _show_tail(header: str, participant: Obj, artifact: str, why: str) -> int:
    """Print the evidence's own tail of ``artifact``; 0, or 2 when it keeps none."""
    tail = _tail(participant, artifact)
    if tail is None:
        print(f"{header}: nothing recorded ({why})", file=sys.stderr)
        return 2
    print(f"{header}: the evidence's tail of {tail[1]} bytes ({why}) <==", file=sys.stderr)
    sys.stdout.write(tail[0] + ("" if tail[0].endswith("\n") or not tail[0] else "\n"))
    return 0


def _show_artifact(header: str, store: StoreConfig, item: artifacts.Recorded) -> int:
    """Print the artifact once it matches the evidence; 0, 1 (replaced) or 2 (missing)."""
    fetched = artifacts.Fetched(store, item.key)
    try:
        if fetched.missing:
            print(f"{header}: MISSING: {fetched.missing}", file=sys.stderr)
            return 2
        if not fetched.matches(item):
            detail = artifacts.finding(item, fetched).detail
            print(f"{header}: MISMATCH: {detail}; not printed", file=sys.stderr)
            return 1
        print(f"{header} ({item.digest}, {item.bytes} bytes, verified) <==", file=sys.stderr)
        sys.stdout.flush()
        shutil.copyfileobj(fetched.data, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return 0
    finally:
        fetched.close()


async def cmd_logs(kube: Kube, args: argparse.Namespace) -> int:
    store = artifacts.configured_store()
    run = await get_run(kube, args.namespace, args.name, missing_code=2)
    codes = []
    for index, document in await check_documents(kube, run):
        check_name = (document.get("results") or {}).get("check", {}).get("name", "?")
        for participant in _selected(document, index, args):
            header = f"==> check {index} {check_name} node {participant.get('nodeName')} {args.artifact}"
            own = {"results": {**document["results"], "participants": [participant]}}
            item = next((a for a in artifacts.recorded(index, own) if a.name == args.artifact), None)
            if store is None or item is None:
                why = "no artifact store configured" if store is None else "no artifact recorded for it"
                codes.append(_show_tail(header, participant, args.artifact, why))
            else:
                codes.append(_show_artifact(header, store, item))
    if not codes:
        raise CommandError(
            f"Run {args.namespace}/{args.name}: no participant matches"
            + (f" --check {args.check}" if args.check else "")
            + (f" --node {args.node}" if args.node else ""),
            2,
        )
    return 2 if 2 in codes else max(codes)
