"""Plain-text tables in the style of ``kubectl get``. Pure; no I/O."""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any


def render(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by three spaces, like kubectl."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [
        "   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in [headers, *rows]
    ]
    return "\n".join(lines)


def age(timestamp: str | None, now: datetime) -> str:
    """kubectl-style age: 45s, 12m, 3h, 2d."""
    if not timestamp:
        return "<unknown>"
    seconds = int((now - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def node_rows(nodes: Sequence[dict[str, Any]], now: datetime | None = None) -> list[list[str]]:
    """Rows of NAME STATUS ROLES AGE VERSION GPUS ZONE RACK for Node objects."""
    now = now or datetime.now(UTC)
    rows = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        meta, status = node["metadata"], node.get("status", {})
        ready = next((c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"), "Unknown")
        state = {"True": "Ready", "False": "NotReady"}.get(ready, "Unknown")
        if node.get("spec", {}).get("unschedulable"):
            state += ",SchedulingDisabled"
        labels = meta.get("labels", {})
        rows.append(
            [
                meta["name"],
                state,
                "<none>",
                age(meta.get("creationTimestamp"), now),
                status.get("nodeInfo", {}).get("kubeletVersion", ""),
                status.get("allocatable", {}).get("nvidia.com/gpu", "0"),
                labels.get("topology.kubernetes.io/zone", ""),
                labels.get("projectsignal.dev/rack", ""),
            ]
        )
    return rows


NODE_HEADERS = ("NAME", "STATUS", "ROLES", "AGE", "VERSION", "GPUS", "ZONE", "RACK")


RUN_HEADERS = ("NAME", "PROFILE", "PHASE", "REASON", "NODES", "CHECKS", "AGE")
MAX_NODE_NAMES = 3


def nodes_cell(participants: Sequence[dict[str, Any]]) -> str:
    """Participant Node names in index order, at most three, then ``+N``."""
    names = [p.get("nodeName", "?") for p in sorted(participants, key=lambda p: p.get("index", 0))]
    if len(names) <= MAX_NODE_NAMES:
        return ",".join(names) or "<none>"
    return ",".join(names[:MAX_NODE_NAMES]) + f",+{len(names) - MAX_NODE_NAMES}"


def checks_cell(checks: Sequence[dict[str, Any]], verdicts: Sequence[dict[str, Any]]) -> str:
    """``2/3 passed`` (of the Run's checks), with the failures and inconclusive ones counted."""
    counts = {"Pass": 0, "Fail": 0, "Inconclusive": 0}
    for verdict in verdicts:
        if verdict.get("verdict") in counts:
            counts[verdict["verdict"]] += 1
    cell = f"{counts['Pass']}/{len(checks)} passed"
    if counts["Fail"]:
        cell += f", {counts['Fail']} failed"
    if counts["Inconclusive"]:
        cell += f", {counts['Inconclusive']} inconclusive"
    return cell


def run_rows(runs: Sequence[dict[str, Any]], now: datetime, *, all_namespaces: bool = False) -> list[list[str]]:
    """Rows of RUN_HEADERS (NAMESPACE first when listing all namespaces), by namespace and name."""
    rows = []
    for run in sorted(runs, key=lambda r: (r["metadata"].get("namespace", ""), r["metadata"]["name"])):
        meta, spec, status = run["metadata"], run.get("spec") or {}, run.get("status") or {}
        row = [
            meta["name"],
            (spec.get("profile") or {}).get("name", ""),
            status.get("phase") or "Pending",
            status.get("reason") or "",
            nodes_cell(spec.get("participants") or []),
            checks_cell(spec.get("checks") or [], status.get("checkVerdicts") or []),
            age(meta.get("creationTimestamp"), now),
        ]
        rows.append([meta.get("namespace", ""), *row] if all_namespaces else row)
    return rows
