"""Check evidence documents (shared/evidence.py): deterministic encoding, the stored
ConfigMap, strict decoding (immutable, bounded, canonical, of the expected schema) and the
check verdict from participant results."""

import base64
import gzip
import hashlib
import json
import zlib
from typing import Any

import pytest

from shared.digests import canonical_json
from shared.evidence import (
    CHECK_EVIDENCE_SCHEMA,
    DIGEST_ANNOTATION,
    EVIDENCE_KEY,
    MAX_DOCUMENT_BYTES,
    MAX_STORED_BYTES,
    RESULTS_SCHEMA,
    SCHEMA_ANNOTATION,
    CheckEvidence,
    CheckIdentity,
    CheckResults,
    Cleanup,
    EvidenceError,
    ParticipantResult,
    RunIdentity,
    Workload,
    check_verdict,
    config_map,
    decode_document,
    encode,
    to_document,
)
from shared.run import Verdict
from tests.unit.signal_builders import EMPTY_DIGEST, T0, T1, output

OWNER = {"apiVersion": "projectsignal.dev/v1alpha1", "kind": "CertificationRun", "name": "r", "uid": "u"}


def participant(index: int, verdict: Verdict = Verdict.PASS, **extra: Any) -> ParticipantResult:
    return ParticipantResult(
        index=index,
        node_name=f"gpu-{index:03d}",
        node_uid=f"node-uid-{index}",
        verdict=verdict,
        reason=f"{verdict.value}",
        **extra,
    )


def results_model() -> CheckResults:
    return CheckResults(
        run=RunIdentity(namespace="signal-system", name="r", uid="u"),
        check=CheckIdentity(
            index=0, name="inventory", backend="Pod", script_key="inventory.sh", source_digest=EMPTY_DIGEST
        ),
        verdict=Verdict.PASS,
        reason="all 2 participant(s) passed",
        started_at=T0,
        collected_at=T1,
        workloads=[
            Workload(kind="Pod", name="r-c0-p0", uid="p0", node_name="gpu-000", participant_index=0, role="participant")
        ],
        participants=[
            participant(0, exit_code=0, measurements={"bw": 1.5, "name": "ü"}, stdout=output("héllo")),
            participant(1, exit_code=0),
        ],
    )


def results_doc() -> dict[str, Any]:
    return to_document(results_model())


def stored(
    payload: bytes, *, compress: bool = True, immutable: Any = True, name: str = "r-c0-results"
) -> dict[str, Any]:
    data = gzip.compress(payload, mtime=0) if compress else payload
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "immutable": immutable,
        "binaryData": {EVIDENCE_KEY: base64.b64encode(data).decode()},
    }


# ---------------------------------------------------------------- encode / config_map


def test_encode_is_canonical_digest_and_deterministic_gzip() -> None:
    doc = results_doc()
    payload, digest, compressed = encode(doc)
    assert payload == canonical_json(doc)
    assert payload == json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert digest == "sha256:" + hashlib.sha256(payload).hexdigest()
    assert gzip.decompress(compressed) == payload
    assert compressed[:2] == b"\x1f\x8b"
    assert compressed[4:8] == b"\x00\x00\x00\x00"  # mtime 0
    again = encode(json.loads(json.dumps(doc)))
    assert again == (payload, digest, compressed)


def test_encode_ignores_key_order() -> None:
    a = {"schema": RESULTS_SCHEMA, "b": [1, {"y": 2, "x": 1}], "a": "é"}
    b = {"a": "é", "b": [1, {"x": 1, "y": 2}], "schema": RESULTS_SCHEMA}
    assert encode(a) == encode(b)
    assert encode(a)[0] == '{"a":"é","b":[1,{"x":1,"y":2}],"schema":"projectsignal.dev/check-results/v1"}'.encode()


def test_encode_digest_changes_with_content() -> None:
    assert encode({"a": 1})[1] != encode({"a": 2})[1]


def test_encode_refuses_oversized_document() -> None:
    doc = {"schema": RESULTS_SCHEMA, "blob": "a" * MAX_DOCUMENT_BYTES}
    with pytest.raises(EvidenceError, match="the limit is 2097152"):
        encode(doc)


def test_encode_accepts_exactly_the_document_limit() -> None:
    base = len(canonical_json({"blob": ""}))
    doc = {"blob": "a" * (MAX_DOCUMENT_BYTES - base)}
    payload, _, compressed = encode(doc)
    assert len(payload) == MAX_DOCUMENT_BYTES
    assert len(compressed) < MAX_STORED_BYTES


def test_encode_refuses_incompressible_document() -> None:
    # Base64 of hash output barely compresses: ~2 MB of it stays far above the 768 KiB stored limit.
    noise = base64.b64encode(b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(40000))).decode()
    doc = {"blob": noise[: MAX_DOCUMENT_BYTES - 20]}
    assert len(canonical_json(doc)) <= MAX_DOCUMENT_BYTES
    with pytest.raises(EvidenceError, match="compressed evidence is"):
        encode(doc)


def test_encode_refuses_non_json_values() -> None:
    with pytest.raises(ValueError, match="Out of range float"):
        encode({"a": float("nan")})


def test_config_map_manifest() -> None:
    doc = results_doc()
    labels = {"projectsignal.dev/evidence": "results"}
    manifest, digest, size = config_map(name="r-c0-results", namespace="ns", owner=OWNER, labels=labels, document=doc)
    _, expected_digest, compressed = encode(doc)
    assert digest == expected_digest
    assert size == len(compressed)
    assert manifest["apiVersion"] == "v1"
    assert manifest["kind"] == "ConfigMap"
    assert manifest["immutable"] is True
    assert manifest["metadata"]["name"] == "r-c0-results"
    assert manifest["metadata"]["namespace"] == "ns"
    assert manifest["metadata"]["labels"] == labels
    assert manifest["metadata"]["ownerReferences"] == [OWNER]
    assert manifest["metadata"]["annotations"] == {DIGEST_ANNOTATION: digest, SCHEMA_ANNOTATION: RESULTS_SCHEMA}
    assert set(manifest) == {"apiVersion", "kind", "metadata", "immutable", "binaryData"}
    assert manifest["binaryData"] == {EVIDENCE_KEY: base64.b64encode(compressed).decode()}
    assert "data" not in manifest


# ---------------------------------------------------------------- decode_document


def test_decode_round_trip_results() -> None:
    doc = results_doc()
    manifest, digest, _ = config_map(name="x", namespace="ns", owner=OWNER, labels={}, document=doc)
    decoded, got = decode_document(manifest, RESULTS_SCHEMA)
    assert decoded == doc
    assert got == digest
    assert CheckResults.model_validate(decoded) == results_model()


def test_decode_round_trip_evidence() -> None:
    results = results_model()
    _, results_digest, _ = encode(to_document(results))
    evidence = CheckEvidence(
        results=results,
        results_digest=results_digest,
        results_config_map="r-c0-results",
        cleanup=Cleanup(state="Complete", message="all gone", deleted=results.workloads, retained=[], finished_at=T1),
        verdict=Verdict.PASS,
        reason="ok",
    )
    doc = to_document(evidence)
    assert doc["schema"] == CHECK_EVIDENCE_SCHEMA
    manifest, digest, _ = config_map(name="e", namespace="ns", owner=OWNER, labels={}, document=doc)
    decoded, got = decode_document(manifest, CHECK_EVIDENCE_SCHEMA)
    assert got == digest
    parsed = CheckEvidence.model_validate(decoded)
    assert parsed == evidence
    assert encode(to_document(parsed.results))[1] == parsed.results_digest


def test_decode_accepts_a_gzip_with_another_mtime_and_level() -> None:
    # The digest is of the canonical JSON, not of the gzip bytes.
    payload = canonical_json(results_doc())
    manifest = stored(gzip.compress(payload, compresslevel=1, mtime=123456), compress=False)
    assert decode_document(manifest, RESULTS_SCHEMA)[1] == "sha256:" + hashlib.sha256(payload).hexdigest()


def with_binary(value: Any) -> dict[str, Any]:
    return {"metadata": {"name": "cm"}, "immutable": True, "binaryData": {EVIDENCE_KEY: value}}


CANONICAL = canonical_json({"a": 1, "schema": RESULTS_SCHEMA})


@pytest.mark.parametrize(
    ("config_map_obj", "fragment"),
    [
        (stored(CANONICAL, immutable=False), "is not immutable"),
        (stored(CANONICAL, immutable=None), "is not immutable"),
        (stored(CANONICAL, immutable="true"), "is not immutable"),
        (stored(CANONICAL, immutable=1), "is not immutable"),
        ({k: v for k, v in stored(CANONICAL).items() if k != "immutable"}, "is not immutable"),
        ({"metadata": {"name": "cm"}, "immutable": True}, f"has no {EVIDENCE_KEY}"),
        ({"metadata": {"name": "cm"}, "immutable": True, "binaryData": None}, f"has no {EVIDENCE_KEY}"),
        ({"metadata": {"name": "cm"}, "immutable": True, "binaryData": {"other": "AA=="}}, f"has no {EVIDENCE_KEY}"),
        (
            {"metadata": {"name": "cm"}, "immutable": True, "data": {EVIDENCE_KEY: CANONICAL.decode()}},
            f"has no {EVIDENCE_KEY}",
        ),
        (with_binary(123), f"has no {EVIDENCE_KEY}"),
        (with_binary("not base64!"), "bad base64"),
        (with_binary("QUJD\nREVG"), "bad base64"),
        (with_binary("QUJ"), "bad base64"),
        (with_binary(""), "truncated"),
        (stored(CANONICAL, compress=False), "bad gzip"),
        (stored(zlib.compress(CANONICAL), compress=False), "bad gzip"),
        (stored(gzip.compress(CANONICAL, mtime=0)[:-8], compress=False), "truncated"),
        (stored(gzip.compress(CANONICAL, mtime=0)[:20], compress=False), "truncated"),
        (stored(b"\xff\xfe not utf-8"), "not JSON"),
        (stored(b"{not json"), "not JSON"),
        (stored(b""), "not JSON"),
        (stored(b'{"a":1}{"b":2}'), "not JSON"),
        (stored(b"[1,2]"), "not a canonical JSON object"),
        (stored(b'"text"'), "not a canonical JSON object"),
        (stored(b'{"schema":"projectsignal.dev/check-results/v1","a":1}'), "not a canonical JSON object"),
        (stored(b'{"a": 1, "schema": "projectsignal.dev/check-results/v1"}'), "not a canonical JSON object"),
        (stored(CANONICAL + b"\n"), "not a canonical JSON object"),
        (stored(b" " + CANONICAL), "not a canonical JSON object"),
        (stored(b'{"a":1,"a":1,"schema":"projectsignal.dev/check-results/v1"}'), "not a canonical JSON object"),
        (stored(b'{"a":"\\u00e9","schema":"projectsignal.dev/check-results/v1"}'), "not a canonical JSON object"),
        (stored(b'{"a":1.50,"schema":"projectsignal.dev/check-results/v1"}'), "not a canonical JSON object"),
        (stored(canonical_json({"a": 1, "schema": CHECK_EVIDENCE_SCHEMA})), "schema"),
        (stored(canonical_json({"a": 1})), "schema None"),
        (stored(canonical_json({"schema": "projectsignal.dev/check-results/v2"})), "expected projectsignal.dev"),
    ],
    ids=lambda v: None if isinstance(v, dict) else str(v)[:24],
)
def test_decode_refuses(config_map_obj: dict[str, Any], fragment: str) -> None:
    with pytest.raises(EvidenceError) as caught:
        decode_document(config_map_obj, RESULTS_SCHEMA)
    assert fragment in str(caught.value)


def test_decode_names_the_config_map() -> None:
    with pytest.raises(EvidenceError, match="evidence ConfigMap r-c3-evidence is not immutable"):
        decode_document(stored(CANONICAL, immutable=False, name="r-c3-evidence"), RESULTS_SCHEMA)
    with pytest.raises(EvidenceError, match=r"evidence ConfigMap \? is not immutable"):
        decode_document({"immutable": False}, RESULTS_SCHEMA)


def test_decode_refuses_oversized_stored_payload() -> None:
    blob = b"\x00" * (MAX_STORED_BYTES + 1)
    with pytest.raises(EvidenceError, match="compressed bytes exceeds the limit"):
        decode_document(with_binary(base64.b64encode(blob).decode()), RESULTS_SCHEMA)


def test_decode_refuses_zip_bomb() -> None:
    # 64 MiB of spaces compresses to ~64 KiB: well within the stored limit, far above the document limit.
    bomb = gzip.compress(
        b'{"schema":"projectsignal.dev/check-results/v1","a":"' + b" " * (64 * 1024 * 1024) + b'"}', mtime=0
    )
    assert len(bomb) < MAX_STORED_BYTES
    with pytest.raises(EvidenceError, match="document too large or truncated"):
        decode_document(stored(bomb, compress=False), RESULTS_SCHEMA)


def test_decode_refuses_document_one_byte_over_the_limit() -> None:
    base = len(canonical_json({"blob": "", "schema": RESULTS_SCHEMA}))
    exact = canonical_json({"blob": "a" * (MAX_DOCUMENT_BYTES - base), "schema": RESULTS_SCHEMA})
    assert len(exact) == MAX_DOCUMENT_BYTES
    document, _ = decode_document(stored(exact), RESULTS_SCHEMA)
    assert len(document["blob"]) == MAX_DOCUMENT_BYTES - base
    over = canonical_json({"blob": "a" * (MAX_DOCUMENT_BYTES - base + 1), "schema": RESULTS_SCHEMA})
    with pytest.raises(EvidenceError, match="too large"):
        decode_document(stored(over), RESULTS_SCHEMA)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        pytest.param(b"[" * 2000, "not JSON: nested too deeply", id="nested-2000-deep"),
        pytest.param(b"[" * 2000 + b"]" * 2000, "not JSON: nested too deeply", id="nested-but-complete"),
        pytest.param(
            b'{"a":' + b"9" * 5000 + b"}", "not JSON: a number of more than 4300 digits", id="5000-digit-number"
        ),
        pytest.param(
            b'{"a":1e400,"schema":"projectsignal.dev/check-results/v1"}',
            "not a canonical JSON object: a number out of range",
            id="number-beyond-a-float",
        ),
    ],
)
def test_decode_refuses_what_python_cannot_parse_or_render(payload: bytes, fragment: str) -> None:
    """A stored document Python's json cannot parse (too deep, too many digits) or render
    back (1e400 parses as infinity, which canonical JSON refuses) is an EvidenceError that
    names the ConfigMap, never another exception that stops the reader."""
    with pytest.raises(EvidenceError) as caught:
        decode_document(stored(payload, name="r-c0-results"), RESULTS_SCHEMA)
    assert str(caught.value).startswith("evidence ConfigMap r-c0-results: ")
    assert fragment in str(caught.value)


def test_decode_refuses_nan_with_evidence_error() -> None:
    payload = b'{"a":NaN,"schema":"projectsignal.dev/check-results/v1"}'
    with pytest.raises(EvidenceError):
        decode_document(stored(payload), RESULTS_SCHEMA)


@pytest.mark.parametrize(
    "trailer",
    [b"garbage", gzip.compress(b'{"evil":true}', mtime=0)],
    ids=["garbage", "second-member"],
)
def test_decode_refuses_trailing_data_after_gzip(trailer: bytes) -> None:
    _, _, compressed = encode({"a": 1, "schema": RESULTS_SCHEMA})
    with pytest.raises(EvidenceError):
        decode_document(stored(compressed + trailer, compress=False), RESULTS_SCHEMA)


# ---------------------------------------------------------------- check_verdict

P, F, U = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE


@pytest.mark.parametrize(
    ("verdicts", "verdict", "reason"),
    [
        ([P], P, "all 1 participant(s) passed"),
        ([P, P, P], P, "all 3 participant(s) passed"),
        ([F], F, "participant(s) 0 failed"),
        ([P, F], F, "participant(s) 1 failed"),
        ([F, U], F, "participant(s) 0 failed"),
        ([U, F, P, F], F, "participant(s) 1, 3 failed"),
        ([U], U, "participant(s) 0 inconclusive"),
        ([P, U], U, "participant(s) 1 inconclusive"),
        ([U, P, U], U, "participant(s) 0, 2 inconclusive"),
        ([], U, "inconclusive"),
    ],
)
def test_check_verdict(verdicts: list[Verdict], verdict: Verdict, reason: str) -> None:
    got, why = check_verdict([participant(i, v) for i, v in enumerate(verdicts)])
    assert got == verdict
    assert why == reason or (not verdicts and reason in why)


def test_check_verdict_uses_participant_indexes_not_positions() -> None:
    got, why = check_verdict([participant(5, P), participant(9, F)])
    assert (got, why) == (F, "participant(s) 9 failed")
