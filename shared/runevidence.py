"""The Run's evidence document, versions 1 and 2, and how a reader gets each check's evidence
from it. Pure; no I/O: callers fetch the ConfigMaps.

* ``projectsignal.dev/evidence/v2`` (written since issue 41) names each check's evidence
  instead of embedding it: per check, the ConfigMap ``<run>-c<i>-evidence`` and the digest of
  its document, the digest the adapter reported to Argo, and the check's results ConfigMap
  ``<run>-c<i>-results`` with the results digest that evidence records. Its size grows with
  the number of checks and participants (names and verdicts), never with what the checks
  printed: at most 32 checks x about 1.3 KiB plus 64 participants x about 0.6 KiB.
* ``projectsignal.dev/evidence/v1`` (before) embedded every check's evidence document
  verbatim. Old v1 documents are still read, unchanged, everywhere.

Reading a check's evidence (``resolve``) is fail-closed: from a v2 document, the check's
ConfigMap counts only if it has exactly the name the document gives for it (the adapter's
name), decodes canonically (immutable, bounded), is owned by the Run, and its recomputed digest
is the one the document names; from a v1 document, only if the embedded copy hashes to the
recorded digest. Anything else gives no document and a problem (``MissingEvidence``,
``DigestMismatch``, ``MalformedEvidence``, ``ForeignEvidence``), which no reader takes as a
Pass. ``materialize`` gives a v2 document the v1 shape in memory (each entry's ``evidence``
filled in, or None with the problem), so the acceptance rules re-derive both the same way.
"""

import copy
from typing import Any, Final

from shared import keys
from shared.digests import canonical_json, sha256_digest
from shared.evidence import CHECK_EVIDENCE_SCHEMA, EvidenceError, decode_document

RUN_EVIDENCE_SCHEMA_V1: Final = "projectsignal.dev/evidence/v1"
RUN_EVIDENCE_SCHEMA: Final = "projectsignal.dev/evidence/v2"
"""The version the controller writes."""
RUN_EVIDENCE_SCHEMAS: Final = (RUN_EVIDENCE_SCHEMA, RUN_EVIDENCE_SCHEMA_V1)
"""Every version a reader accepts."""
Obj = dict[str, Any]


def by_reference(document: Obj) -> bool:
    """Whether ``document`` names its checks' evidence (v2) rather than embedding it (v1)."""
    return document.get("schema") == RUN_EVIDENCE_SCHEMA


def check_entry(run_name: str, index: int, name: str, verdict: str, problem: str | None, **found: Any) -> Obj:
    """One check of a v2 document. ``found``: ``digest`` and ``reported`` (the stored and the
    reported evidence digests) and ``document`` (the check's decoded evidence, if any)."""
    document = found.get("document") or {}
    return {
        "index": index,
        "name": name,
        "verdict": verdict,
        "problem": problem,
        "configMap": keys.check_evidence_name(run_name, index),
        "digest": found.get("digest"),
        "reportedDigest": found.get("reported"),
        "resultsConfigMap": document.get("resultsConfigMap"),
        "resultsDigest": document.get("resultsDigest"),
    }


def _owned(config_map: Obj, run: Obj) -> bool:
    refs = (config_map.get("metadata") or {}).get("ownerReferences") or []
    return run["metadata"]["uid"] in {r.get("uid") for r in refs if isinstance(r, dict)}


def resolve(run: Obj, entry: Obj, config_map: Obj | None) -> tuple[Obj | None, str | None]:
    """(the check's evidence document, None), or (None, why not), for one entry of a v2
    document and the check evidence ConfigMap found under the adapter's name (None: absent).
    An entry that recorded no digest (the check had no valid stored evidence when decided)
    resolves to its recorded problem, whatever is stored now."""
    index = entry.get("index")
    expected = keys.check_evidence_name(run["metadata"]["name"], index if isinstance(index, int) else -1)
    digest = entry.get("digest")
    if entry.get("configMap") != expected:
        return None, f"ForeignEvidence: the Run evidence names ConfigMap {entry.get('configMap')!r}, not {expected}"
    if digest is None:
        return None, str(entry.get("problem") or "MissingEvidence: no check evidence was recorded")
    if config_map is None:
        return None, f"MissingEvidence: ConfigMap {expected}, named by the Run evidence ({digest}), is gone"
    try:
        document, found = decode_document(config_map, CHECK_EVIDENCE_SCHEMA)
    except EvidenceError as exc:
        return None, f"MalformedEvidence: {exc}"[:300]
    if not _owned(config_map, run):
        return None, f"ForeignEvidence: ConfigMap {expected} is not owned by this Run"
    if found != digest:
        return None, f"DigestMismatch: ConfigMap {expected} holds {found}; the Run evidence names {digest}"
    return document, None


def config_map_names(run: Obj, document: Obj) -> dict[int, str]:
    """The check evidence ConfigMaps a reader must fetch for ``document`` (none for v1)."""
    if not by_reference(document):
        return {}
    return {i: keys.check_evidence_name(run["metadata"]["name"], i) for i in range(len(run["spec"]["checks"]))}


def materialize(run: Obj, document: Obj, config_maps: dict[int, Obj | None]) -> Obj:
    """``document`` in the v1 shape: a v2 document's entries get ``evidence`` (resolved from
    ``config_maps``, by check index) or None with ``problem`` saying why. A v1 document is
    returned as it is. The input is not changed."""
    if not by_reference(document):
        return document
    view = copy.copy(document)
    entries = []
    for entry in document.get("checks") or []:
        if not isinstance(entry, dict):
            entries.append(entry)
            continue
        evidence, problem = resolve(run, entry, config_maps.get(entry["index"]) if _indexed(entry) else None)
        entries.append({**entry, "evidence": evidence, **({"problem": problem} if evidence is None else {})})
    view["checks"] = entries
    return view


def _indexed(entry: Obj) -> bool:
    index = entry.get("index")
    return isinstance(index, int) and not isinstance(index, bool)


def embedded_digest(entry: Obj) -> str | None:
    """The digest of a v1 entry's embedded evidence (None when there is none)."""
    evidence = entry.get("evidence")
    return sha256_digest(canonical_json(evidence)) if isinstance(evidence, dict) else None
