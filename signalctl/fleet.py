"""What ``get runs``, ``get profiles`` and ``get nodes`` print, as ``output.View``s. Pure: the
objects already fetched, plus ``now``.

``get nodes`` is the fleet as Signal sees it: one row per Node and profile, the result from
Signal's own record (the profile's ``status.certifiedNodes``, shared/certified.py, written by
the controller alone), never from the Node's labels (a kubelet can write those; ``-o wide``
shows the label beside the record). A result is ``fresh`` while it is younger than the
profile's freshness window and was certified with the profile's current suite (source digest);
otherwise ``stale``, with the reasons in ``-o json``. ``HELD`` is the Run holding the Node
reserved (its reservation label), ``-`` when none does."""

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from shared import certified, keys
from shared.classify import freshness_window
from shared.profile import DEFAULT_FRESHNESS
from signalctl import tables
from signalctl.output import View

Obj = dict[str, Any]
RUN_RESOURCE = f"certificationrun.{keys.GROUP}"
PROFILE_RESOURCE = f"certificationprofile.{keys.GROUP}"
NODE_RESOURCE = "node"
NONE = "<none>"


def run_view(runs: Sequence[Obj], now: datetime, *, all_namespaces: bool, empty: str) -> View:
    ordered = sorted(runs, key=lambda r: (r["metadata"].get("namespace", ""), r["metadata"]["name"]))
    headers = ("NAMESPACE", *tables.RUN_HEADERS) if all_namespaces else tables.RUN_HEADERS
    wide = []
    for run in ordered:
        status = run.get("status") or {}
        evidence = (status.get("evidence") or {}).get("digest") or NONE
        wide.append([str(run["metadata"].get("uid", "")), status.get("completionTime") or NONE, evidence])
    return View(
        RUN_RESOURCE,
        list(ordered),
        headers,
        tables.run_rows(ordered, now, all_namespaces=all_namespaces),
        ("UID", "COMPLETED", "EVIDENCE"),
        wide,
        empty=empty,
    )


def _condition(obj: Obj, kind: str) -> Obj:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def certified_count(profile: Obj) -> str:
    """How many Nodes Signal's record holds a Pass for (``?`` when the record is unreadable)."""
    try:
        record = certified.decode((profile.get("status") or {}).get("certifiedNodes"))
    except certified.RecordError:
        return "?"
    return str(sum(1 for entry in record.values() if entry.get("verdict") == "Pass"))


def profile_view(profiles: Sequence[Obj], now: datetime) -> View:
    ordered = sorted(profiles, key=lambda p: p["metadata"]["name"])
    rows, wide = [], []
    for profile in ordered:
        spec, status = profile.get("spec") or {}, profile.get("status") or {}
        ready, admissible = _condition(profile, "Ready"), _condition(profile, "Admissible")
        eligible = status.get("eligibleNodes")
        rows.append(
            [
                profile["metadata"]["name"],
                str((spec.get("participants") or {}).get("count", "?")),
                str(len(spec.get("checks") or [])),
                ready.get("status", "Unknown"),
                admissible.get("status", "Unknown"),
                NONE if eligible is None else str(eligible),
                certified_count(profile),
                tables.age(profile["metadata"].get("creationTimestamp"), now),
            ]
        )
        source = spec.get("source") or {}
        wide.append(
            [
                f"{source.get('namespace')}/{source.get('name')}",
                str(source.get("digest") or NONE),
                freshness_text(spec),
                ready.get("reason") or admissible.get("reason") or NONE,
            ]
        )
    return View(
        PROFILE_RESOURCE,
        list(ordered),
        ("NAME", "NODES", "CHECKS", "READY", "ADMISSIBLE", "ELIGIBLE", "CERTIFIED", "AGE"),
        rows,
        ("SOURCE", "DIGEST", "FRESHNESS", "REASON"),
        wide,
        empty="No CertificationProfiles found.",
    )


def freshness_text(spec: Obj) -> str:
    """The freshness window as the profile writes it (``freshness``, else the recurrence interval)."""
    recurrence = spec.get("recurrence")
    interval = recurrence.get("interval") if isinstance(recurrence, dict) else None
    return str(spec.get("freshness") or interval or DEFAULT_FRESHNESS)


def held_by(node: Obj) -> str | None:
    """The Run holding the Node reserved (``namespace/name``, else its uid), None when none does.
    As the controller reads it (controller/rules/nodes.parse_reservation): the reservation label AND
    Signal's taint naming the same Run; a label alone is the kubelet's to write and holds nothing."""
    meta = node["metadata"]
    uid = (meta.get("labels") or {}).get(keys.RESERVED_BY_LABEL)
    taints = (node.get("spec") or {}).get("taints") or []
    if not uid or not any(t.get("key") == keys.RESERVED_TAINT_KEY and t.get("value") == uid for t in taints):
        return None
    try:
        detail = json.loads((meta.get("annotations") or {}).get(keys.RESERVATION_ANNOTATION, "{}"))
    except (ValueError, RecursionError):  # the Node's kubelet may write anything here
        detail = {}
    if isinstance(detail, dict) and isinstance(detail.get("run"), str):
        return f"{detail.get('namespace')}/{detail['run']}"
    return f"uid {uid}"


def staleness(entry: certified.Entry, profile: Obj, node_label: str | None, now: datetime) -> list[str]:
    """Why a recorded result is stale (empty: fresh)."""
    spec = profile.get("spec") or {}
    reasons = []
    if node_label == certified.STALE:
        reasons.append("the controller marked it Stale")
    source = (spec.get("source") or {}).get("digest")
    if entry.get("sourceDigest") != source:
        reasons.append(f"the suite changed since (source {entry.get('sourceDigest')} -> {source})")
    window = freshness_window(spec)
    try:
        completed = datetime.fromisoformat(str(entry.get("completionTime")).replace("Z", "+00:00"))
    except ValueError:
        return [*reasons, "the completion time is unreadable"]
    if completed.tzinfo is None:
        return [*reasons, "the completion time has no offset"]
    if now - completed > window:
        reasons.append(f"completed {tables.age(entry['completionTime'], now)} ago, freshness {freshness_text(spec)}")
    return reasons


def node_result(node: Obj, profile: Obj, record: dict[str, certified.Entry] | None, now: datetime) -> Obj:
    """One Node's result for one profile (``record``: None when it cannot be read)."""
    meta, name = node["metadata"], profile["metadata"]["name"]
    labels = meta.get("labels") or {}
    label = labels.get(keys.certified_label(name))
    item: Obj = {
        "node": meta["name"],
        "profile": name,
        "heldBy": held_by(node),
        "requested": labels.get(keys.CERTIFY_LABEL) == name,
        "nodeLabel": label,
    }
    if record is None:
        return {**item, "result": "<unreadable>", "fresh": None, "staleReasons": ["Signal's record cannot be read"]}
    entry = certified.current(record, meta["name"], str(meta.get("uid") or ""))
    if entry is None:
        return {**item, "result": None, "fresh": None, "staleReasons": []}
    reasons = staleness(entry, profile, label, now)
    return {**item, "result": entry.get("verdict"), "fresh": not reasons, "staleReasons": reasons, "record": entry}


def _record(profile: Obj) -> dict[str, certified.Entry] | None:
    try:
        return certified.decode((profile.get("status") or {}).get("certifiedNodes"))
    except certified.RecordError:
        return None


def node_view(nodes: Sequence[Obj], profiles: Sequence[Obj], now: datetime) -> View:
    """One row per Node and profile (``profiles``: all of them, or the one asked for)."""
    ordered = sorted(profiles, key=lambda p: p["metadata"]["name"])
    records = {p["metadata"]["name"]: _record(p) for p in ordered}
    items, rows, wide = [], [], []
    placeholder: Obj = {"metadata": {"name": NONE}}  # no profile at all: each Node once, with no result
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        for profile in ordered or [placeholder]:
            name = profile["metadata"]["name"]
            item = node_result(node, profile, records.get(name, {}), now)
            entry = item.get("record") or {}
            fresh = {True: "fresh", False: "stale", None: "-"}[item["fresh"]]
            when = entry.get("completionTime")
            items.append(item)
            rows.append(
                [
                    item["node"],
                    item["profile"],
                    item["result"] or NONE,
                    fresh,
                    item["heldBy"] or "-",
                    tables.age(when, now) if when else "-",
                ]
            )
            run = f"{entry['namespace']}/{entry['run']}" if entry else "-"
            wide.append(
                [
                    run,
                    "yes" if item["requested"] else "no",
                    item["nodeLabel"] or NONE,
                    entry.get("evidenceDigest") or "-",
                ]
            )
    return View(
        NODE_RESOURCE,
        [{"kind": "NodeResult", "metadata": {"name": i["node"]}, **i} for i in items],
        ("NODE", "PROFILE", "RESULT", "FRESH", "HELD", "AGE"),
        rows,
        ("RUN", "REQUESTED", "NODE-LABEL", "EVIDENCE"),
        wide,
        empty="No Nodes or no CertificationProfiles found.",
    )
