"""The runner result contract (shared/result.py, shared/result_wire.py) and how the runner
builds and bounds it (runner/report.py): strict parsing, the measurements protocol, the
verdict rules and ``fit`` shrinking a result to the 4 KiB termination message."""

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from adapter.workloads import mpijob_name
from runner import mpi
from runner.document import Identity, Result
from runner.execute import Outcome
from runner.report import MEASUREMENTS_FILE_LIMIT, build_result, error_result, fit, read_measurements, verdict_of
from shared.result import (
    MAX_MEASUREMENT_TEXT,
    MAX_MEASUREMENTS,
    MAX_RESULT_BYTES,
    MAX_TAIL_CHARS,
    RESULT_SCHEMA,
    ResultError,
    RunnerIdentity,
    RunnerResult,
    parse_result,
    render_result,
    strict_json,
    validate_measurements,
)
from shared.run import Verdict
from tests.unit.runner_builders import launcher_model, model, plain
from tests.unit.signal_builders import make_inputs, make_result, output

IDENTITY = Identity(participant_index=3, node_name="gpu-003", pod_name="run-c0-p3", pod_uid="uid-3")


def document(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(render_result(make_result()))
    doc.update(overrides)
    return doc


def encoded(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


# ---------------------------------------------------------------- parse / render


def test_render_is_canonical_json_with_schema_alias_and_no_nulls() -> None:
    payload = render_result(make_result(signal=None, stdout=None))
    doc = json.loads(payload)
    assert payload == json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert doc["schema"] == RESULT_SCHEMA
    assert "schema_" not in doc
    assert "signal" not in doc
    assert "stdout" not in doc
    assert doc["identity"]["participantIndex"] == 0
    assert doc["exitCode"] == 0


@pytest.mark.parametrize("as_bytes", [False, True])
def test_parse_round_trips_render(as_bytes: bool) -> None:
    result = make_result(
        Verdict.FAIL,
        exit_code=3,
        measurements={"bw.gbps": 412.5, "ok": True, "count": 7, "model": "H100 ✓"},
        stdout=output("hello\n"),
        stderr=output(""),
    )
    payload = render_result(result)
    parsed = parse_result(payload if as_bytes else payload.decode())
    assert parsed == result
    assert render_result(parsed) == payload


def test_parse_accepts_exactly_max_result_bytes_and_refuses_one_more() -> None:
    base = render_result(make_result())
    payload = base + b" " * (MAX_RESULT_BYTES - len(base))
    assert len(payload) == MAX_RESULT_BYTES
    assert parse_result(payload) == make_result()
    with pytest.raises(ResultError, match="4097 bytes exceeds the limit of 4096"):
        parse_result(payload + b" ")


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        pytest.param(b"\xff\xfe{}", "not UTF-8", id="bad-utf8"),
        pytest.param(b"", "not a single JSON document", id="empty"),
        pytest.param(b"{", "not a single JSON document", id="truncated"),
        pytest.param(encoded(document()) + b" {}", "not a single JSON document", id="trailing-document"),
        pytest.param(b"[]", "must be a JSON object", id="array"),
        pytest.param(b'"text"', "must be a JSON object", id="string"),
        pytest.param(b"null", "must be a JSON object", id="null"),
        pytest.param(
            encoded(document(schema="projectsignal.dev/runner-result/v2")), "unsupported result schema", id="v2"
        ),
        pytest.param(encoded({k: v for k, v in document().items() if k != "schema"}), "unsupported", id="no-schema"),
        pytest.param(encoded(document(extra=1)), "invalid result at extra", id="unknown-field"),
        pytest.param(encoded(document(verdict="Maybe")), "invalid result at verdict", id="bad-verdict"),
        pytest.param(encoded({k: v for k, v in document().items() if k != "identity"}), "identity", id="no-identity"),
        pytest.param(encoded(document(reason="r" * 257)), "invalid result at reason", id="long-reason"),
        pytest.param(encoded(document(measurements={"Bad": 1})), "measurements", id="bad-measurement-name"),
        pytest.param(encoded(document(exitCode=1.5)), "exitCode", id="fractional-exit"),
        pytest.param(b'{"schema":"a","schema":"' + RESULT_SCHEMA.encode() + b'"}', "duplicate key", id="dup-top"),
        pytest.param(
            encoded(document())[:-1] + b',"identity":{"nodeName":"x"}}', "duplicate key 'identity'", id="dup-later"
        ),
        pytest.param(b'{"a":{"b":1,"b":2}}', "duplicate key 'b'", id="dup-nested"),
        pytest.param(b'{"schema":NaN}', "non-standard JSON constant NaN", id="nan"),
        pytest.param(b'{"schema":Infinity}', "non-standard JSON constant Infinity", id="infinity"),
        pytest.param(b'{"schema":-Infinity}', "non-standard JSON constant -Infinity", id="minus-infinity"),
        pytest.param(b" " * (MAX_RESULT_BYTES + 1), "exceeds the limit of 4096", id="oversized"),
        # A termination message a hostile script pre-wrote (or a Node's kubelet set): what
        # Python's json cannot parse at all is still only a malformed result.
        pytest.param(b"[" * 2000, "nested too deeply", id="nested-2000-deep"),
        pytest.param(
            b'{"schema":"' + RESULT_SCHEMA.encode() + b'","measurements":' + b"[" * 2000,
            "nested too deeply",
            id="nested-inside-a-result",
        ),
    ],
)
def test_parse_result_refuses(payload: bytes, fragment: str) -> None:
    with pytest.raises(ResultError, match=None) as caught:
        parse_result(payload)
    assert fragment in str(caught.value)


def test_parse_result_refuses_oversized_valid_result() -> None:
    doc = document(measurements={f"m{i}": "\x01" * 128 for i in range(16)})
    payload = encoded(doc)
    assert len(payload) > MAX_RESULT_BYTES
    with pytest.raises(ResultError, match="exceeds the limit"):
        parse_result(payload)


def test_parse_result_measures_bytes_not_characters() -> None:
    # Two tails of 1024 three-byte characters: over 6000 UTF-8 bytes but under 4096 characters.
    stream = {"digest": "sha256:" + "0" * 64, "bytes": 1, "tail": "€" * 1024}
    doc = document(stdout=stream, stderr=stream)
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    assert len(text) < MAX_RESULT_BYTES < len(text.encode())
    with pytest.raises(ResultError, match="exceeds the limit"):
        parse_result(text)


@pytest.mark.parametrize(
    ("payload", "limit", "expected"),
    [
        (b"{}", 2, {}),
        (b"[1,2]", 5, [1, 2]),
        (b'"\\u00e9"', 8, "é"),
        (b"1e400", 10, float("inf")),  # not a constant: validate_measurements catches non-finite numbers
    ],
)
def test_strict_json_accepts(payload: bytes, limit: int, expected: Any) -> None:
    assert strict_json(payload, limit) == expected


@pytest.mark.parametrize(
    ("payload", "limit"),
    [(b"{}", 1), (b"{} []", 10), (b'{"a":1,"a":1}', 100), (b"NaN", 10), (b"\xc3(", 10), (b"", 10)],
)
def test_strict_json_refuses(payload: bytes, limit: int) -> None:
    with pytest.raises(ResultError):
        strict_json(payload, limit)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        pytest.param(b"[" * 2000, "nested too deeply", id="nested-arrays"),
        pytest.param(b'{"a":' * 2000, "nested too deeply", id="nested-objects"),
        pytest.param(b"[" * 2000 + b"]" * 2000, "nested too deeply", id="nested-but-complete"),
        pytest.param(b"9" * 5000, "a number of more than", id="5000-digit-integer"),
        pytest.param(b'{"bw":' + b"9" * 5000 + b"}", "a number of more than", id="5000-digit-measurement"),
    ],
)
def test_strict_json_refuses_what_python_cannot_parse(payload: bytes, fragment: str) -> None:
    """Deep nesting (RecursionError) and huge integers (ValueError) are a ResultError like any
    other malformed document, never another exception that would stop the caller."""
    with pytest.raises(ResultError) as caught:
        strict_json(payload, 16 * 1024)
    assert fragment in str(caught.value)


# ---------------------------------------------------------------- measurements protocol


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"a": 1},
        {"a": True, "b": False, "c": 0, "d": -1.5, "e": "", "f": "x" * MAX_MEASUREMENT_TEXT},
        {"a" + "b" * 62: 1},
        {"x.y-z_0": 1},
        {f"m{i}": i for i in range(MAX_MEASUREMENTS)},
        {"big": 10**30},
    ],
    ids=["empty", "one", "types", "name-63", "punctuation", "sixteen", "big-int"],
)
def test_validate_measurements_accepts(value: dict[str, Any]) -> None:
    assert validate_measurements(value) is value


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([], "must be a JSON object"),
        ("x", "must be a JSON object"),
        (None, "must be a JSON object"),
        ({f"m{i}": i for i in range(MAX_MEASUREMENTS + 1)}, "at most 16"),
        ({"A": 1}, "must match"),
        ({"1a": 1}, "must match"),
        ({"": 1}, "must match"),
        ({"_a": 1}, "must match"),
        ({"a b": 1}, "must match"),
        ({"a" * 64: 1}, "must match"),
        ({"a\n": 1}, "must match"),
        ({1: 1}, "must match"),
        ({"a": float("nan")}, "not a finite number"),
        ({"a": float("inf")}, "not a finite number"),
        ({"a": float("-inf")}, "not a finite number"),
        ({"a": "x" * (MAX_MEASUREMENT_TEXT + 1)}, "longer than 128"),
        ({"a": None}, "must be a number"),
        ({"a": [1]}, "must be a number"),
        ({"a": {"b": 1}}, "must be a number"),
        ({"a": "\ud800"}, "not valid Unicode"),  # json.loads makes it from "\\ud800"; UTF-8 cannot hold it
    ],
)
def test_validate_measurements_refuses(value: Any, fragment: str) -> None:
    with pytest.raises(ResultError) as caught:
        validate_measurements(value)
    assert fragment in str(caught.value)


def test_result_model_enforces_measurements_protocol() -> None:
    with pytest.raises(ValidationError):
        make_result(measurements={"Bad": 1})
    with pytest.raises(ValidationError):
        make_result(measurements={f"m{i}": i for i in range(17)})
    with pytest.raises(ValidationError):
        make_result(measurements={"a": float("nan")})


def write(path: Path, payload: bytes) -> Path:
    path.write_bytes(payload)
    return path


def test_read_measurements_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_measurements(tmp_path / "absent.json") == {}


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'{"bw":1.5,"ok":true}', {"bw": 1.5, "ok": True}),
        (b'  {"a": "b"}\n', {"a": "b"}),
        (b"{}", {}),
    ],
)
def test_read_measurements_accepts(tmp_path: Path, payload: bytes, expected: dict[str, Any]) -> None:
    assert read_measurements(write(tmp_path / "m.json", payload)) == expected


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"not json",
        b"[1]",
        b'{"a":1}{"b":2}',
        b'{"a":1,"a":2}',
        b'{"a":NaN}',
        b'{"a":1e999}',
        b'{"A":1}',
        b'{"a":null}',
        b'{"a":"\\ud800"}',
        json.dumps({f"m{i}": i for i in range(17)}).encode(),
        b"\xff",
        b'{"a":"' + b"x" * MEASUREMENTS_FILE_LIMIT + b'"}',
        b"[" * 2000,
        b'{"bw":' + b"9" * 5000 + b"}",
    ],
    ids=[
        "empty",
        "text",
        "array",
        "two",
        "dup",
        "nan",
        "overflow",
        "name",
        "null",
        "lone-surrogate",
        "seventeen",
        "utf8",
        "oversized",
        "nested-2000-deep",
        "5000-digit-number",
    ],
)
def test_read_measurements_refuses(tmp_path: Path, payload: bytes) -> None:
    with pytest.raises(ResultError):
        read_measurements(write(tmp_path / "m.json", payload))


def test_read_measurements_limit_is_16_kib(tmp_path: Path) -> None:
    body = b'{"a":1}'
    exact = body + b" " * (MEASUREMENTS_FILE_LIMIT - len(body))
    assert read_measurements(write(tmp_path / "ok.json", exact)) == {"a": 1}
    with pytest.raises(ResultError, match="exceeds the limit"):
        read_measurements(write(tmp_path / "big.json", exact + b" "))


# ---------------------------------------------------------------- verdict rules


@pytest.mark.parametrize(
    ("outcome", "verdict", "reason"),
    [
        (Outcome(0, None, False, 0, 1), Verdict.PASS, "Succeeded"),
        (Outcome(1, None, False, 0, 1), Verdict.FAIL, "Failed: the script exited 1"),
        (Outcome(2, None, False, 0, 1), Verdict.FAIL, "Failed: the script exited 2"),
        (Outcome(3, None, False, 0, 1), Verdict.INCONCLUSIVE, "ScriptInconclusive: the script exited 3"),
        (Outcome(4, None, False, 0, 1), Verdict.FAIL, "Failed: the script exited 4"),
        (Outcome(127, None, False, 0, 1), Verdict.FAIL, "exited 127"),
        (Outcome(255, None, False, 0, 1), Verdict.FAIL, "exited 255"),
        (Outcome(None, 9, False, 0, 1), Verdict.INCONCLUSIVE, "Signaled: the script was killed by signal 9"),
        (Outcome(None, 15, False, 0, 1), Verdict.INCONCLUSIVE, "signal 15"),
        (Outcome(None, 11, False, 0, 1), Verdict.INCONCLUSIVE, "signal 11"),
        (Outcome(0, None, True, 0, 1), Verdict.INCONCLUSIVE, "DeadlineExceeded"),
        (Outcome(1, None, True, 0, 1), Verdict.INCONCLUSIVE, "DeadlineExceeded"),
        (Outcome(None, 15, True, 0, 1), Verdict.INCONCLUSIVE, "DeadlineExceeded"),
        (Outcome(None, 9, True, 0, 1), Verdict.INCONCLUSIVE, "DeadlineExceeded"),
    ],
)
def test_verdict_of(outcome: Outcome, verdict: Verdict, reason: str) -> None:
    got, why = verdict_of(outcome)
    assert got == verdict
    assert reason in why


def build(tmp_path: Path, outcome: Outcome, measurements: bytes | None = None, **kwargs: Any) -> Result:
    (tmp_path / "stdout").write_bytes(b"out line 1\nout line 2\n")
    (tmp_path / "stderr").write_bytes(b"")
    path = tmp_path / "measurements.json"
    if measurements is not None:
        path.write_bytes(measurements)
    return build_result(
        IDENTITY,
        outcome,
        measurements_file=path,
        stdout_file=tmp_path / "stdout",
        stderr_file=tmp_path / "stderr",
        **kwargs,
    )


def test_build_result_pass_with_measurements(tmp_path: Path) -> None:
    result = build(tmp_path, Outcome(0, None, False, 1700000000.9, 1700000042.2), b'{"bw":12.5}')
    assert result.verdict == Verdict.PASS
    assert result.measurements == {"bw": 12.5}
    assert result.identity == IDENTITY
    assert result.exit_code == 0
    assert result.signal is None
    # To the millisecond (issue 15: whole seconds hid where a check's overhead goes).
    assert result.started_at == datetime.fromtimestamp(1700000000, UTC) + timedelta(milliseconds=900)
    assert result.finished_at == datetime.fromtimestamp(1700000042, UTC) + timedelta(milliseconds=200)
    assert result.stdout is not None
    assert result.stdout.bytes == 22
    assert result.stdout.digest == "sha256:" + hashlib.sha256(b"out line 1\nout line 2\n").hexdigest()
    assert result.stdout.tail == "out line 1\nout line 2\n"
    assert result.stderr is not None
    assert result.stderr.bytes == 0
    assert parse_result(fit(result) or b"") == model(result)


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome(0, None, False, 0, 1),
        Outcome(1, None, False, 0, 1),
        Outcome(None, 9, False, 0, 1),
        Outcome(0, None, True, 0, 1),
    ],
)
@pytest.mark.parametrize(
    "payload",
    [b"garbage", b'{"A":1}', b'{"a":NaN}', b"[]", b"[" * 2000, b'{"bw":' + b"9" * 5000 + b"}"],
    ids=["garbage", "name", "nan", "array", "nested-2000-deep", "5000-digit-number"],
)
def test_invalid_measurements_are_inconclusive_never_pass(tmp_path: Path, outcome: Outcome, payload: bytes) -> None:
    result = build(tmp_path, outcome, payload)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.reason.startswith("InvalidMeasurements: ")
    assert result.measurements == {}
    assert len(result.reason) <= 256


def test_build_result_signal_and_fail(tmp_path: Path) -> None:
    signaled = build(tmp_path, Outcome(None, 9, False, 0, 1))
    assert (signaled.verdict, signaled.exit_code, signaled.signal) == (Verdict.INCONCLUSIVE, None, 9)
    failed = build(tmp_path, Outcome(4, None, False, 0, 1), b'{"errors":3}')
    assert (failed.verdict, failed.exit_code, failed.measurements) == (Verdict.FAIL, 4, {"errors": 3})


def test_build_result_explicit_verdict_wins_but_invalid_measurements_still_inconclusive(tmp_path: Path) -> None:
    chosen = (Verdict.FAIL, "Failed: rank(s) 1 exited non-zero")
    result = build(tmp_path, Outcome(0, None, False, 0, 1), verdict=chosen)
    assert (result.verdict, result.reason) == chosen
    result = build(tmp_path, Outcome(0, None, False, 0, 1), b"{", verdict=(Verdict.PASS, "ok"))
    assert result.verdict == Verdict.INCONCLUSIVE


def test_build_result_truncates_long_explicit_reason(tmp_path: Path) -> None:
    result = build(tmp_path, Outcome(0, None, False, 0, 1), verdict=(Verdict.FAIL, "x" * 1000))
    assert result.reason == "x" * 256


def test_build_result_missing_streams(tmp_path: Path) -> None:
    result = build_result(
        IDENTITY,
        Outcome(0, None, False, 0, 1),
        measurements_file=tmp_path / "none.json",
        stdout_file=tmp_path / "no-stdout",
        stderr_file=tmp_path / "no-stderr",
    )
    assert result.stdout is not None
    assert result.stdout.bytes == 0
    assert result.stdout.digest == "sha256:" + hashlib.sha256(b"").hexdigest()


def test_error_result_is_inconclusive() -> None:
    result = error_result(IDENTITY, "cannot read script /x: No such file" + "!" * 400, 10.7, 20.2)
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.reason.startswith("RunnerError: cannot read script")
    assert len(result.reason) == 256
    assert result.exit_code is None
    assert result.started_at == datetime.fromtimestamp(10, UTC) + timedelta(milliseconds=700)
    assert parse_result(fit(result) or b"") == model(result)


def test_times_are_recorded_to_the_millisecond(tmp_path: Path) -> None:
    result = build(tmp_path, Outcome(0, None, False, 20.1239, 21.0004))
    assert result.started_at == datetime.fromtimestamp(20, UTC) + timedelta(milliseconds=123)
    assert result.finished_at == datetime.fromtimestamp(21, UTC)
    assert result.finished_at - result.started_at == timedelta(milliseconds=877)
    assert parse_result(fit(result) or b"") == model(result)


# ---------------------------------------------------------------- fit


def test_fit_leaves_a_small_result_untouched() -> None:
    result = make_result(stdout=output("tail"), measurements={"a": 1})
    assert fit(plain(result)) == render_result(result)


@pytest.mark.parametrize("char", ["x", "é", "€", "\x01", "\U0001f600"])
def test_fit_shrinks_tails_first_and_keeps_pass(char: str) -> None:
    tail = "head-" + char * (MAX_TAIL_CHARS - 10) + "-end"
    measurements = {f"m{i:02d}": "v" * 100 for i in range(MAX_MEASUREMENTS)}
    result = make_result(stdout=output(tail), stderr=output(tail), measurements=measurements)
    assert len(render_result(result)) > MAX_RESULT_BYTES
    payload = fit(plain(result))
    assert payload is not None
    assert len(payload) <= MAX_RESULT_BYTES
    parsed = parse_result(payload)
    assert parsed.verdict == Verdict.PASS
    assert parsed.reason == result.reason
    assert parsed.measurements == measurements
    assert parsed.stdout is not None
    assert parsed.stderr is not None
    for stream in (parsed.stdout, parsed.stderr):
        assert len(stream.tail) < len(tail)
        assert tail.endswith(stream.tail)  # the newest output survives
        assert stream.digest == result.stdout.digest  # type: ignore[union-attr]
        assert stream.bytes == result.stdout.bytes  # type: ignore[union-attr]


def test_fit_shrinks_tails_as_little_as_needed() -> None:
    # ASCII tails: shrinking them to 256 characters fits; they are not emptied.
    result = make_result(
        stdout=output("y" * MAX_TAIL_CHARS),
        stderr=output("z" * MAX_TAIL_CHARS),
        measurements={f"m{i}": "v" * 128 for i in range(16)},
    )
    assert len(render_result(result)) > MAX_RESULT_BYTES
    parsed = parse_result(fit(plain(result)) or b"")
    assert parsed.stdout is not None
    assert len(parsed.stdout.tail) == MAX_TAIL_CHARS // 4
    assert parsed.verdict == Verdict.PASS
    assert len(parsed.measurements) == 16


def big_measurements() -> dict[str, Any]:
    # Control characters are escaped as \u0001: 6 bytes each, 768 bytes a value.
    return {f"m{i:02d}": "\x01" * MAX_MEASUREMENT_TEXT for i in range(MAX_MEASUREMENTS)}


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        (Verdict.PASS, Verdict.INCONCLUSIVE),
        (Verdict.FAIL, Verdict.FAIL),
        (Verdict.INCONCLUSIVE, Verdict.INCONCLUSIVE),
    ],
)
def test_fit_drops_measurements_last_and_never_passes_without_them(verdict: Verdict, expected: Verdict) -> None:
    result = make_result(verdict, stdout=output("z" * 1024), stderr=output("w" * 1024), measurements=big_measurements())
    payload = fit(plain(result))
    assert payload is not None
    assert len(payload) <= MAX_RESULT_BYTES
    parsed = parse_result(payload)
    assert parsed.measurements == {}
    assert parsed.verdict == expected
    assert parsed.reason.startswith("ResultTooLarge")
    assert parsed.stdout is not None
    assert parsed.stdout.tail == ""  # tails went before the measurements


def test_fit_returns_none_when_even_the_bare_result_is_too_large() -> None:
    result = RunnerResult(
        verdict=Verdict.FAIL,
        reason="\x01" * 256,
        identity=RunnerIdentity(
            participant_index=0, node_name="\x01" * 253, pod_name="\x01" * 253, pod_uid="\x01" * 64
        ),
        started_at=datetime(2025, 1, 1, tzinfo=UTC),
        finished_at=datetime(2025, 1, 1, tzinfo=UTC),
    )
    assert len(render_result(result)) > MAX_RESULT_BYTES
    assert fit(plain(result)) is None


@pytest.mark.parametrize("tail_len", [0, 1, 5, 17, 300, 1000, 1024])
@pytest.mark.parametrize("measure_len", [0, 1, 64, 128])
def test_fit_output_always_parses_within_limit(tail_len: int, measure_len: int) -> None:
    result = make_result(
        stdout=output("\x02" * tail_len),
        stderr=output("é" * tail_len),
        measurements={f"k{i}": "\x03" * measure_len for i in range(MAX_MEASUREMENTS)},
    )
    payload = fit(plain(result))
    assert payload is not None
    assert len(payload) <= MAX_RESULT_BYTES
    parsed = parse_result(payload)
    if parsed.measurements != result.measurements:
        assert parsed.verdict != Verdict.PASS


def launcher_result(participants: int) -> RunnerResult:
    """A launcher's Pass result for an MPIJob with ``participants`` workers, named as the
    adapter and the MPI operator name them."""
    job = mpijob_name(make_inputs(participants))
    hosts = [f"{job}-worker-{i}.{job}.signal-system.svc" for i in range(participants)]
    lines = [
        f"[1,{i}]<stdout>:" + mpi.rank_line(i, participants, f"{job}-worker-{i}", 0, key="k")
        for i in range(participants)
    ]
    verdict, reason, report = mpi.evaluate_launcher(hosts, mpi.reports_in(lines, "k"), 0, False)
    assert verdict == Verdict.PASS
    return make_result(
        verdict,
        index=None,
        role="launcher",
        reason=reason,
        pod_name=f"{job}-launcher-x7k2p",
        pod_uid="8d1f0a52-6c1e-4b7a-9f0e-1d2c3b4a5f60",
        launcher=launcher_model(report),
        stdout=output("x" * 1024),
        stderr=output(""),
    )


@pytest.mark.parametrize("participants", [1, 2, 8, 16])
def test_fit_keeps_launcher_report_for_small_mpijobs(participants: int) -> None:
    result = launcher_result(participants)
    parsed = parse_result(fit(plain(result)) or b"")
    assert parsed.verdict == Verdict.PASS
    assert parsed.launcher == result.launcher


@pytest.mark.parametrize("participants", [32, 64])
def test_fit_launcher_report_for_large_mpijobs(participants: int) -> None:
    payload = fit(plain(launcher_result(participants)))
    assert payload is not None
    assert parse_result(payload).launcher is not None
