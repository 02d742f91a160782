"""The validation-result envelope (shared/envelope.py): the published JSON Schema does not
drift from the model, reading a Run's evidence ConfigMap fails closed, and derivation
re-verifies every link of the chain (one envelope per check x target Node)."""

import base64
import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from shared.digests import canonical_json, sha256_digest
from shared.envelope import (
    ENVELOPE_SCHEMA,
    SCHEMA_FILE,
    CleanupState,
    State,
    ValidationResult,
    Verification,
    derive,
    parse_envelope,
    parse_id,
    read_run_evidence,
    render_schema,
    result_id,
)
from shared.evidence import EVIDENCE_KEY, SCHEMA_ANNOTATION, encode
from shared.run import Phase, Verdict
from tests import evidence_builders as eb
from tests.unit.test_envelope_builders import CHECK_CONFIG_MAPS, NOW, accepted, evidence, make_run, read

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]


def test_published_schema_matches_the_model() -> None:
    on_disk = (REPO / SCHEMA_FILE).read_text()
    assert on_disk == render_schema(), "schema drifted; run: python -m shared.envelope"
    schema = json.loads(on_disk)
    assert schema["properties"]["schema"]["const"] == ENVELOPE_SCHEMA
    for field in ("check", "version", "run", "scope", "target", "state", "reason", "cleanup", "evidence"):
        assert field in schema["required"] or field in schema["properties"], field
    assert {"detailsSchema", "details", "startedAt", "finishedAt", "observedAt"} <= set(schema["properties"])


def test_ids_round_trip() -> None:
    key = ("team-a", "gpu-000", "gpu-basic", "inventory", "uid-1")
    assert parse_id(result_id(*key)) == key
    for bad in ("", "a~b", "a~b~c~d~e~f", "a~~c~d~e"):
        assert parse_id(bad) is None


def _derive(run: Obj, cm: Obj | None, digest: str | None) -> list[ValidationResult]:
    return derive(run, read(run, cm, digest), cluster="test", observed_at=NOW)


def test_one_envelope_per_check_and_target() -> None:
    run, cm, _, digest = accepted(make_run(participants=3, checks=2))
    results = _derive(run, cm, digest)
    assert len(results) == 6
    assert len({r.id for r in results}) == 6
    first = results[0]
    assert first.verification.state == Verification.VERIFIED
    assert first.verdict == Verdict.PASS
    assert first.cleanup == CleanupState.COMPLETE
    assert first.evidence.run_digest == digest
    assert first.evidence.check_digest is not None
    assert first.details_schema == "projectsignal.dev/check-evidence/v1"
    assert first.scope.workspace == "team-a"
    assert first.finished_at == NOW
    assert first.run.phase == Phase.SUCCEEDED
    assert first.version.profile_generation == 1
    # Serialised envelopes validate strictly against the model (what the schema publishes).
    document = first.model_dump(mode="json", by_alias=True)
    assert parse_envelope(document) is not None


def test_running_run_gives_pending_envelopes() -> None:
    results = _derive(make_run(checks=2), None, None)
    assert {r.verification.state for r in results} == {Verification.PENDING}
    assert {r.cleanup for r in results} == {CleanupState.PENDING}
    assert all(r.verdict is None for r in results)


def _with_payload(cm: Obj, payload: bytes) -> Obj:
    cm = copy.deepcopy(cm)
    cm["binaryData"][EVIDENCE_KEY] = base64.b64encode(payload).decode()
    return cm


def _document_cm(cm: Obj, document: Obj) -> Obj:
    return _with_payload(cm, encode(document)[2])


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing-config-map", Verification.MISSING),
        ("no-digest-recorded", Verification.MISSING),
        ("forbidden", Verification.UNAUTHORIZED),
        ("digest-mismatch", Verification.DIGEST_MISMATCH),
        ("tampered-same-shape", Verification.DIGEST_MISMATCH),
        ("truncated-gzip", Verification.MALFORMED),
        ("non-canonical", Verification.MALFORMED),
        ("mutable", Verification.MALFORMED),
        ("unsupported-run-evidence-version", Verification.UNSUPPORTED_VERSION),
        ("unsupported-version-by-annotation", Verification.UNSUPPORTED_VERSION),
    ],
)
def test_reading_run_evidence_fails_closed(case: str, expected: Verification) -> None:
    run, cm, document, digest = accepted(make_run())
    expected_digest: str | None = digest
    forbidden = False
    given: Obj | None = cm
    if case == "missing-config-map":
        given = None
    elif case == "no-digest-recorded":
        expected_digest = None
    elif case == "forbidden":
        forbidden = True
    elif case == "digest-mismatch":
        expected_digest = "sha256:" + "0" * 64
    elif case == "tampered-same-shape":
        tampered = copy.deepcopy(document)
        tampered["nodes"] = dict.fromkeys(tampered["nodes"], "Pass")
        tampered["message"] = "trust me"
        given = _document_cm(cm, tampered)
    elif case == "truncated-gzip":
        given = _with_payload(cm, encode(document)[2][:-10])
    elif case == "non-canonical":
        given = _with_payload(cm, gzip.compress(json.dumps(document, indent=1).encode(), mtime=0))
    elif case == "mutable":
        given = {**cm, "immutable": False}
    elif case == "unsupported-run-evidence-version":
        given = _document_cm(cm, {**document, "schema": "projectsignal.dev/evidence/v3"})
        given["metadata"]["annotations"].pop(SCHEMA_ANNOTATION)
    elif case == "unsupported-version-by-annotation":
        given = _document_cm(cm, {**document, "schema": "projectsignal.dev/evidence/v3"})
        given["metadata"]["annotations"][SCHEMA_ANNOTATION] = "projectsignal.dev/evidence/v3"
    read = read_run_evidence(given, expected_digest=expected_digest, forbidden=forbidden)
    assert read.verification == expected, read
    results = derive(run, read, cluster="test", observed_at=NOW)
    assert {r.verification.state for r in results} == {expected}
    assert all(r.verdict is None for r in results)


def _reseal_run_document(cm: Obj, document: Obj) -> tuple[Obj, str]:
    """A forger who can rewrite the Run's evidence and its recorded digest."""
    return _document_cm(cm, document), encode(document)[1]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("embedded-digest-mismatch", Verification.DIGEST_MISMATCH),
        ("embedded-unsupported-version", Verification.UNSUPPORTED_VERSION),
        ("embedded-missing", Verification.MISSING),
        ("embedded-not-an-object", Verification.MALFORMED),
        ("check-entry-missing", Verification.MISSING),
        ("foreign-run", Verification.FOREIGN),
        ("participant-list-changed", Verification.INCOMPLETE),
        ("decision-not-the-runs-phase", Verification.INCONSISTENT),
        ("participant-missing-in-check", Verification.INCOMPLETE),
        ("participant-foreign-in-check", Verification.FOREIGN),
        ("pass-over-a-fail", Verification.INCONSISTENT),
    ],
)
def test_derivation_reverifies_the_chain(case: str, expected: Verification) -> None:
    """On a v1 document (embedded evidence, written before issue 41), still read."""
    run, cm, document, digest = accepted(make_run())
    document = eb.as_v1(document, CHECK_CONFIG_MAPS[digest])
    check = document["checks"][0]
    run_status_phase = run["status"]["phase"]

    def reseal_check(mutate: Any) -> None:
        evidence_doc = check["evidence"]
        mutate(evidence_doc["results"])
        sealed = eb.seal(evidence_doc)
        check["evidence"], check["digest"] = sealed, sha256_digest(canonical_json(sealed))

    if case == "embedded-digest-mismatch":
        check["evidence"]["reason"] = "edited"
    elif case == "embedded-unsupported-version":
        check["evidence"]["schema"] = "projectsignal.dev/check-evidence/v2"
        check["digest"] = sha256_digest(canonical_json(check["evidence"]))
    elif case == "embedded-missing":
        check["evidence"], check["digest"] = None, None
    elif case == "embedded-not-an-object":
        check["evidence"] = "nope"
    elif case == "check-entry-missing":
        document["checks"] = []
    elif case == "foreign-run":
        document["run"]["uid"] = "someone-else"
    elif case == "participant-list-changed":
        document["participants"] = document["participants"][:1]
    elif case == "decision-not-the-runs-phase":
        run["status"]["phase"] = "Failed" if run_status_phase != "Failed" else "Succeeded"
    elif case == "participant-missing-in-check":
        reseal_check(lambda r: r["participants"].pop())
    elif case == "participant-foreign-in-check":
        reseal_check(lambda r: r["participants"][0].update(nodeName="elsewhere"))
    elif case == "pass-over-a-fail":
        reseal_check(lambda r: r["participants"][1].update(verdict="Fail"))
    given, digest = _reseal_run_document(cm, document)
    results = _derive(run, given, digest)
    assert {r.verification.state for r in results} == {expected}, [r.verification for r in results]
    assert all(r.verdict is None for r in results)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("check-cleanup-a-string", Verification.MALFORMED),
        ("check-cleanup-a-list", Verification.MALFORMED),
        ("check-results-a-string", Verification.MALFORMED),
        ("check-results-a-list", Verification.MALFORMED),
        ("check-problem-not-a-string", Verification.MALFORMED),
        ("run-not-an-object", Verification.MALFORMED),
        ("checks-not-a-list", Verification.MALFORMED),
    ],
)
def test_derivation_of_a_wrongly_shaped_document_is_unknown_not_a_crash(case: str, expected: Verification) -> None:
    run, cm, document, digest = accepted(make_run())
    document = eb.as_v1(document, CHECK_CONFIG_MAPS[digest])
    check = document["checks"][0]

    def reshape_check(key: str, value: object) -> None:
        check["evidence"][key] = value
        check["digest"] = sha256_digest(canonical_json(check["evidence"]))

    if case == "check-cleanup-a-string":
        reshape_check("cleanup", "gone")
    elif case == "check-cleanup-a-list":
        reshape_check("cleanup", ["gone"])
    elif case == "check-results-a-string":
        reshape_check("results", "gone")
    elif case == "check-results-a-list":
        reshape_check("results", ["gone"])
    elif case == "check-problem-not-a-string":
        check["problem"] = {"MalformedEvidence": True}
    elif case == "run-not-an-object":
        document["run"] = "r1"
    elif case == "checks-not-a-list":
        document["checks"] = 7
    given, digest = _reseal_run_document(cm, document)
    results = _derive(run, given, digest)
    assert {r.verification.state for r in results} == {expected}, [r.verification for r in results]
    assert all(r.verdict is None and r.verification.message for r in results), results


def _v2_case(case: str, run: Obj, document: Obj, stored: dict[int, Obj | None]) -> Obj:
    """Break check 0's link from a v2 document to its evidence ConfigMap."""
    entry = document["checks"][0]
    if case == "check-config-map-deleted":
        stored[0] = None
    elif case == "check-config-map-replaced":
        forged = eb.check_evidence(run, 0, verdicts={0: "Fail"})
        stored[0] = eb.config_map(entry["configMap"], forged)
    elif case == "check-config-map-not-the-runs":
        stored[0] = eb.config_map(entry["configMap"], eb.decode_check(stored[0]), owner=_STRANGER)
    elif case == "check-config-map-malformed":
        stored[0] = eb.config_map(entry["configMap"], None, raw=b"not gzip", owner=run)
    elif case == "named-elsewhere":
        entry["configMap"] = "somewhere-else"
    elif case == "digest-edited":
        entry["digest"] = "sha256:" + "0" * 64
    return document


_STRANGER = {"metadata": {"name": "stranger", "uid": "not-the-run"}}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("check-config-map-deleted", Verification.MISSING),
        ("check-config-map-replaced", Verification.DIGEST_MISMATCH),
        ("check-config-map-not-the-runs", Verification.FOREIGN),
        ("check-config-map-malformed", Verification.MALFORMED),
        ("named-elsewhere", Verification.FOREIGN),
        ("digest-edited", Verification.DIGEST_MISMATCH),
    ],
)
def test_v2_reads_each_checks_evidence_from_its_config_map_by_digest(case: str, expected: Verification) -> None:
    """v2 names each check's evidence: a deleted, replaced, foreign or malformed ConfigMap, or a
    document naming another one or another digest, is never a verified result (fail closed)."""
    run, cm, document, digest = accepted(make_run())
    assert "evidence" not in document["checks"][0]
    stored = dict(CHECK_CONFIG_MAPS[digest])
    document = _v2_case(case, run, copy.deepcopy(document), stored)
    given, resealed = _reseal_run_document(cm, document)
    CHECK_CONFIG_MAPS[resealed] = stored
    results = _derive(run, given, resealed)
    assert {r.verification.state for r in results} == {expected}, [r.verification for r in results]
    assert all(r.verdict is None for r in results)
    assert all(r.details is None for r in results)


def test_v1_and_v2_documents_derive_the_same_results() -> None:
    run, cm, document, digest = accepted(make_run(participants=3, checks=2))
    old = eb.as_v1(document, CHECK_CONFIG_MAPS[digest])
    given, old_digest = _reseal_run_document(cm, old)
    now = _derive(run, cm, digest)
    before = _derive(run, given, old_digest)
    drop = {"evidence"}
    assert [r.model_dump(exclude=drop) for r in now] == [r.model_dump(exclude=drop) for r in before]
    assert {r.verification.state for r in now} == {Verification.VERIFIED}


def test_cleanup_failure_is_verified_but_not_complete() -> None:
    run = make_run()
    document = evidence(run)
    document["cleanup"].update(state="Failed", message="a Pod remains")
    document["verdict"] = "Inconclusive"
    done, cm, _, digest = accepted(run, [document])
    results = _derive(done, cm, digest)
    assert {r.cleanup for r in results} == {CleanupState.FAILED}
    assert {r.verification.state for r in results} == {Verification.VERIFIED}
    assert all("CleanupFailed" in r.verification.message for r in results)


def test_failure_is_per_participant() -> None:
    run = make_run()
    done, cm, _, digest = accepted(run, [evidence(run, verdicts={1: "Fail"})])
    by_node = {r.target.name: r.verdict for r in _derive(done, cm, digest)}
    assert by_node == {"gpu-000": Verdict.PASS, "gpu-001": Verdict.FAIL}


def test_parse_envelope_is_strict() -> None:
    run, cm, _, digest = accepted(make_run())
    document = _derive(run, cm, digest)[0].model_dump(mode="json", by_alias=True)
    assert parse_envelope({**document, "schema": "projectsignal.dev/validation-result/v2"}) is None
    assert parse_envelope({**document, "trustMe": True}) is None
    assert parse_envelope({**document, "state": "Healthy"}) is None
    assert parse_envelope(document) is not None
    assert parse_envelope(document).state == State.UNKNOWN  # type: ignore[union-attr]
