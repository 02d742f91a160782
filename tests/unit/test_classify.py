"""Classification (shared/classify.py), table-driven: every way to be Passed, Failed,
Running, Stale or Unknown, and that nothing missing, unverified or unsupported is Passed."""

import functools
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from shared.classify import classified, classify, classify_document
from shared.envelope import (
    CleanupState,
    State,
    ValidationResult,
    Verification,
    VerificationResult,
    derive,
)
from shared.run import Phase, Verdict
from tests.unit.test_envelope_builders import NOW, accepted, evidence, make_run, read

WEEK = timedelta(days=7)


@functools.cache
def base(verdict: Verdict = Verdict.PASS) -> ValidationResult:
    run = make_run()
    documents = [evidence(run, verdicts={0: "Fail"} if verdict == Verdict.FAIL else None)]
    done, cm, _, digest = accepted(run, documents)
    results = derive(done, read(done, cm, digest), cluster="c", observed_at=NOW)
    return results[0]


@dataclass
class Case:
    state: State
    reason: str
    verdict: Verdict = Verdict.PASS
    run_phase: Phase | None = None
    verification: Verification | None = None
    cleanup: CleanupState | None = None
    node_uid: str | None = "uid-0"
    age: timedelta = timedelta(minutes=1)
    window: timedelta = WEEK
    no_finish: bool = False
    fields: dict[str, Any] = field(default_factory=dict)


CASES = {
    "verified-complete-fresh-pass": Case(State.PASSED, "CheckPassed"),
    "verified-proven-failure": Case(State.FAILED, "CheckFailed", verdict=Verdict.FAIL),
    "failure-in-a-failed-run-of-other-node-passes-here": Case(State.PASSED, "CheckPassed", run_phase=Phase.FAILED),
    "run-pending": Case(State.RUNNING, "RunInProgress", run_phase=Phase.PENDING),
    "run-admitted": Case(State.RUNNING, "RunInProgress", run_phase=Phase.ADMITTED),
    "run-running": Case(State.RUNNING, "RunInProgress", run_phase=Phase.RUNNING),
    "old-pass": Case(State.STALE, "OlderThanWindow", age=timedelta(days=8)),
    "old-failure": Case(State.STALE, "OlderThanWindow", verdict=Verdict.FAIL, age=timedelta(days=8)),
    "short-window-from-recurrence": Case(
        State.STALE, "OlderThanWindow", age=timedelta(seconds=3), window=timedelta(seconds=2)
    ),
    "just-inside-the-window": Case(State.PASSED, "CheckPassed", age=timedelta(days=7)),
    "clock-skew-future-finish-is-fresh": Case(State.PASSED, "CheckPassed", age=timedelta(minutes=-5)),
    "no-finish-time": Case(State.STALE, "NoFinishTime", no_finish=True),
    "missing-evidence": Case(State.UNKNOWN, "Missing", verification=Verification.MISSING),
    "malformed-evidence": Case(State.UNKNOWN, "Malformed", verification=Verification.MALFORMED),
    "unsupported-version": Case(State.UNKNOWN, "UnsupportedVersion", verification=Verification.UNSUPPORTED_VERSION),
    "digest-mismatch": Case(State.UNKNOWN, "DigestMismatch", verification=Verification.DIGEST_MISMATCH),
    "unauthorized-detail": Case(State.UNKNOWN, "Unauthorized", verification=Verification.UNAUTHORIZED),
    "incomplete-targets": Case(State.UNKNOWN, "Incomplete", verification=Verification.INCOMPLETE),
    "foreign-evidence": Case(State.UNKNOWN, "Foreign", verification=Verification.FOREIGN),
    "inconsistent-evidence": Case(State.UNKNOWN, "Inconsistent", verification=Verification.INCONSISTENT),
    "pending-evidence-of-terminal-run": Case(State.UNKNOWN, "Pending", verification=Verification.PENDING),
    "missing-even-when-old": Case(State.UNKNOWN, "Missing", verification=Verification.MISSING, age=timedelta(days=30)),
    "failure-with-bad-digest-is-not-failed": Case(
        State.UNKNOWN, "DigestMismatch", verdict=Verdict.FAIL, verification=Verification.DIGEST_MISMATCH
    ),
    "node-replaced": Case(State.UNKNOWN, "NodeReplaced", node_uid="uid-new"),
    "node-replaced-failure": Case(State.UNKNOWN, "NodeReplaced", verdict=Verdict.FAIL, node_uid="uid-new"),
    "node-gone": Case(State.UNKNOWN, "NodeMissing", node_uid=None),
    "cleanup-failed": Case(State.UNKNOWN, "CleanupFailed", cleanup=CleanupState.FAILED),
    "cleanup-failed-failure": Case(State.UNKNOWN, "CleanupFailed", verdict=Verdict.FAIL, cleanup=CleanupState.FAILED),
    "cleanup-unknown": Case(State.UNKNOWN, "CleanupFailed", cleanup=CleanupState.UNKNOWN),
    "cleanup-pending": Case(State.UNKNOWN, "CleanupFailed", cleanup=CleanupState.PENDING),
    "inconclusive-verdict": Case(State.UNKNOWN, "Inconclusive", verdict=Verdict.INCONCLUSIVE),
    "no-verdict": Case(State.UNKNOWN, "Inconclusive", fields={"verdict": None}),
    "pass-in-inconclusive-run": Case(State.UNKNOWN, "RunInconclusive", run_phase=Phase.INCONCLUSIVE),
    "pass-in-canceled-run": Case(State.UNKNOWN, "RunInconclusive", run_phase=Phase.CANCELED),
    "failure-in-inconclusive-run-is-proven": Case(
        State.FAILED, "CheckFailed", verdict=Verdict.FAIL, run_phase=Phase.INCONCLUSIVE
    ),
    "replaced-outranks-stale": Case(State.UNKNOWN, "NodeReplaced", node_uid="x", age=timedelta(days=9)),
    "running-outranks-everything": Case(
        State.RUNNING, "RunInProgress", run_phase=Phase.RUNNING, verification=Verification.MISSING, node_uid=None
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_classification_table(name: str) -> None:
    case = CASES[name]
    result = base(Verdict.FAIL if case.verdict == Verdict.FAIL else Verdict.PASS)
    update: dict[str, Any] = {"verdict": case.verdict, **case.fields}
    if case.run_phase is not None:
        update["run"] = result.run.model_copy(update={"phase": case.run_phase})
    if case.verification is not None:
        update["verification"] = VerificationResult(state=case.verification, message="")
    if case.cleanup is not None:
        update["cleanup"] = case.cleanup
    update["finished_at"] = None if case.no_finish else NOW - case.age
    result = result.model_copy(update=update)
    outcome = classify(result, current_node_uid=case.node_uid, now=NOW, window=case.window)
    assert (outcome.state, outcome.reason) == (case.state, case.reason), outcome
    assert outcome.message


def test_only_the_first_row_kinds_can_pass() -> None:
    """Exhaustively: Passed needs every fact right at once."""
    passing = 0
    for verification in Verification:
        for cleanup in CleanupState:
            for verdict in [*Verdict, None]:
                for node_uid in ("uid-0", "uid-other", None):
                    for phase in Phase:
                        result = base().model_copy(
                            update={
                                "verification": VerificationResult(state=verification),
                                "cleanup": cleanup,
                                "verdict": verdict,
                                "run": base().run.model_copy(update={"phase": phase}),
                            }
                        )
                        outcome = classify(result, current_node_uid=node_uid, now=NOW, window=WEEK)
                        if outcome.state == State.PASSED:
                            passing += 1
                            assert verification == Verification.VERIFIED
                            assert cleanup == CleanupState.COMPLETE
                            assert verdict == Verdict.PASS
                            assert node_uid == "uid-0"
                            assert phase in {Phase.SUCCEEDED, Phase.FAILED}
    assert passing == 2


def test_classified_sets_state_reason_and_message() -> None:
    result = classified(base(), current_node_uid="uid-0", now=NOW, window=WEEK)
    assert (result.state, result.reason) == (State.PASSED, "CheckPassed")


def test_received_envelopes_of_other_versions_are_unknown() -> None:
    document = classified(base(), current_node_uid="uid-0", now=NOW, window=WEEK).model_dump(mode="json", by_alias=True)
    assert classify_document(document, current_node_uid="uid-0", now=NOW, window=WEEK).state == State.PASSED
    for bad in (
        {**document, "schema": "projectsignal.dev/validation-result/v2"},
        {**document, "schema": None},
        {**document, "cleanup": "Mostly"},
        {k: v for k, v in document.items() if k != "verification"},
    ):
        outcome = classify_document(bad, current_node_uid="uid-0", now=NOW, window=WEEK)
        assert (outcome.state, outcome.reason) == (State.UNKNOWN, "UnsupportedVersion")
