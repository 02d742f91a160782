"""``signalctl describe node``: every profile's projection on a Node, the Run and evidence
behind it, and whether it is current. Pure: takes the objects already fetched, plus ``now``.

A projection is **current** when nothing newer or different has replaced what it proves: its
detail is readable and agrees with the label; Signal's own record of the profile's results
(``status.certifiedNodes``, shared/certified.py: only the controller writes it) holds the same
result for this Node (same uid), since the label and its detail are the Node's to write and a
kubelet can forge them or copy a neighbour's; the profile still exists with the same suite (the
source digest recorded with the result); the Node is the one the Run certified (same uid); the
Run's evidence, where it still exists, re-verifies, has the recorded digest and gives this Node
the label's verdict (issue 42: the record is only a claim until its evidence says so); and the
result is younger than the profile's freshness window (``freshness``, else
``recurrence.interval``, else 168h). A Run removed by retention leaves the projection standing but unverifiable here."""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared import certified, keys
from shared.classify import freshness_window
from signalctl.tables import age, render

Obj = dict[str, Any]


@dataclass
class Behind:
    """What stands behind one profile's projection, as fetched."""

    profile: str
    profile_obj: Obj | None = None
    """The CertificationProfile (None: deleted or unreadable, see ``profile_note``)."""
    profile_note: str = ""
    run: Obj | None = None
    run_note: str = ""
    """Why there is no Run (deleted, unreadable)."""
    evidence_digest: str | None = None
    """The recomputed digest of the Run's evidence document (None: not read)."""
    verify_problems: list[str] = field(default_factory=list)
    """`signalctl evidence verify`'s non-OK findings for that Run."""
    evidence_note: str = ""
    evidence_verdicts: dict[str, str] | None = None
    """The per-Node verdicts of the Run's evidence document (None: not read)."""


def projected_profiles(node: Obj) -> list[str]:
    """Profiles with a result label, detail annotation or condition on the Node."""
    prefix = keys.CERTIFIED_LABEL_PREFIX
    meta = node["metadata"]
    names = {k[len(prefix) :] for k in (meta.get("labels") or {}) if k.startswith(prefix)}
    names |= {k[len(prefix) :] for k in (meta.get("annotations") or {}) if k.startswith(prefix)}
    names |= {
        c["type"][len(prefix) :]
        for c in (node.get("status") or {}).get("conditions") or []
        if c["type"].startswith(prefix)
    }
    return sorted(names)


def detail_of(node: Obj, profile: str) -> dict[str, str] | None:
    raw = (node["metadata"].get("annotations") or {}).get(keys.certified_label(profile))
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # the Node's kubelet may write anything here
        return None
    # What the controller writes is an object of strings; anything else (a Run name that is a
    # number, a namespace that is a list) is unreadable, not a path to look things up by.
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return None
    return value


def _parse_time(text: object) -> datetime | None:
    """An RFC 3339 time with its offset (None for anything else: the Node writes the detail)."""
    try:
        parsed = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _age(text: object, now: datetime) -> str:
    """``age`` of a time the Node wrote; ``<unknown>`` when it is none."""
    parsed = _parse_time(text)
    return age(parsed.isoformat(), now) if parsed is not None else "<unknown>"


RECORD_FIELDS = ("run", "namespace", "runUID", "completionTime", "evidenceDigest", "sourceDigest")
"""The detail fields that must be what Signal's record holds."""


def _against_record(node: Obj, profile_obj: Obj, label: str, detail: dict[str, str]) -> list[str]:
    """Why the Node's label and detail are not Signal's record of its result (empty: they are)."""
    text = (profile_obj.get("status") or {}).get("certifiedNodes")
    try:
        record = certified.decode(text if isinstance(text, str) else None)
    except certified.RecordError as exc:
        return [f"Signal's record of this profile's results cannot be read ({exc}): the label is the Node's own claim"]
    meta = node["metadata"]
    entry = certified.current(record, meta["name"], str(meta.get("uid") or ""))
    if entry is None:
        return ["Signal's record has no result for this Node: the label and its detail are the Node's own claim"]
    reasons = []
    if entry["verdict"] != label:
        reasons.append(f"the label says {label} but Signal's record says {entry['verdict']}")
    wrong = [f"{k} {detail.get(k)!r} (recorded {entry[k]!r})" for k in RECORD_FIELDS if detail.get(k) != entry[k]]
    if wrong:
        reasons.append("the detail disagrees with Signal's record: " + ", ".join(wrong))
    return reasons


def not_current(node: Obj, behind: Behind, now: datetime) -> list[str]:
    """Why the projection of ``behind.profile`` on ``node`` is not current (empty: it is)."""
    profile = behind.profile
    label = (node["metadata"].get("labels") or {}).get(keys.certified_label(profile))
    detail = detail_of(node, profile)
    if label is None:
        return ["no result label on the Node"]
    if detail is None:
        return ["the result's detail annotation is missing or unreadable"]
    reasons = []
    if label == certified.STALE:
        reasons.append(f"the controller marked it Stale (expired; the detail says {detail.get('verdict')})")
    elif detail.get("verdict") != label:
        reasons.append(f"the label says {label} but the detail says {detail.get('verdict')}")
    if behind.profile_obj is None:
        reasons.append(f"the profile {behind.profile_note or 'no longer exists'}")
    else:
        reasons += _against_record(node, behind.profile_obj, label, detail)
        spec = behind.profile_obj.get("spec") or {}
        source = (spec.get("source") or {}).get("digest")
        if source != detail.get("sourceDigest"):
            reasons.append(f"the profile's suite changed since (source {detail.get('sourceDigest')} → {source})")
        completed = _parse_time(detail.get("completionTime"))
        window = freshness_window(spec)
        if completed is None:
            reasons.append("the completion time is unreadable")
        elif now - completed > window:
            reasons.append(f"Stale: completed {_age(detail['completionTime'], now)} ago, freshness {window}")
    if behind.run is not None:
        if behind.run["metadata"].get("uid") != detail.get("runUID"):
            reasons.append(f"Run {detail.get('run')} was replaced (uid now {behind.run['metadata'].get('uid')})")
        mine = [
            p for p in behind.run["spec"].get("participants") or [] if p.get("nodeName") == node["metadata"]["name"]
        ]
        if not mine:
            reasons.append(f"the Node is not a participant of Run {detail.get('run')}")
        elif mine[0].get("nodeUID") != node["metadata"].get("uid"):
            reasons.append("the Node was replaced since that Run (its uid changed)")
        if behind.evidence_digest is not None and behind.evidence_digest != detail.get("evidenceDigest"):
            recorded = detail.get("evidenceDigest")
            reasons.append(f"the Run's evidence digest is {behind.evidence_digest}, the Node records {recorded}")
        if behind.evidence_verdicts is not None:
            proven = behind.evidence_verdicts.get(node["metadata"]["name"])
            if proven != label:  # issue 42 H-A: the record and the label are only copies of this
                reasons.append(f"the Run's evidence gives this Node {proven or 'no verdict'}, not {label}")
        reasons += [f"evidence: {p}" for p in behind.verify_problems]
    return reasons


def _line(label: str, value: object) -> str:
    return f"  {label + ':':<16}{value if value not in (None, '') else '<none>'}"


def cordoned(node: Obj) -> str:
    """Whether new Pods are kept off the Node, and by whom: an operator's cordon
    (``spec.unschedulable``) and/or Signal's reservation taint."""
    spec = node.get("spec") or {}
    ways = []
    if spec.get("unschedulable"):
        ways.append("by an operator (spec.unschedulable)")
    if any(t.get("key") == keys.RESERVED_TAINT_KEY for t in spec.get("taints") or []):
        ways.append(f"by Signal's reservation (taint {keys.RESERVED_TAINT_KEY})")
    return f"yes, {' and '.join(ways)}" if ways else "no"


def describe_node(node: Obj, profiles: Sequence[Behind], now: datetime, profiles_note: str = "") -> str:
    meta = node["metadata"]
    labels = meta.get("labels") or {}
    reserved = labels.get(keys.RESERVED_BY_LABEL)
    reservation = (meta.get("annotations") or {}).get(keys.RESERVATION_ANNOTATION, "")
    lines = [
        f"Name:           {meta['name']}",
        f"UID:            {meta.get('uid')}",
        f"Reserved by:    {f'Run uid {reserved} {reservation}'.strip() if reserved else '<not reserved>'}",
        f"Requested:      {labels.get(keys.CERTIFY_LABEL) or '<no request>'}",
        f"Cordoned:       {cordoned(node)}",
    ]
    if profiles_note:
        lines.append(f"Profiles:       {profiles_note}")
    summary = []
    for behind in profiles:
        label = labels.get(keys.certified_label(behind.profile))
        detail = detail_of(node, behind.profile)
        lines.append(f"Profile {behind.profile}:")
        if label is None and detail is None:
            lines.append("  <never certified by this profile>")
            summary.append([behind.profile, "-", "-", "-"])
            continue
        reasons = not_current(node, behind, now)
        detail = detail or {}
        status = (behind.run or {}).get("status") or {}
        run_text = f"{detail.get('namespace')}/{detail.get('run')} (uid {detail.get('runUID')})"
        lines += [
            _line("Result", label),
            _line("Completed", f"{detail.get('completionTime')} ({_age(detail.get('completionTime'), now)} ago)"),
            _line("Run", run_text + (f": {behind.run_note}" if behind.run is None else "")),
        ]
        if behind.run is not None:
            verdicts = ", ".join(f"{v.get('name')}={v.get('verdict')}" for v in status.get("checkVerdicts") or [])
            lines.append(_line("Run phase", f"{status.get('phase')} ({status.get('reason')})"))
            lines.append(_line("Checks", verdicts))
        evidence = detail.get("evidenceDigest")
        if behind.run is not None and behind.evidence_digest is not None and not behind.verify_problems:
            evidence = f"{evidence} (re-verified: `signalctl evidence verify {detail.get('run')}`)"
        elif behind.evidence_note:
            evidence = f"{evidence} ({behind.evidence_note})"
        lines.append(_line("Evidence", evidence))
        lines.append(
            _line("Suite", f"source {detail.get('sourceDigest')}, generation {detail.get('profileGeneration')}")
        )
        lines.append(_line("Current", "yes" if not reasons else "NO"))
        lines += [f"    - {reason}" for reason in reasons]
        summary.append([behind.profile, label or "-", "yes" if not reasons else "no", detail.get("run") or "-"])
    lines.append("Summary:")
    lines += ["  " + row for row in render(("PROFILE", "RESULT", "CURRENT", "RUN"), summary).splitlines()]
    return "\n".join(lines)


def node_document(node: Obj, profiles: Sequence[Behind], now: datetime) -> Obj:
    """What ``describe node -o json|yaml`` prints: the Node's name, uid, reservation and request,
    and per profile its result, whether it is current and why not."""
    meta = node["metadata"]
    labels = meta.get("labels") or {}
    results: list[Obj] = []
    for behind in profiles:
        label = labels.get(keys.certified_label(behind.profile))
        detail = detail_of(node, behind.profile)
        if label is None and detail is None:
            results.append({"profile": behind.profile, "result": None})
            continue
        reasons = not_current(node, behind, now)
        results.append(
            {
                "profile": behind.profile,
                "result": label,
                "current": not reasons,
                "notCurrent": reasons,
                "detail": detail,
            }
        )
    return {
        "kind": "NodeCertification",
        "metadata": {"name": meta["name"], "uid": meta.get("uid")},
        "reservedBy": labels.get(keys.RESERVED_BY_LABEL),
        "requested": labels.get(keys.CERTIFY_LABEL),
        "cordoned": cordoned(node),
        "profiles": results,
    }
