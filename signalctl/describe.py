"""``signalctl describe run``: a Run, its participants' Nodes and its Events as readable text,
in the style of ``kubectl describe``. Pure: takes the objects already fetched, plus ``now``."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from shared import certified, keys
from signalctl.tables import age, render

Obj = dict[str, Any]
MAX_EVENTS = 20
UNREADABLE = "<unreadable>"
"""What a Node lookup gives when the caller may not read Nodes."""
UNREADABLE_RECORD = "<record unreadable>"
"""CERTIFIED when the profile's record could not be read."""


def _field(label: str, value: object) -> str:
    return f"{label + ':':<18}{value if value not in (None, '') else '<none>'}"


def participant_rows(
    run: Obj, nodes: dict[str, Obj | str | None], record: dict[str, dict[str, str]] | None = None
) -> list[list[str]]:
    """INDEX NODE NODE-UID CERTIFIED per participant. ``nodes`` maps a Node name to the Node,
    ``UNREADABLE``, or None (not found). CERTIFIED is the profile's record (shared/certified.py;
    None: it could not be read), never the Node's own label, which is shown only when it
    disagrees (a kubelet can write it)."""
    profile = run["spec"]["profile"]["name"]
    rows = []
    for p in sorted(run["spec"]["participants"], key=lambda p: p["index"]):
        node = nodes.get(p["nodeName"])
        if node is None:
            label = "<Node not found>"
        elif isinstance(node, str):
            label = node
        else:
            uid = node["metadata"].get("uid", "")
            entry = certified.current(record, p["nodeName"], uid) if record is not None else None
            label = UNREADABLE_RECORD if record is None else (entry["verdict"] if entry else "<none>")
            claimed = (node["metadata"].get("labels") or {}).get(keys.certified_label(profile))
            if record is not None and claimed != (entry["verdict"] if entry else None):
                label += f" (Node label says {claimed or 'nothing'}: not Signal's record)"
            if uid != p["nodeUID"]:
                label += f" (Node replaced: uid now {uid})"
        rows.append([str(p["index"]), p["nodeName"], p["nodeUID"], label])
    return rows


def event_rows(events: Sequence[Obj], now: datetime) -> list[list[str]]:
    """TYPE REASON AGE MESSAGE for the newest ``MAX_EVENTS`` Events, oldest first."""

    def stamp(event: Obj) -> str:
        return str(
            event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp") or ""
        )

    ordered = sorted(events, key=stamp)[-MAX_EVENTS:]
    return [
        [e.get("type", ""), e.get("reason", ""), age(stamp(e)[:19] + "Z", now), e.get("message", "")] for e in ordered
    ]


def describe_run(
    run: Obj,
    nodes: dict[str, Obj | str | None],
    events: Sequence[Obj] | None,
    now: datetime,
    record: dict[str, dict[str, str]] | None = None,
) -> str:
    """The full description. ``events`` None means they could not be read; ``record`` (the
    profile's certified-nodes record) None, that it could not be."""
    meta, spec, status = run["metadata"], run["spec"], run.get("status") or {}
    evidence = status.get("evidence") or {}
    workflow = status.get("workflow") or {}
    lines = [
        _field("Name", meta["name"]),
        _field("Namespace", meta.get("namespace")),
        _field("UID", meta.get("uid")),
        _field("Profile", f"{spec['profile']['name']} (generation {spec['profile'].get('generation')})"),
        _field("Attempt", spec.get("attempt", 1)),
        _field("Source digest", spec.get("source", {}).get("digest")),
        _field("Created", f"{meta.get('creationTimestamp')} ({age(meta.get('creationTimestamp'), now)} ago)"),
        _field("Phase", status.get("phase") or "Pending"),
        _field("Reason", status.get("reason")),
        _field("Message", status.get("message")),
        _field("Started", status.get("startTime")),
        _field("Completed", status.get("completionTime")),
        _field("Cancel", "requested" if spec.get("cancel") else "no"),
        _field("Release", "requested" if spec.get("release") else "no"),
        _field("Workflow", f"{workflow['name']} (uid {workflow.get('uid')})" if workflow.get("name") else None),
        "Evidence:",
        "  " + _field("ConfigMap", evidence.get("configMap")),
        "  " + _field("Digest", evidence.get("digest")),
        "  " + _field("Bytes", evidence.get("bytes")),
        "Conditions:",
    ]
    conditions = status.get("conditions") or []
    if conditions:
        rows = [[c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", "")] for c in conditions]
        lines += _indent(render(("TYPE", "STATUS", "REASON", "MESSAGE"), rows))
    else:
        lines.append("  <none>")
    lines.append("Checks:")
    verdicts = {v.get("name"): v.get("verdict") for v in status.get("checkVerdicts") or []}
    rows = [
        [str(i), c["name"], c.get("backend", ""), str(c.get("gpuCount", 0)), verdicts.get(c["name"], "<pending>")]
        for i, c in enumerate(spec.get("checks") or [])
    ]
    lines += _indent(render(("INDEX", "NAME", "BACKEND", "GPUS", "VERDICT"), rows))
    lines.append("Participants:")
    certified = f"CERTIFIED ({keys.certified_label(spec['profile']['name'])})"
    lines += _indent(render(("INDEX", "NODE", "NODE-UID", certified), participant_rows(run, nodes, record)))
    lines.append("Events:")
    if events is None:
        lines.append("  <could not read Events>")
    elif events:
        lines += _indent(render(("TYPE", "REASON", "AGE", "MESSAGE"), event_rows(events, now)))
    else:
        lines.append("  <none>")
    return "\n".join(lines)


def _indent(text: str) -> list[str]:
    return ["  " + line for line in text.splitlines()]
