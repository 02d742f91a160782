"""The admission ledger: the single compare-and-swap point of admission. Pure.

The ledger's head, one ConfigMap in the controller's namespace, names every live group (Run
name -> the digest of its segment) and the fence of the leader allowed to write it. Every
admission adds its group with an update of the head conditioned on its resourceVersion, so two
writers (two replicas, or a deposed leader) can never both admit from the same state; budgets
and Node uniqueness are decided against the whole ledger. A new leader first bumps the fence,
so a deposed leader's next write fails on the resourceVersion and any later read shows it a
fence that is not its own.

A group's profile and Node names live in its segment: an immutable ConfigMap named by the
SHA-256 of its content, written before the head that names it. Segments never change, so the
controller reads each once; the head it reads and rewrites at each admission holds about 100
bytes per group instead of every held Node's name (issue 47: one ConfigMap of every group,
read, parsed and rewritten whole at each admission, was most of the cost of admitting at
100,000 Nodes, and its 1 MiB limit stopped admission at about 1,100 groups of 64).

Heads written before segments hold their groups inline (``groups``); they are read as they are,
and the next write moves them into segments. A head written now has no ``groups``, which an
earlier version refuses to parse: a downgrade stops admission rather than ignore the segments.

A malformed head, or a segment missing, malformed or not matching its digest, is an error,
never an empty ledger: admission stops (fail closed)."""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from shared import keys

LEDGER_NAME = "signal-admission-ledger"
SEGMENT_PREFIX = f"{LEDGER_NAME}-"
SEGMENT_COMPONENT = "ledger-segment"
"""The value of the component label on every segment (they are listed by it)."""
SEGMENT_KEY = "segment"
"""The data key of a segment's content."""


class LedgerError(ValueError):
    """The ledger cannot be parsed; admission must stop until a human looks."""


def _error(problem: str) -> LedgerError:
    return LedgerError(f"admission ledger {LEDGER_NAME} is malformed: {problem}")


@dataclass(frozen=True)
class Group:
    profile: str
    nodes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "nodes": list(self.nodes)}


@dataclass(frozen=True)
class Segment:
    """One group as stored on its own: its Run, and the fence it was admitted under (so that
    two leaders never write the same segment)."""

    run: str
    group: Group
    fence: int

    def content(self) -> str:
        body = {"fence": self.fence, "run": self.run, **self.group.to_json()}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        return hashlib.sha256(self.content().encode()).hexdigest()


def segment_name(digest: str) -> str:
    return SEGMENT_PREFIX + digest


@dataclass(frozen=True)
class Ledger:
    fence: int = 0
    holder: str = ""
    groups: Mapping[str, Group] = field(default_factory=dict)
    resource_version: str = ""
    digests: Mapping[str, str] = field(default_factory=dict)
    """Run name -> the digest of the stored segment of its group (absent: not stored yet)."""

    def held_nodes(self) -> set[str]:
        return {n for g in self.groups.values() for n in g.nodes}

    def all_group_nodes(self) -> list[str]:
        return [n for g in self.groups.values() for n in g.nodes]

    def with_group(self, run: str, group: Group) -> "Ledger":
        digests = {k: v for k, v in self.digests.items() if k != run}
        return replace(self, groups={**self.groups, run: group}, digests=digests)

    def without(self, run: str) -> "Ledger":
        groups = {k: v for k, v in self.groups.items() if k != run}
        return replace(self, groups=groups, digests={k: v for k, v in self.digests.items() if k != run})

    def fenced(self, fence: int, holder: str) -> "Ledger":
        return replace(self, fence=fence, holder=holder)


@dataclass(frozen=True)
class Head:
    """The head as read: its groups by segment digest, and any still inline (written before
    segments)."""

    fence: int = 0
    holder: str = ""
    segments: Mapping[str, str] = field(default_factory=dict)
    inline: Mapping[str, Group] = field(default_factory=dict)
    resource_version: str = ""


def _group(run: str, raw: Any) -> Group:
    if not isinstance(raw, dict):
        raise LedgerError(f"group {run} is not an object")
    # runUID: written by earlier versions (always empty); still accepted, never used.
    profile, nodes, uid = raw["profile"], raw["nodes"], raw.get("runUID", "")
    if not isinstance(profile, str) or not isinstance(uid, str):
        raise LedgerError(f"group {run}: profile and runUID must be strings")
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise LedgerError(f"group {run}: nodes must be a list of Node names")
    return Group(profile, tuple(nodes))


def _object(text: str, what: str) -> dict[str, Any]:
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise LedgerError(f"{what} is not an object")
    return raw


def parse_head(config_map: Mapping[str, Any]) -> Head:
    data = config_map.get("data") or {}
    try:
        fence = int(data.get("fence", "0"))
        if data and "groups" not in data and "segments" not in data:
            raise LedgerError("segments is missing")
        inline = {str(run): _group(run, g) for run, g in _object(data.get("groups", "{}"), "groups").items()}
        segments = _object(data.get("segments", "{}"), "segments")
        for run, digest in segments.items():
            if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
                raise LedgerError(f"the segment digest of Run {run} is not a SHA-256 in hex")
            if run in inline:
                raise LedgerError(f"Run {run} has a group both inline and in a segment")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise _error(str(exc)) from exc
    version = (config_map.get("metadata") or {}).get("resourceVersion", "")
    return Head(fence, str(data.get("holder", "")), segments, inline, version)


def parse_segment(config_map: Mapping[str, Any]) -> tuple[str, Segment]:
    """A segment as read: its digest (from its name) and content, which must hash to it."""
    name = str((config_map.get("metadata") or {}).get("name", ""))
    try:
        if not name.startswith(SEGMENT_PREFIX):
            raise LedgerError(f"{name!r} is not a segment's name")
        digest = name.removeprefix(SEGMENT_PREFIX)
        content = (config_map.get("data") or {}).get(SEGMENT_KEY)
        if not isinstance(content, str) or hashlib.sha256(content.encode()).hexdigest() != digest:
            raise LedgerError(f"segment {name}: its content does not match the digest it is named by")
        raw = _object(content, f"segment {name}")
        run, fence = raw["run"], raw["fence"]
        if not isinstance(run, str) or type(fence) is not int:
            raise LedgerError(f"segment {name}: run must be a string and fence an integer")
        segment = Segment(run, _group(run, raw), fence)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise _error(str(exc)) from exc
    return digest, segment


def assemble(head: Head, known: Mapping[str, Segment]) -> Ledger:
    """The ledger from its head and the segments read so far (digest -> segment)."""
    groups = dict(head.inline)
    for run, digest in head.segments.items():
        segment = known.get(digest)
        if segment is None:
            raise _error(f"segment {segment_name(digest)} of Run {run} is missing")
        if segment.run != run:
            raise _error(f"segment {segment_name(digest)} is Run {segment.run}'s, not Run {run}'s")
        groups[run] = segment.group
    return Ledger(head.fence, head.holder, groups, head.resource_version, dict(head.segments))


def parse_ledger(config_map: Mapping[str, Any], known: Mapping[str, Segment] | None = None) -> Ledger:
    return assemble(parse_head(config_map), known or {})


def unstored(ledger: Ledger) -> list[Segment]:
    """The segments to write before the head: groups not stored yet (new ones, or inline)."""
    new = sorted(run for run in ledger.groups if run not in ledger.digests)
    return [Segment(run, ledger.groups[run], ledger.fence) for run in new]


def stored(ledger: Ledger) -> Ledger:
    """``ledger`` with a digest for every group (those of ``unstored``)."""
    digests = {run: d for run, d in ledger.digests.items() if run in ledger.groups}
    digests.update((s.run, s.digest()) for s in unstored(ledger))
    return replace(ledger, digests=digests)


def ledger_data(ledger: Ledger) -> dict[str, str]:
    digests = stored(ledger).digests
    return {
        "fence": str(ledger.fence),
        "holder": ledger.holder,
        "segments": json.dumps(dict(sorted(digests.items())), separators=(",", ":")),
    }


def ledger_object(ledger: Ledger, namespace: str) -> dict[str, Any]:
    """The head's ConfigMap body; carries resourceVersion so an update is a compare-and-swap."""
    metadata: dict[str, Any] = {"name": LEDGER_NAME, "namespace": namespace}
    if ledger.resource_version:
        metadata["resourceVersion"] = ledger.resource_version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": ledger_data(ledger)}


def segment_object(segment: Segment, namespace: str) -> dict[str, Any]:
    """A segment's ConfigMap body: immutable, named by its digest, labelled to be listed."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": segment_name(segment.digest()),
            "namespace": namespace,
            "labels": {keys.COMPONENT_LABEL: SEGMENT_COMPONENT},
        },
        "immutable": True,
        "data": {SEGMENT_KEY: segment.content()},
    }
