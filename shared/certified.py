"""The authoritative record of which Nodes a profile certified (issue 12, item 6). Pure; no I/O.

A Node's labels, annotations and conditions are a copy a compromised kubelet can write
(NodeRestriction protects only ``node-restriction.kubernetes.io/`` labels). The original lives
where only the controller writes: the profile's ``status.certifiedNodes`` (the status
subresource; RBAC grants it to the controller alone), backed by each Run's evidence. The
controller re-asserts every Node's copy from it on every resync; the portal reads Runs and
their evidence, ``signalctl`` and recurrence read this record, never a Node's labels.

Stored form: ``base64(gzip(canonical JSON))`` of ``{"schema": RECORD_SCHEMA, "nodes": {<Node
name>: <entry>}}``, where an entry is the projection detail the controller writes to the Node
annotation (verdict, Run, namespace, Run uid, Run creation and completion times, evidence and
source digests, profile generation) plus ``nodeUID``: a replaced Node (same name, new uid) has
no result. Compressed so that a profile over thousands of Nodes stays well inside one object.

The label schedulers can trust: ``node-restriction.kubernetes.io/<name>`` (kubelets can neither
set nor remove it), ``<name>`` = ``signal-<profile>`` when that fits the 63-character limit of
a label name, else ``signal-<first 45 characters of the profile>-<first 10 hex of its
sha256>``; value ``Pass``/``Fail``/``Inconclusive`` like the ``certified.projectsignal.dev/``
label.
"""

import base64
import binascii
import gzip
import hashlib
import json
import zlib
from collections.abc import Mapping
from typing import Any, Final

from shared.digests import canonical_json

RECORD_SCHEMA: Final = "projectsignal.dev/certified-nodes/v1"
TRUSTED_LABEL_PREFIX: Final = "node-restriction.kubernetes.io/"
STALE: Final = "Stale"
"""A result label's value once the result proves nothing current (controller/reconcile/expiry.py)."""
MAX_LABEL_NAME: Final = 63
MAX_RECORD_BYTES: Final = 8 * 1024 * 1024
"""Largest uncompressed record accepted when decoding."""
ENTRY_FIELDS: Final = frozenset(
    {
        "verdict",
        "run",
        "namespace",
        "runUID",
        "runCreated",
        "completionTime",
        "evidenceDigest",
        "sourceDigest",
        "profileGeneration",
        "nodeUID",
    }
)
VERDICTS: Final = frozenset({"Pass", "Fail", "Inconclusive"})

Entry = dict[str, str]


class RecordError(ValueError):
    """The stored record is not one the controller wrote."""


def trusted_label(profile: str) -> str:
    """The ``node-restriction.kubernetes.io/`` label carrying ``profile``'s result."""
    name = f"signal-{profile}"
    if len(name) > MAX_LABEL_NAME:
        name = f"signal-{profile[:45]}-{hashlib.sha256(profile.encode()).hexdigest()[:10]}"
    return TRUSTED_LABEL_PREFIX + name


def encode(nodes: Mapping[str, Entry]) -> str:
    document = {"schema": RECORD_SCHEMA, "nodes": {name: dict(entry) for name, entry in nodes.items()}}
    return base64.b64encode(gzip.compress(canonical_json(document), mtime=0)).decode()


def decode(text: str | None) -> dict[str, Entry]:
    """The record's entries by Node name; empty for no record; RecordError if malformed."""
    if not text:
        return {}
    try:
        raw = zlib.decompressobj(wbits=31).decompress(base64.b64decode(text, validate=True), MAX_RECORD_BYTES + 1)
    except (binascii.Error, zlib.error) as exc:
        raise RecordError(f"not base64 gzip: {exc}") from exc
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"larger than {MAX_RECORD_BYTES} bytes")
    try:
        document: Any = json.loads(raw)
    except ValueError as exc:
        raise RecordError(f"not JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("schema") != RECORD_SCHEMA:
        raise RecordError(f"not a {RECORD_SCHEMA} document")
    nodes = document.get("nodes")
    if not isinstance(nodes, dict):
        raise RecordError("nodes is not an object")
    for name, entry in nodes.items():
        if (
            not isinstance(entry, dict)
            or set(entry) != ENTRY_FIELDS
            or not all(isinstance(v, str) for v in entry.values())
            or entry["verdict"] not in VERDICTS
        ):
            raise RecordError(f"the entry of Node {name!r} is malformed")
    return nodes


def supersedes(new: Mapping[str, str], old: Mapping[str, str] | None) -> bool:
    """Whether ``new`` may replace ``old`` (monotonic: the newer Run by creation time; the
    same Run repairs; a replaced Node's old entry is always replaced)."""
    if old is None or old.get("runUID") == new["runUID"] or old.get("nodeUID") != new["nodeUID"]:
        return True
    return new["runCreated"] > old.get("runCreated", "")


def with_run(nodes: Mapping[str, Entry], results: Mapping[str, Entry]) -> dict[str, Entry] | None:
    """The record with a Run's per-Node entries merged in (monotonic), or None when nothing
    changes."""
    merged = dict(nodes)
    changed = False
    for name, entry in results.items():
        if merged.get(name) != entry and supersedes(entry, merged.get(name)):
            merged[name] = dict(entry)
            changed = True
    return merged if changed else None


def current(nodes: Mapping[str, Entry], node_name: str, node_uid: str) -> Entry | None:
    """The entry of a Node as it is now (None when it has none, or it was replaced)."""
    entry = nodes.get(node_name)
    return entry if entry is not None and entry.get("nodeUID") == node_uid else None
