"""Turning what happened into one bounded result (runner/document.py; a RunnerResult on the
wire). Pure apart from reading the measurements file and captured output.

Verdict rules (fail closed): exit 0 is Pass, exit ``INCONCLUSIVE_EXIT_CODE`` (3: "my evidence is
insufficient") is Inconclusive, any other non-zero exit is Fail; a deadline, a signal, a runner
error, or an invalid measurements file is Inconclusive, never Pass.
The result is shrunk (tails first, then measurements) until it fits the termination
message's 4 KiB; if even the bare result does not fit, the runner writes nothing and the
adapter sees no result (Inconclusive).
"""

from runner.document import Identity, Launcher, Result, Stream, render
from runner.execute import Outcome, StreamError, StrPath, open_regular, summarise
from shared.result_wire import (
    INCONCLUSIVE_EXIT_CODE,
    MAX_REASON_CHARS,
    MAX_RESULT_BYTES,
    MAX_TAIL_CHARS,
    MeasurementMap,
    ResultError,
    strict_json,
    validate_measurements,
)
from shared.timestamps import UTC, datetime, to_millisecond
from shared.verdict_names import FAIL, INCONCLUSIVE, PASS

MEASUREMENTS_FILE_LIMIT = 16 * 1024


def read_measurements(path: StrPath) -> MeasurementMap:
    """The script's measurements (empty when it wrote none); raise ResultError if invalid."""
    try:
        fd = open_regular(path, "measurements file")
        if fd is None:
            return {}
        with open(fd, "rb") as handle:
            payload = handle.read(MEASUREMENTS_FILE_LIMIT + 1)
    except StreamError as exc:
        raise ResultError(str(exc)) from exc
    except OSError as exc:
        raise ResultError(f"cannot read the measurements file: {exc.strerror}") from exc
    return validate_measurements(strict_json(payload, MEASUREMENTS_FILE_LIMIT))


def verdict_of(outcome: Outcome) -> tuple[str, str]:
    """The verdict's name (shared/verdict_names.py) and the reason for ``outcome``."""
    if outcome.timed_out:
        return INCONCLUSIVE, "DeadlineExceeded: the script outlived its deadline"
    if outcome.signal is not None:
        return INCONCLUSIVE, f"Signaled: the script was killed by signal {outcome.signal}"
    if outcome.exit_code == 0:
        return PASS, "Succeeded: the script exited 0"
    if outcome.exit_code == INCONCLUSIVE_EXIT_CODE:
        return (
            INCONCLUSIVE,
            f"ScriptInconclusive: the script exited {INCONCLUSIVE_EXIT_CODE} (its evidence is insufficient)",
        )
    return FAIL, f"Failed: the script exited {outcome.exit_code}"


def _stamp(seconds: float) -> datetime:
    return to_millisecond(datetime.fromtimestamp(seconds, UTC))


def build_result(
    identity: Identity,
    outcome: Outcome,
    *,
    measurements_file: StrPath,
    stdout_file: StrPath,
    stderr_file: StrPath,
    launcher: Launcher | None = None,
    verdict: tuple[str, str] | None = None,
) -> Result:
    chosen, reason = verdict or verdict_of(outcome)
    try:
        measurements = read_measurements(measurements_file)
    except ResultError as exc:
        measurements = {}
        chosen, reason = INCONCLUSIVE, f"InvalidMeasurements: {exc}"[:MAX_REASON_CHARS]
    streams: tuple[Stream | None, Stream | None] = (None, None)
    try:
        streams = (summarise(stdout_file), summarise(stderr_file))
    except (StreamError, OSError) as exc:
        # What the script did to its own output files after it exited: the exit status alone
        # proves nothing then (it may have hidden a failure's output), so Inconclusive.
        what = str(exc) if isinstance(exc, StreamError) else f"cannot read the script's output: {exc.strerror}"
        measurements, chosen, reason = {}, INCONCLUSIVE, f"UnreadableOutput: {what}"
    return Result(
        verdict=chosen,
        reason=reason[:MAX_REASON_CHARS],
        identity=identity,
        exit_code=outcome.exit_code,
        signal=outcome.signal,
        measurements=measurements,
        stdout=streams[0],
        stderr=streams[1],
        started_at=_stamp(outcome.started),
        finished_at=_stamp(outcome.finished),
        launcher=launcher,
    )


def error_result(identity: Identity, reason: str, started: float, finished: float) -> Result:
    return Result(
        verdict=INCONCLUSIVE,
        reason=f"RunnerError: {reason}"[:MAX_REASON_CHARS],
        identity=identity,
        measurements={},
        started_at=_stamp(started),
        finished_at=_stamp(finished),
    )


def fit(result: Result) -> bytes | None:
    """Canonical JSON of ``result`` within MAX_RESULT_BYTES, shrinking tails then dropping
    measurements; None if it cannot fit."""
    candidate = result
    tail = MAX_TAIL_CHARS
    while True:
        payload = render(candidate)
        if len(payload) <= MAX_RESULT_BYTES:
            return payload
        if tail > 0:
            tail //= 4
            candidate = candidate._replace(stdout=_cut(result.stdout, tail), stderr=_cut(result.stderr, tail))
        elif candidate.measurements:
            candidate = candidate._replace(
                measurements={},
                verdict=INCONCLUSIVE if candidate.verdict == PASS else candidate.verdict,
                reason="ResultTooLarge: measurements dropped to fit the termination message",
            )
        else:
            return None


def _cut(stream: Stream | None, tail: int) -> Stream | None:
    """``stream`` keeping the last ``tail`` characters of its tail (none for 0)."""
    if stream is None:
        return None
    return stream._replace(tail=stream.tail[-tail:] if tail else "")
