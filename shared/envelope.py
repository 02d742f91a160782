"""The validation result envelope (``projectsignal.dev/validation-result/v1``): what the portal
serves, one per (check type, target Node) of a Run, and how it is derived from a Run and its
evidence document. Pure; no I/O. Used by the portal (and anything else that reads results).

Derivation re-verifies the whole chain independently of the controller: the Run's evidence
document (v2 or v1, shared/runevidence.py) must decode canonically to the digest in the Run's
status and name this Run and its participants; every check's evidence (v2: its ConfigMap, read
and ``materialize``d; v1: embedded) must hash to its recorded digest, be of a supported version
and pass the same acceptance rules (shared/acceptance.py) again. What derivation finds goes into
``verification``, ``verdict`` and ``cleanup``; the ``state`` (Passed/Failed/Running/Unknown/Stale)
is assigned by shared/classify.py, which also needs the current Node uid and the freshness window.
``python -m shared.envelope [FILE]`` writes the published JSON Schema (schemas/validation-result-v1.json).
"""

import json
import sys
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, JsonValue, ValidationError

from shared import keys
from shared.acceptance import validate_check
from shared.digests import canonical_json, sha256_digest
from shared.evidence import CHECK_EVIDENCE_SCHEMA, SCHEMA_ANNOTATION, EvidenceError, decode_document
from shared.meta import Digest, StrictModel
from shared.run import TERMINAL_PHASES, Phase, Verdict
from shared.runevidence import RUN_EVIDENCE_SCHEMAS
from shared.schema_docs import DocumentedSchema

ENVELOPE_SCHEMA: Final = "projectsignal.dev/validation-result/v1"
SCHEMA_FILE: Final = "schemas/validation-result-v1.json"
ID_SEPARATOR: Final = "~"
Obj = dict[str, Any]


class State(StrEnum):
    """What a result means for an operator (SPEC §6); see shared/classify.py."""

    PASSED = "Passed"
    FAILED = "Failed"
    RUNNING = "Running"
    STALE = "Stale"
    UNKNOWN = "Unknown"


class Verification(StrEnum):
    """How far the evidence chain behind one result verified."""

    VERIFIED = "Verified"
    PENDING = "Pending"
    """The Run is still in progress: there is no evidence yet."""
    MISSING = "Missing"
    MALFORMED = "Malformed"
    UNSUPPORTED_VERSION = "UnsupportedVersion"
    DIGEST_MISMATCH = "DigestMismatch"
    UNAUTHORIZED = "Unauthorized"
    """The portal may not read the evidence."""
    INCOMPLETE = "Incomplete"
    """The evidence does not cover exactly the Run's targets."""
    FOREIGN = "Foreign"
    """The evidence belongs to another Run, check or source."""
    INCONSISTENT = "Inconsistent"
    """The evidence does not agree with itself or with the Run."""


class CleanupState(StrEnum):
    COMPLETE = "Complete"
    FAILED = "Failed"
    PENDING = "Pending"
    UNKNOWN = "Unknown"


class CheckType(StrictModel):
    """Which check: the profile's name and the check's name (and its position in the suite)."""

    profile: str
    name: str
    index: Annotated[int, Field(ge=0)]


class CheckVersion(StrictModel):
    """Which version of the check ran: the profile generation and the script source digest."""

    profile_generation: Annotated[int, Field(ge=1)]
    source_digest: Digest


class RunRef(StrictModel):
    """The Run that produced the result."""

    namespace: str
    name: str
    uid: str
    attempt: Annotated[int, Field(ge=1)]
    phase: Phase
    created: datetime | None = None


class Scope(StrictModel):
    cluster: str
    """The cluster the portal reads (its --cluster name)."""
    workspace: str
    """The namespace of the Run: the unit of authorization."""


class TargetNode(StrictModel):
    """The Node the result is about, as admitted (name and immutable uid)."""

    name: str
    uid: str
    index: Annotated[int, Field(ge=0)]
    """The participant index in the Run."""


class VerificationResult(StrictModel):
    state: Verification
    message: Annotated[str, Field(max_length=1024)] = ""


class EvidenceDigests(StrictModel):
    config_map: str | None = None
    """The Run's evidence ConfigMap (in the workspace)."""
    run_digest: Digest | None = None
    """Digest of the Run's evidence document (projectsignal.dev/evidence/v2 or v1), recomputed."""
    check_digest: Digest | None = None
    """Digest of this check's evidence document (projectsignal.dev/check-evidence/v1), recomputed."""


class ValidationResult(StrictModel):
    """One check's result on one target Node, with the facts it was classified from."""

    schema_: Annotated[Literal["projectsignal.dev/validation-result/v1"], Field(alias="schema")] = ENVELOPE_SCHEMA
    id: str
    """Opaque, stable identifier of this result."""
    check: CheckType
    version: CheckVersion
    run: RunRef
    scope: Scope
    target: TargetNode
    started_at: datetime | None = None
    finished_at: datetime | None = None
    """When this check's evidence became final (cleanup finished); freshness counts from here."""
    observed_at: datetime
    """When the portal derived and classified this result."""
    state: State
    reason: Annotated[str, Field(max_length=128)]
    message: Annotated[str, Field(max_length=1024)] = ""
    verdict: Verdict | None = None
    """This Node's verdict in this check as the verified evidence says (none when unverified)."""
    verification: VerificationResult
    cleanup: CleanupState
    evidence: EvidenceDigests
    details_schema: str | None = None
    """Schema of ``details``, e.g. projectsignal.dev/check-evidence/v1."""
    details: JsonValue = None
    """The check's evidence document (opaque here; typed by ``detailsSchema``). Only in detail views."""


def result_id(workspace: str, node: str, profile: str, check: str, run_uid: str) -> str:
    """The stable id of a result; also its sort key, joined (names never contain ``~``)."""
    return ID_SEPARATOR.join((workspace, node, profile, check, run_uid))


def parse_id(value: str) -> tuple[str, str, str, str, str] | None:
    parts = value.split(ID_SEPARATOR)
    if len(parts) != 5 or not all(parts):
        return None
    return parts[0], parts[1], parts[2], parts[3], parts[4]


def parse_envelope(document: Obj) -> ValidationResult | None:
    """A served envelope read back strictly; None for another version or a malformed one."""
    if document.get("schema") != ENVELOPE_SCHEMA:
        return None
    try:
        return ValidationResult.model_validate(document)
    except ValidationError:
        return None


@dataclass(frozen=True)
class RunEvidence:
    """What reading a Run's evidence ConfigMap gave."""

    verification: Verification
    message: str = ""
    document: Obj | None = None
    digest: str | None = None


def read_run_evidence(config_map: Obj | None, *, expected_digest: str | None, forbidden: bool = False) -> RunEvidence:
    """Decode a Run's evidence ConfigMap and check it against the digest the Run recorded."""
    if forbidden:
        return RunEvidence(Verification.UNAUTHORIZED, "the portal may not read the evidence ConfigMap")
    if config_map is None or not expected_digest:
        return RunEvidence(Verification.MISSING, "no evidence ConfigMap")
    try:
        document, digest = decode_document(config_map, RUN_EVIDENCE_SCHEMAS)
    except EvidenceError as exc:
        claimed = (config_map.get("metadata", {}).get("annotations") or {}).get(SCHEMA_ANNOTATION)
        if claimed and claimed not in RUN_EVIDENCE_SCHEMAS:
            return RunEvidence(Verification.UNSUPPORTED_VERSION, f"evidence schema {claimed!r}"[:1024])
        if ": schema " in str(exc):
            return RunEvidence(Verification.UNSUPPORTED_VERSION, str(exc)[:1024])
        return RunEvidence(Verification.MALFORMED, str(exc)[:1024])
    if digest != expected_digest:
        return RunEvidence(Verification.DIGEST_MISMATCH, f"evidence is {digest}, the Run recorded {expected_digest}")
    return RunEvidence(Verification.VERIFIED, "", document, digest)


_PROBLEMS: Final = {
    "MalformedEvidence": Verification.MALFORMED,
    "MissingEvidence": Verification.MISSING,
    "DigestMismatch": Verification.DIGEST_MISMATCH,
    "IncompleteEvidence": Verification.INCOMPLETE,
    "ExtraParticipant": Verification.INCOMPLETE,
    "DuplicateParticipant": Verification.INCOMPLETE,
    "ForeignEvidence": Verification.FOREIGN,
    "ForeignParticipant": Verification.FOREIGN,
}


@dataclass(frozen=True)
class CheckFacts:
    verification: Verification
    message: str = ""
    cleanup: CleanupState = CleanupState.UNKNOWN
    verdicts: dict[int, Verdict] | None = None
    digest: str | None = None
    document: Obj | None = None
    started_at: str | None = None
    finished_at: str | None = None


def _check_facts(run: Obj, index: int, entry: Obj | None) -> CheckFacts:
    """Re-verify one check's evidence, embedded or materialized (digest, version, rules)."""
    if entry is None or entry.get("evidence") is None:
        why = str((entry or {}).get("problem") or "MissingEvidence: the Run's evidence has none for this check")
        return CheckFacts(_PROBLEMS.get(why.split(":", 1)[0], Verification.MISSING), why[:1024])
    document = entry["evidence"]
    if not isinstance(document, dict):
        return CheckFacts(Verification.MALFORMED, "check evidence is not an object")
    digest = sha256_digest(canonical_json(document))
    if digest != entry.get("digest"):
        return CheckFacts(Verification.DIGEST_MISMATCH, "embedded check evidence does not match its digest")
    if document.get("schema") != CHECK_EVIDENCE_SCHEMA:
        return CheckFacts(Verification.UNSUPPORTED_VERSION, f"check evidence schema {document.get('schema')!r}")
    verdict, problem, per_participant = validate_check(run, index, document)
    recorded = entry.get("problem")
    if problem is None and recorded is not None:
        problem = recorded if isinstance(recorded, str) else "MalformedEvidence: the recorded problem is not a string"
    cleanup_doc, results_doc = document.get("cleanup"), document.get("results")
    if not isinstance(cleanup_doc, dict) or not isinstance(results_doc, dict):
        shape = problem or "MalformedEvidence: the check evidence's cleanup or results is not an object"
        kind = _PROBLEMS.get(shape.split(":", 1)[0], Verification.MALFORMED)
        return CheckFacts(kind, shape[:1024], CleanupState.UNKNOWN, None, digest, document)
    cleanup = CleanupState.COMPLETE if cleanup_doc.get("state") == "Complete" else CleanupState.FAILED
    common: Obj = {
        "digest": digest,
        "document": document,
        "started_at": results_doc.get("startedAt"),
        "finished_at": cleanup_doc.get("finishedAt"),
    }
    if problem is None or problem.startswith("CleanupFailed"):
        if problem is None and verdict == Verdict.INCONCLUSIVE and cleanup == CleanupState.COMPLETE:
            problem = "the check was inconclusive"
        return CheckFacts(Verification.VERIFIED, problem or "", cleanup, per_participant, **common)
    kind = _PROBLEMS.get(problem.split(":", 1)[0], Verification.INCONSISTENT)
    return CheckFacts(kind, problem[:1024], CleanupState.UNKNOWN, None, **common)


def _run_problem(run: Obj, document: Obj) -> tuple[Verification, str] | None:
    meta, spec = run["metadata"], run["spec"]
    named = document.get("run")
    if not isinstance(named, dict) or not isinstance(document.get("checks"), list):
        return Verification.MALFORMED, "the evidence document's run is not an object or its checks not a list"
    if named.get("uid") != meta.get("uid"):
        return Verification.FOREIGN, "the evidence document belongs to another Run"
    admitted = [
        {"index": p["index"], "nodeName": p["nodeName"], "nodeUID": p["nodeUID"]}
        for p in sorted(spec["participants"], key=lambda p: p["index"])
    ]
    if document.get("participants") != admitted:
        return Verification.INCOMPLETE, "the evidence does not list exactly the Run's participants"
    if document.get("phase") != (run.get("status") or {}).get("phase"):
        return Verification.INCONSISTENT, "the evidence's decision is not the Run's phase"
    return None


def _time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp, or None when absent or unreadable (never a guess)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def derive(run: Obj, evidence: RunEvidence, *, cluster: str, observed_at: datetime) -> list[ValidationResult]:
    """Unclassified envelopes (state Unknown, reason ``Unclassified``) for every (check,
    participant) of ``run``; shared/classify.py assigns the state."""
    meta, spec, status = run["metadata"], run["spec"], run.get("status") or {}
    phase = Phase(status.get("phase") or Phase.PENDING)
    ref = status.get("evidence") or {}
    run_ref = RunRef.model_construct(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        attempt=int(spec.get("attempt", 1)),
        phase=phase,
        created=_time(meta.get("creationTimestamp")),
    )
    version = CheckVersion.model_construct(
        profile_generation=int(spec["profile"]["generation"]), source_digest=spec["source"]["digest"]
    )
    scope = Scope.model_construct(cluster=cluster, workspace=meta["namespace"])
    run_level: tuple[Verification, str] | None = None
    entries: dict[int, Obj] = {}
    if phase not in TERMINAL_PHASES:
        run_level = (Verification.PENDING, "the Run is in progress")
    elif evidence.verification != Verification.VERIFIED or evidence.document is None:
        run_level = (evidence.verification, evidence.message)
    else:
        run_level = _run_problem(run, evidence.document)
        listed = evidence.document.get("checks")
        checks = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
        entries = {c["index"]: c for c in checks if isinstance(c.get("index"), int)}
    results: list[ValidationResult] = []
    profile = spec["profile"]["name"]
    for index, check in enumerate(spec["checks"]):
        facts = CheckFacts(*run_level) if run_level else _check_facts(run, index, entries.get(index))
        if phase not in TERMINAL_PHASES:
            facts = CheckFacts(Verification.PENDING, facts.message, CleanupState.PENDING)
        check_type = CheckType.model_construct(profile=profile, name=check["name"], index=index)
        digests = EvidenceDigests.model_construct(
            config_map=ref.get("configMap"), run_digest=evidence.digest, check_digest=facts.digest
        )
        verification = VerificationResult.model_construct(state=facts.verification, message=facts.message)
        for participant in sorted(spec["participants"], key=lambda p: p["index"]):
            verdict = (facts.verdicts or {}).get(participant["index"])
            results.append(
                ValidationResult.model_construct(
                    schema_=ENVELOPE_SCHEMA,
                    id=result_id(meta["namespace"], participant["nodeName"], profile, check["name"], meta["uid"]),
                    check=check_type,
                    version=version,
                    run=run_ref,
                    scope=scope,
                    target=TargetNode.model_construct(
                        name=participant["nodeName"], uid=participant["nodeUID"], index=participant["index"]
                    ),
                    started_at=_time(facts.started_at or status.get("startTime")),
                    finished_at=_time(facts.finished_at),
                    observed_at=observed_at,
                    state=State.UNKNOWN,
                    reason="Unclassified",
                    message="",
                    verdict=verdict,
                    verification=verification,
                    cleanup=facts.cleanup,
                    evidence=digests,
                    details_schema=CHECK_EVIDENCE_SCHEMA if facts.document is not None else None,
                    details=facts.document,
                )
            )
    return results


def json_schema() -> Obj:
    """The published JSON Schema of the envelope."""
    schema = ValidationResult.model_json_schema(by_alias=True, mode="serialization", schema_generator=DocumentedSchema)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://{keys.GROUP}/schemas/validation-result-v1.json",
        **schema,
    }


def render_schema() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the JSON Schema (default: schemas/validation-result-v1.json)."""
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0] if args else SCHEMA_FILE)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_schema(), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
