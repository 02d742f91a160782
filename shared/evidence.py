"""Check evidence: the documents the adapter persists for one check, and how they are
stored. Pure; no I/O.

Two immutable, Run-owned ConfigMaps per check, each holding gzip-compressed canonical JSON
(key ``EVIDENCE_KEY``) whose sha256 (of the uncompressed canonical bytes) is its digest:

1. ``<run>-c<index>-results`` (``projectsignal.dev/check-results/v1``): what the backend
   workloads were and what each participant's result was. Persisted **before** any
   workload is deleted.
2. ``<run>-c<index>-evidence`` (``projectsignal.dev/check-evidence/v1``): the results
   document verbatim with its digest, the cleanup outcome (deleted and retained
   workloads), and the check's final verdict (Inconclusive when cleanup could not be
   proven). Its digest is the step output the controller verifies.

A stored document must decode to exactly its canonical form: anything else (bad gzip,
too large, not canonical, wrong schema) is rejected by ``decode_document``.
"""

import base64
import binascii
import gzip
import json
import sys
import zlib
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import Field

from shared import keys
from shared.artifacts import StoredArtifacts
from shared.digests import canonical_json, sha256_digest
from shared.meta import Digest, StrictModel
from shared.result import Measurements, Output, RunnerResult
from shared.run import Verdict

RESULTS_SCHEMA: Final = "projectsignal.dev/check-results/v1"
CHECK_EVIDENCE_SCHEMA: Final = "projectsignal.dev/check-evidence/v1"
EVIDENCE_KEY: Final = "evidence.json.gz"
DIGEST_ANNOTATION: Final = f"{keys.GROUP}/evidence-digest"
SCHEMA_ANNOTATION: Final = f"{keys.GROUP}/evidence-schema"
MAX_DOCUMENT_BYTES: Final = 2 * 1024 * 1024
"""Largest canonical JSON document accepted (uncompressed)."""
MAX_STORED_BYTES: Final = 768 * 1024
"""Largest gzip payload stored (a ConfigMap holds at most 1 MiB in all)."""


class EvidenceError(ValueError):
    """Evidence is missing, malformed, too large, or does not match its digest."""


class RunIdentity(StrictModel):
    namespace: str
    name: str
    uid: str


class CheckIdentity(StrictModel):
    index: Annotated[int, Field(ge=0, lt=32)]
    name: str
    backend: Literal["Pod", "MPIJob"]
    script_key: str
    source_digest: Digest
    bundle: dict[str, Digest] | None = None
    """sha256 of every key of the Run's snapshot as the adapter verified it (shared/snapshot.py):
    acceptance recomputes the source digest from it. None in evidence written before it was
    recorded, or when the snapshot could not be verified: such evidence proves no verdict."""
    script_digest: Digest | None = None
    """sha256 of the check's script key in the snapshot: what every runner must report having
    executed (``ParticipantResult.script_digest``)."""
    parameters: dict[str, str] | None = None
    """The check's parameters as its script received them (``SIGNAL_PARAM_<NAME>``), from the
    Run's immutable copy of the check. None in evidence written before they were recorded."""
    image: str | None = None
    """The check's own image (``name@sha256:<digest>``) its runner ran in; None: the runner image."""


class OwnerLink(StrictModel):
    """One controller owner of a workload (an ownerReference with ``controller: true``, or, for
    what the adapter creates itself, its one ownerReference to the Run)."""

    kind: str
    name: str
    uid: str


class Workload(StrictModel):
    """One object a check created (directly or through the MPI operator)."""

    kind: str
    name: str
    uid: str
    node_name: str | None = None
    participant_index: int | None = None
    role: Literal["participant", "launcher", "worker", "mpijob", "job"]
    owners: list[OwnerLink] | None = None
    """Its controller owner chain as the adapter verified it, nearest first, up to the Run: a
    Pod check's Pod and an MPIJob ``[Run]``, an MPI worker ``[MPIJob, Run]``, a launcher Pod
    ``[Job, MPIJob, Run]`` (shared/ownership.py). None in evidence written before chains were
    recorded: such evidence proves no verdict (docs/security.md)."""


class ParticipantResult(StrictModel):
    index: int
    node_name: str
    node_uid: str
    verdict: Verdict
    reason: Annotated[str, Field(max_length=512)]
    workload: str | None = None
    """Name of the Pod (or MPI worker) that served this participant."""
    workload_uid: str | None = None
    script_digest: Digest | None = None
    """sha256 of the script the runner executed, as it reported (a Pod check's own Pod; an MPI
    check's launcher, whose ranks each reported the same)."""
    exit_code: int | None = None
    signal: int | None = None
    measurements: Measurements = Field(default_factory=dict)
    stdout: Output | None = None
    stderr: Output | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    artifacts: StoredArtifacts | None = None
    """Each artifact the participant's runner stored (complete stdout, stderr, output files),
    with the key the adapter signed its upload for, its sha256 and size; None without a store."""


class CheckResults(StrictModel):
    schema_: Annotated[Literal["projectsignal.dev/check-results/v1"], Field(alias="schema")] = RESULTS_SCHEMA
    run: RunIdentity
    check: CheckIdentity
    verdict: Verdict
    reason: Annotated[str, Field(max_length=512)]
    started_at: datetime
    collected_at: datetime
    workloads: list[Workload]
    participants: list[ParticipantResult]
    launcher: RunnerResult | None = None
    """The MPI launcher's own result (report of every rank, output tails), when there is one."""


class Cleanup(StrictModel):
    state: Literal["Complete", "Failed"]
    message: Annotated[str, Field(max_length=1024)]
    deleted: list[Workload]
    retained: list[Workload]
    finished_at: datetime


class CheckEvidence(StrictModel):
    schema_: Annotated[Literal["projectsignal.dev/check-evidence/v1"], Field(alias="schema")] = CHECK_EVIDENCE_SCHEMA
    results: CheckResults
    results_digest: Digest
    results_config_map: str
    cleanup: Cleanup
    verdict: Verdict
    reason: Annotated[str, Field(max_length=512)]


def to_document(model: StrictModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def encode(document: dict[str, Any]) -> tuple[bytes, str, bytes]:
    """(canonical JSON, its digest, deterministic gzip of it); raise EvidenceError if too large."""
    payload = canonical_json(document)
    if len(payload) > MAX_DOCUMENT_BYTES:
        raise EvidenceError(f"evidence document is {len(payload)} bytes; the limit is {MAX_DOCUMENT_BYTES}")
    compressed = gzip.compress(payload, compresslevel=9, mtime=0)
    if len(compressed) > MAX_STORED_BYTES:
        raise EvidenceError(f"compressed evidence is {len(compressed)} bytes; the limit is {MAX_STORED_BYTES}")
    return payload, sha256_digest(payload), compressed


def config_map(
    *,
    name: str,
    namespace: str,
    owner: dict[str, Any],
    labels: dict[str, str],
    document: dict[str, Any],
) -> tuple[dict[str, Any], str, int]:
    """An immutable ConfigMap holding ``document``; returns (manifest, digest, stored bytes)."""
    _, digest, compressed = encode(document)
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {DIGEST_ANNOTATION: digest, SCHEMA_ANNOTATION: str(document.get("schema", ""))},
            "ownerReferences": [owner],
        },
        "immutable": True,
        "binaryData": {EVIDENCE_KEY: base64.b64encode(compressed).decode("ascii")},
    }
    return manifest, digest, len(compressed)


def decode_document(config_map_obj: dict[str, Any], schema: str | tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """The document stored in an evidence ConfigMap and its recomputed digest; raise
    EvidenceError unless it is immutable, bounded, canonical and of ``schema`` (or one of them)."""
    name = config_map_obj.get("metadata", {}).get("name", "?")
    if config_map_obj.get("immutable") is not True:
        raise EvidenceError(f"evidence ConfigMap {name} is not immutable")
    encoded = (config_map_obj.get("binaryData") or {}).get(EVIDENCE_KEY)
    if not isinstance(encoded, str):
        raise EvidenceError(f"evidence ConfigMap {name} has no {EVIDENCE_KEY}")
    try:
        compressed = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise EvidenceError(f"evidence ConfigMap {name}: bad base64: {exc}") from exc
    if len(compressed) > MAX_STORED_BYTES:
        raise EvidenceError(f"evidence ConfigMap {name}: {len(compressed)} compressed bytes exceeds the limit")
    try:
        inflater = zlib.decompressobj(wbits=31)
        payload = inflater.decompress(compressed, MAX_DOCUMENT_BYTES + 1)
        if len(payload) > MAX_DOCUMENT_BYTES or inflater.unconsumed_tail or not inflater.eof:
            raise EvidenceError(f"evidence ConfigMap {name}: document too large or truncated")
        if inflater.unused_data:
            raise EvidenceError(f"evidence ConfigMap {name}: data after the gzip stream")
    except zlib.error as exc:
        raise EvidenceError(f"evidence ConfigMap {name}: bad gzip: {exc}") from exc
    # Whatever Python's json cannot take (nesting too deep for it, an integer of too many
    # digits, a number that parses as infinity) is a bad document like any other.
    try:
        document = json.loads(payload, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise EvidenceError(f"evidence ConfigMap {name}: not JSON: nested too deeply for the parser") from exc
    except (json.JSONDecodeError, UnicodeDecodeError, _ConstantError) as exc:
        raise EvidenceError(f"evidence ConfigMap {name}: not JSON: {exc}") from exc
    except ValueError as exc:  # an integer of more digits than Python converts
        limit = sys.get_int_max_str_digits()
        raise EvidenceError(f"evidence ConfigMap {name}: not JSON: a number of more than {limit} digits") from exc
    try:
        canonical = isinstance(document, dict) and canonical_json(document) == payload
    except RecursionError as exc:
        raise EvidenceError(f"evidence ConfigMap {name}: not a canonical JSON object: nested too deeply") from exc
    except ValueError as exc:  # e.g. 1e400, which parses as infinity and JSON cannot hold
        raise EvidenceError(f"evidence ConfigMap {name}: not a canonical JSON object: a number out of range") from exc
    if not canonical:
        raise EvidenceError(f"evidence ConfigMap {name}: not a canonical JSON object")
    schemas = (schema,) if isinstance(schema, str) else schema
    if document.get("schema") not in schemas:
        expected = " or ".join(schemas)
        raise EvidenceError(f"evidence ConfigMap {name}: schema {document.get('schema')!r}, expected {expected}")
    return document, sha256_digest(payload)


class _ConstantError(ValueError):
    """NaN or Infinity in a stored document."""


def _reject_constant(name: str) -> Any:
    raise _ConstantError(f"non-standard JSON constant {name}")


def check_verdict(participants: list[ParticipantResult]) -> tuple[Verdict, str]:
    """Pass only if every participant passed; any proven failure is Fail; otherwise Inconclusive."""
    failed = [p.index for p in participants if p.verdict == Verdict.FAIL]
    if failed:
        return Verdict.FAIL, f"participant(s) {', '.join(map(str, failed))} failed"
    unsure = [p.index for p in participants if p.verdict != Verdict.PASS]
    if unsure or not participants:
        return Verdict.INCONCLUSIVE, f"participant(s) {', '.join(map(str, unsure))} inconclusive"
    return Verdict.PASS, f"all {len(participants)} participant(s) passed"
