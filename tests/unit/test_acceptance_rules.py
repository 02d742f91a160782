"""Acceptance rules (shared/acceptance.py), table-driven and pure: check evidence from
tests/evidence_builders.py (valid, mutated, raw) through ``assess_check``/``validate_check``,
the Run decision (``decide``) over combinations of outcomes and world state, and the shape
of the Run's evidence document (``run_document``). No cluster, no API mocks."""

import base64
import copy
import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest

from shared.acceptance import (
    RUN_EVIDENCE_SCHEMA,
    CheckInput,
    CheckOutcome,
    RunDecision,
    assess_check,
    decide,
    run_document,
    validate_check,
)
from shared.digests import canonical_json
from shared.evidence import EVIDENCE_KEY, RESULTS_SCHEMA, decode_document, encode
from shared.run import Phase, Verdict
from tests import evidence_builders as eb
from tests.builders import run_manifest

Obj = dict[str, Any]
RUN_UID = "7d3f2a10-5b6c-4d7e-8f90-a1b2c3d4e5f6"
NODES = ["gpu-000", "gpu-001"]


def make_run(participants: int = 2, checks: int = 1, backend: str = "Pod", scope: str = "crossNode") -> Obj:
    run = run_manifest("r1", participants)
    run["metadata"].update(namespace="signal", uid=RUN_UID, creationTimestamp="2026-11-30T00:00:00Z")
    for i in range(1, checks):
        run["spec"]["checks"].append(
            {"name": f"check-{i}", "scriptKey": "nccl.sh", "backend": "Pod", "backendActiveDeadline": "1m"}
        )
    for check in run["spec"]["checks"]:
        check["backend"] = backend
        if backend == "MPIJob":
            check["mpi"] = {"scope": scope}
    return run


def plain(document: Obj) -> Obj:
    """A deep copy without shared sub-objects (the builder aliases workloads and cleanup.deleted)."""
    return json.loads(json.dumps(document))


def evidence_cm(document: Obj | None, **kw: Any) -> Obj:
    return eb.config_map("r1-c0-evidence", document, **kw)


def assess(run: Obj, document: Obj | None, index: int = 0, reported: str | None = None, **kw: Any) -> CheckOutcome:
    cm = None if document is None and not kw else eb.config_map(f"r1-c{index}-evidence", document, **kw)
    return assess_check(run, CheckInput(index, f"r1-c{index}-evidence", cm, reported))


LAUNCHER_NODE = "system-0"
"""Where a crossNode launcher runs: a Node that is none of the participants'."""


def mpi_evidence(run: Obj, index: int = 0, verdicts: dict[int, str] | None = None) -> Obj:
    """Valid crossNode MPIJob evidence: workers (one per participant), a launcher on a Node not
    under test and the MPIJob."""
    doc = plain(eb.check_evidence(run, index, verdicts))
    for w in doc["results"]["workloads"]:
        w["role"] = "worker"
        w["name"] = w["name"].replace("-p", "-worker-")
        w["owners"] = eb.mpi_chain(run, "mpijob-uid")
    for p in doc["results"]["participants"]:
        p["workload"] = p["workload"].replace("-p", "-worker-")
    doc["results"]["workloads"] += [
        {
            "kind": "Pod",
            "name": f"r1-c{index}-launcher",
            "uid": "launcher-uid",
            "nodeName": LAUNCHER_NODE,
            "role": "launcher",
            "owners": eb.mpi_chain(run, "mpijob-uid", launcher=True),
        },
        {
            "kind": "MPIJob",
            "name": f"r1-c{index}",
            "uid": "mpijob-uid",
            "role": "mpijob",
            "owners": [eb.run_link(run)],
        },
    ]
    doc["cleanup"]["deleted"] = copy.deepcopy(doc["results"]["workloads"])
    return eb.seal(doc)


# -- the control --------------------------------------------------------------------------------


def test_valid_document_passes_with_every_participant_pass() -> None:
    run = make_run()
    document = eb.check_evidence(run)
    outcome = assess(run, document, reported=eb.digest_of(document))
    assert outcome == CheckOutcome(
        0,
        "inventory",
        Verdict.PASS,
        None,
        eb.digest_of(document),
        document,
        {0: Verdict.PASS, 1: Verdict.PASS},
        eb.digest_of(document),
    )
    assert validate_check(run, 0, document) == (Verdict.PASS, None, {0: Verdict.PASS, 1: Verdict.PASS})


def test_valid_document_passes_when_no_digest_was_reported() -> None:
    run = make_run()
    outcome = assess(run, eb.check_evidence(run), reported=None)
    assert (outcome.verdict, outcome.problem) == (Verdict.PASS, None)


@pytest.mark.parametrize("participants", [1, 2, 5])
def test_valid_document_passes_for_any_group_size(participants: int) -> None:
    run = make_run(participants)
    verdict, problem, per = validate_check(run, 0, eb.check_evidence(run))
    assert (verdict, problem) == (Verdict.PASS, None)
    assert per == dict.fromkeys(range(participants), Verdict.PASS)


def test_second_check_is_validated_against_its_own_identity() -> None:
    run = make_run(checks=2)
    document = eb.check_evidence(run, 1)
    assert assess(run, document, 1).verdict == Verdict.PASS
    # The same document offered as check 0 is foreign.
    verdict, problem, _ = validate_check(run, 0, document)
    assert verdict == Verdict.INCONCLUSIVE
    assert problem is not None
    assert problem.startswith("ForeignEvidence:")


# -- every document mutation is never Pass, with the right problem ------------------------------

MUTATION_PROBLEMS = {
    "other-run-uid": "ForeignEvidence",
    "other-run-name": "ForeignEvidence",
    "other-check-index": "ForeignEvidence",
    "other-check-name": "ForeignEvidence",
    "other-backend": "ForeignEvidence",
    "other-source-digest": "ForeignEvidence",
    "missing-participant": "IncompleteEvidence",
    "extra-participant": "ExtraParticipant",
    "duplicate-participant": "DuplicateParticipant",
    "swapped-node-uids": "ForeignParticipant",
    "foreign-node-name": "ForeignParticipant",
    "workload-on-other-node": "IdentityCoverage",
    "workload-missing": "IdentityCoverage",
    "result-names-other-workload": "IdentityCoverage",
    "pass-over-a-fail": "InconsistentEvidence",
    "results-digest-stale": "DigestMismatch",
    "cleanup-failed-but-pass": "InconsistentEvidence",
    "wrong-schema-version": "MalformedEvidence",
    "unknown-field": "MalformedEvidence",
    "verdict-missing": "MalformedEvidence",
}


def test_the_table_covers_every_mutation() -> None:
    assert set(MUTATION_PROBLEMS) == set(eb.DOCUMENT_MUTATIONS)


@pytest.mark.parametrize("case", sorted(eb.DOCUMENT_MUTATIONS))
def test_mutation_is_never_pass_even_when_reported(case: str) -> None:
    run = make_run()
    bad = eb.DOCUMENT_MUTATIONS[case](eb.check_evidence(run))
    # Even when the adapter reported exactly this document's digest.
    outcome = assess(run, bad, reported=eb.digest_of(bad))
    assert outcome.verdict == Verdict.INCONCLUSIVE
    assert outcome.problem is not None
    assert outcome.problem.split(":", 1)[0] == MUTATION_PROBLEMS[case], outcome.problem
    assert outcome.participant_verdicts == {}
    assert outcome.name == "inventory"


@pytest.mark.parametrize("case", sorted(eb.DOCUMENT_MUTATIONS))
def test_mutation_is_never_pass_without_a_reported_digest(case: str) -> None:
    run = make_run()
    outcome = assess(run, eb.DOCUMENT_MUTATIONS[case](eb.check_evidence(run)))
    assert outcome.verdict != Verdict.PASS
    assert outcome.problem is not None
    assert outcome.problem.split(":", 1)[0] == MUTATION_PROBLEMS[case]


@pytest.mark.parametrize("case", sorted(eb.DOCUMENT_MUTATIONS))
def test_validate_check_rejects_every_mutation(case: str) -> None:
    run = make_run()
    verdict, problem, per = validate_check(run, 0, eb.DOCUMENT_MUTATIONS[case](eb.check_evidence(run)))
    assert verdict == Verdict.INCONCLUSIVE
    assert problem is not None
    assert problem.split(":", 1)[0] == MUTATION_PROBLEMS[case]
    assert per == {}


@pytest.mark.parametrize(
    "case", sorted(c for c, p in MUTATION_PROBLEMS.items() if p != "MalformedEvidence" or c == "unknown-field")
)
def test_decodable_mutations_keep_their_digest_and_document(case: str) -> None:
    """A document that decodes is recorded (digest and document) even when it is rejected."""
    run = make_run()
    bad = eb.DOCUMENT_MUTATIONS[case](eb.check_evidence(run))
    outcome = assess(run, bad)
    assert outcome.digest == eb.digest_of(bad)
    assert outcome.document == bad


# -- raw ConfigMap cases ------------------------------------------------------------------------


def _cm_with(raw: bytes, *, immutable: bool = True) -> Callable[[Obj], Obj]:
    return lambda _doc: evidence_cm(None, raw=raw, immutable=immutable)


RAW_CASES: dict[str, tuple[Callable[[Obj], Obj], str]] = {
    "not-immutable": (lambda doc: evidence_cm(doc, immutable=False), "not immutable"),
    "truncated-gzip": (lambda doc: evidence_cm(None, raw=eb.truncated_gzip(doc)), ""),
    "non-canonical": (lambda doc: evidence_cm(None, raw=eb.non_canonical(doc)), "canonical"),
    "oversized": (lambda doc: evidence_cm(None, raw=eb.oversized(doc)), "too large"),
    "trailing-gzip-data": (lambda doc: evidence_cm(None, raw=encode(doc)[2] + b"junk"), "after the gzip"),
    "not-gzip": (lambda doc: evidence_cm(None, raw=canonical_json(doc)), "gzip"),
    "json-array": (lambda doc: evidence_cm(None, raw=gzip.compress(b"[1,2]", mtime=0)), "canonical JSON object"),
    "nan": (
        lambda doc: evidence_cm(None, raw=gzip.compress(b'{"schema":"projectsignal.dev/check-evidence/v1","x":NaN}')),
        "not JSON",
    ),
    "results-schema": (lambda doc: evidence_cm(doc["results"]), "schema"),
    "no-key": (lambda doc: {"metadata": {"name": "r1-c0-evidence"}, "immutable": True, "binaryData": {}}, EVIDENCE_KEY),
    "data-not-binary": (
        lambda doc: {"metadata": {"name": "x"}, "immutable": True, "data": {EVIDENCE_KEY: "plain"}},
        EVIDENCE_KEY,
    ),
    "bad-base64": (
        lambda doc: {"metadata": {"name": "x"}, "immutable": True, "binaryData": {EVIDENCE_KEY: "@@not base64@@"}},
        "base64",
    ),
}


@pytest.mark.parametrize("case", sorted(RAW_CASES))
def test_raw_config_map_is_malformed(case: str) -> None:
    run = make_run()
    build, fragment = RAW_CASES[case]
    cm = build(eb.check_evidence(run))
    outcome = assess_check(run, CheckInput(0, "r1-c0-evidence", cm, None))
    assert outcome.verdict == Verdict.INCONCLUSIVE
    assert outcome.problem is not None
    assert outcome.problem.startswith("MalformedEvidence: ")
    assert fragment in outcome.problem
    assert len(outcome.problem) <= 300
    assert (outcome.digest, outcome.document, outcome.participant_verdicts) == (None, None, {})


def test_results_schema_document_is_rejected_even_though_it_decodes_elsewhere() -> None:
    run = make_run()
    cm = evidence_cm(eb.check_evidence(run)["results"])
    assert decode_document(cm, RESULTS_SCHEMA)[0]["schema"] == RESULTS_SCHEMA
    assert assess_check(run, CheckInput(0, "x", cm)).verdict == Verdict.INCONCLUSIVE


def test_missing_config_map_is_missing_evidence() -> None:
    run = make_run()
    outcome = assess_check(run, CheckInput(0, "r1-c0-evidence", None, "sha256:" + "a" * 64))
    assert outcome == CheckOutcome(
        0,
        "inventory",
        Verdict.INCONCLUSIVE,
        "MissingEvidence: no ConfigMap r1-c0-evidence (the check did not finish)",
        None,
        None,
        {},
        "sha256:" + "a" * 64,
    )


def test_reported_digest_of_another_document_is_a_digest_mismatch() -> None:
    run = make_run()
    valid = eb.check_evidence(run)
    other = eb.check_evidence(run, verdicts={1: "Fail"})
    outcome = assess(run, valid, reported=eb.digest_of(other))
    assert outcome.verdict == Verdict.INCONCLUSIVE
    assert outcome.problem is not None
    assert outcome.problem.startswith("DigestMismatch:")
    assert outcome.digest == eb.digest_of(valid)
    assert outcome.document == valid
    assert outcome.participant_verdicts == {}


def test_reported_digest_mismatch_hides_a_valid_fail() -> None:
    """A Fail document whose digest is not the reported one proves nothing."""
    run = make_run()
    failing = eb.check_evidence(run, verdicts={0: "Fail"})
    outcome = assess(run, failing, reported=eb.digest_of(eb.check_evidence(run)))
    assert (outcome.verdict, outcome.participant_verdicts) == (Verdict.INCONCLUSIVE, {})


# -- valid non-Pass evidence ---------------------------------------------------------------------


@pytest.mark.parametrize("failing", [0, 1])
def test_one_participant_fail_is_a_valid_fail(failing: int) -> None:
    run = make_run()
    document = eb.check_evidence(run, verdicts={failing: "Fail"})
    outcome = assess(run, document, reported=eb.digest_of(document))
    assert (outcome.verdict, outcome.problem) == (Verdict.FAIL, None)
    expected = {0: Verdict.PASS, 1: Verdict.PASS}
    expected[failing] = Verdict.FAIL
    assert outcome.participant_verdicts == expected


def test_every_participant_fail_is_a_valid_fail() -> None:
    run = make_run(3)
    document = eb.check_evidence(run, verdicts={0: "Fail", 1: "Fail", 2: "Fail"})
    assert validate_check(run, 0, document) == (Verdict.FAIL, None, dict.fromkeys(range(3), Verdict.FAIL))


def test_fail_and_inconclusive_participants_make_a_valid_fail() -> None:
    run = make_run(3)
    document = eb.check_evidence(run, verdicts={0: "Fail", 1: "Inconclusive"})
    verdict, problem, per = validate_check(run, 0, document)
    assert (verdict, problem) == (Verdict.FAIL, None)
    assert per == {0: Verdict.FAIL, 1: Verdict.INCONCLUSIVE, 2: Verdict.PASS}


def _without_workload(document: Obj, index: int) -> Obj:
    doc = plain(document)
    doc["results"]["workloads"] = [w for w in doc["results"]["workloads"] if w["participantIndex"] != index]
    doc["cleanup"]["deleted"] = copy.deepcopy(doc["results"]["workloads"])
    participant = next(p for p in doc["results"]["participants"] if p["index"] == index)
    for key in ("workload", "workloadUid", "exitCode"):
        participant.pop(key)
    participant["reason"] = "the Pod was never scheduled"
    return eb.seal(doc)


def test_inconclusive_participant_without_workload_is_valid_inconclusive() -> None:
    run = make_run()
    document = _without_workload(eb.check_evidence(run, verdicts={1: "Inconclusive"}), 1)
    outcome = assess(run, document, reported=eb.digest_of(document))
    assert (outcome.verdict, outcome.problem) == (Verdict.INCONCLUSIVE, None)
    assert outcome.participant_verdicts == {0: Verdict.PASS, 1: Verdict.INCONCLUSIVE}


@pytest.mark.parametrize("verdict", ["Pass", "Fail"])
def test_proven_participant_without_workload_is_identity_coverage(verdict: str) -> None:
    run = make_run()
    document = _without_workload(eb.check_evidence(run, verdicts={1: verdict}), 1)
    verdict_, problem, _ = validate_check(run, 0, document)
    assert verdict_ == Verdict.INCONCLUSIVE
    assert problem == "IdentityCoverage: participant 1 not served exactly once on its Node"


# -- MPIJob backend ------------------------------------------------------------------------------


def test_mpijob_evidence_with_worker_workloads_is_accepted() -> None:
    run = make_run(backend="MPIJob")
    document = mpi_evidence(run)
    outcome = assess(run, document, reported=eb.digest_of(document))
    assert (outcome.verdict, outcome.problem) == (Verdict.PASS, None)
    assert outcome.participant_verdicts == {0: Verdict.PASS, 1: Verdict.PASS}


@pytest.mark.parametrize(
    ("launchers", "proven"),
    [
        pytest.param([NODES[0]], True, id="on participant 0's Node"),
        pytest.param([NODES[1]], True, id="on participant 1's Node"),
        pytest.param([None], True, id="on no Node"),
        pytest.param([], True, id="no launcher"),
        pytest.param([LAUNCHER_NODE, "system-1"], True, id="two launchers"),
        pytest.param([NODES[0]], False, id="on a participant's Node, nothing proven: nothing to refuse"),
    ],
)
def test_a_crossnode_verdict_counts_only_from_one_launcher_off_the_participants(
    launchers: list[str | None], proven: bool
) -> None:
    """The controller's own check of what the adapter enforces (adapter/collect.py): one
    participant's Node must not speak for the others."""
    run = make_run(backend="MPIJob")
    doc = plain(mpi_evidence(run, verdicts=None if proven else {0: "Inconclusive", 1: "Inconclusive"}))
    kept = [w for w in doc["results"]["workloads"] if w["role"] != "launcher"]
    doc["results"]["workloads"] = kept + [
        {"kind": "Pod", "name": f"r1-c0-launcher-{i}", "uid": f"launcher-{i}", "nodeName": node, "role": "launcher"}
        if node
        else {"kind": "Pod", "name": f"r1-c0-launcher-{i}", "uid": f"launcher-{i}", "role": "launcher"}
        for i, node in enumerate(launchers)
    ]
    doc["cleanup"]["deleted"] = copy.deepcopy(doc["results"]["workloads"])
    verdict, problem, _ = validate_check(run, 0, eb.seal(doc))
    if proven:
        assert verdict == Verdict.INCONCLUSIVE
        assert problem is not None
        assert problem.startswith("IdentityCoverage: the verdicts are not from one launcher"), problem
    else:
        assert problem is None, problem


def test_mpijob_fail_is_a_valid_fail() -> None:
    run = make_run(backend="MPIJob")
    assert validate_check(run, 0, mpi_evidence(run, verdicts={0: "Fail"}))[:2] == (Verdict.FAIL, None)


def test_mpijob_evidence_with_participant_role_workloads_is_not_covered() -> None:
    """An MPIJob check's participants must be served by workers, not by plain Pods."""
    run = make_run(backend="MPIJob")
    document = plain(eb.check_evidence(run))  # Pod-shaped workloads (role participant)
    verdict, problem, _ = validate_check(run, 0, eb.seal(document))
    assert verdict == Verdict.INCONCLUSIVE
    assert problem is not None
    assert problem.startswith("IdentityCoverage:")


def test_pod_evidence_with_worker_role_workloads_is_not_covered() -> None:
    run = make_run(backend="Pod")
    doc = plain(eb.check_evidence(run))
    for w in doc["results"]["workloads"]:
        w["role"] = "worker"
    verdict, problem, _ = validate_check(run, 0, eb.seal(doc))
    assert verdict == Verdict.INCONCLUSIVE
    assert problem is not None
    assert problem.startswith("IdentityCoverage:")


def pernode_evidence(run: Obj, verdicts: dict[int, str] | None = None, launcher_nodes: list[int] | None = None) -> Obj:
    """Valid perNode evidence: per participant an MPIJob, its worker and its own launcher."""
    doc = plain(mpi_evidence(run, verdicts=verdicts))
    workloads = [w for w in doc["results"]["workloads"] if w["role"] == "worker"]
    for w in workloads:
        w["owners"] = eb.mpi_chain(run, f"mpijob-uid-{w['participantIndex']}")
    for i, node in enumerate(launcher_nodes if launcher_nodes is not None else range(len(NODES))):
        workloads += [
            {
                "kind": "Pod",
                "name": f"r1-c0-p{i}-launcher",
                "uid": f"launcher-uid-{i}",
                "nodeName": NODES[node],
                "participantIndex": i,
                "role": "launcher",
                "owners": eb.mpi_chain(run, f"mpijob-uid-{i}", launcher=True),
            },
            {
                "kind": "MPIJob",
                "name": f"r1-c0-p{i}",
                "uid": f"mpijob-uid-{i}",
                "participantIndex": i,
                "role": "mpijob",
                "owners": [eb.run_link(run)],
            },
        ]
    doc["results"]["workloads"] = workloads
    doc["cleanup"]["deleted"] = copy.deepcopy(workloads)
    return eb.seal(doc)


def test_pernode_evidence_with_a_launcher_per_participant_is_accepted() -> None:
    run = make_run(backend="MPIJob", scope="perNode")
    document = pernode_evidence(run, verdicts={1: "Fail"})
    assert validate_check(run, 0, document)[:2] == (Verdict.FAIL, None)
    assert validate_check(run, 0, pernode_evidence(run))[:2] == (Verdict.PASS, None)
    # The default scope is perNode: a check without mpi is judged the same way.
    del run["spec"]["checks"][0]["mpi"]
    assert validate_check(run, 0, pernode_evidence(run))[:2] == (Verdict.PASS, None)


@pytest.mark.parametrize(
    ("document", "participant"),
    [
        pytest.param(mpi_evidence, 0, id="one crossNode launcher for a perNode check"),
        pytest.param(lambda run: pernode_evidence(run, launcher_nodes=[0, 0]), 1, id="a launcher on another Node"),
    ],
)
def test_pernode_verdicts_must_come_from_each_participants_own_launcher(document: Any, participant: int) -> None:
    run = make_run(backend="MPIJob", scope="perNode")
    verdict, problem, _ = validate_check(run, 0, document(run))
    assert verdict == Verdict.INCONCLUSIVE
    assert problem == f"IdentityCoverage: participant {participant}'s verdict is not from one launcher on its own Node"


def test_mpijob_worker_on_another_node_is_not_covered() -> None:
    run = make_run(backend="MPIJob")
    doc = plain(mpi_evidence(run))
    doc["results"]["workloads"][1]["nodeName"] = NODES[0]
    verdict, problem, _ = validate_check(run, 0, eb.seal(doc))
    assert verdict == Verdict.INCONCLUSIVE
    assert problem == "IdentityCoverage: participant 1 not served exactly once on its Node"


# -- cleanup -------------------------------------------------------------------------------------


def _cleanup_failed(document: Obj) -> Obj:
    doc = plain(document)
    doc["cleanup"].update(state="Failed", message="Pod r1-c0-p1 still exists")
    doc["cleanup"]["retained"] = [doc["cleanup"]["deleted"].pop()]
    doc["verdict"] = "Inconclusive"
    return doc


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ({}, {0: Verdict.PASS, 1: Verdict.PASS}),
        ({0: "Fail"}, {0: Verdict.FAIL, 1: Verdict.PASS}),
    ],
)
def test_cleanup_failed_is_cleanup_failed_inconclusive(verdicts: dict[int, str], expected: dict[int, Verdict]) -> None:
    run = make_run()
    document = _cleanup_failed(eb.check_evidence(run, verdicts=verdicts))
    outcome = assess(run, document, reported=eb.digest_of(document))
    assert outcome.verdict == Verdict.INCONCLUSIVE
    assert outcome.problem == "CleanupFailed: Pod r1-c0-p1 still exists"
    assert outcome.participant_verdicts == expected
    assert outcome.digest == eb.digest_of(document)


def test_cleanup_failed_problem_is_bounded() -> None:
    run = make_run()
    doc = _cleanup_failed(eb.check_evidence(run))
    doc["cleanup"]["message"] = "x" * 1024
    _, problem, _ = validate_check(run, 0, doc)
    assert problem is not None
    assert problem.startswith("CleanupFailed: ")
    assert len(problem) == 300


# -- further hand-made inconsistencies ------------------------------------------------------------


def _results_edit(edit: Callable[[Obj], None]) -> Callable[[Obj], Obj]:
    def apply(doc: Obj) -> Obj:
        doc = plain(doc)
        edit(doc["results"])
        return eb.seal(doc)

    return apply


def _top_edit(edit: Callable[[Obj], None]) -> Callable[[Obj], Obj]:
    def apply(doc: Obj) -> Obj:
        doc = plain(doc)
        edit(doc)
        return doc

    return apply


def _two_workloads_for_p0(results: Obj) -> None:
    extra = copy.deepcopy(results["workloads"][0])
    extra.update(name="second", uid="second-uid")
    results["workloads"].append(extra)


EXTRA_CASES: dict[str, tuple[Callable[[Obj], Obj], str]] = {
    "other-namespace": (_results_edit(lambda r: r["run"].update(namespace="elsewhere")), "ForeignEvidence"),
    "results-verdict-inconclusive-over-passes": (
        _results_edit(lambda r: r.update(verdict="Inconclusive")),
        "InconsistentEvidence",
    ),
    "final-verdict-fail-over-pass": (_top_edit(lambda d: d.update(verdict="Fail")), "InconsistentEvidence"),
    "final-verdict-inconclusive-over-pass": (
        _top_edit(lambda d: d.update(verdict="Inconclusive")),
        "InconsistentEvidence",
    ),
    "participant-served-twice": (_results_edit(_two_workloads_for_p0), "IdentityCoverage"),
    "participant-index-shifted": (
        _results_edit(lambda r: r["participants"][1].update(index=2)),
        "ExtraParticipant",
    ),
    "check-index-out-of-range": (_results_edit(lambda r: r["check"].update(index=99)), "MalformedEvidence"),
    "bad-verdict-word": (_results_edit(lambda r: r["participants"][0].update(verdict="Passed")), "MalformedEvidence"),
    "unknown-workload-role": (_results_edit(lambda r: r["workloads"][0].update(role="sidecar")), "MalformedEvidence"),
    "reason-too-long": (_top_edit(lambda d: d.update(reason="r" * 513)), "MalformedEvidence"),
    "results-digest-not-a-digest": (_top_edit(lambda d: d.update(resultsDigest="md5:0")), "MalformedEvidence"),
    "cleanup-state-unknown": (_top_edit(lambda d: d["cleanup"].update(state="Maybe")), "MalformedEvidence"),
    "no-participants": (_results_edit(lambda r: r.update(participants=[])), "IncompleteEvidence"),
}


@pytest.mark.parametrize("case", sorted(EXTRA_CASES))
def test_extra_inconsistencies_are_never_pass(case: str) -> None:
    run = make_run()
    mutate, prefix = EXTRA_CASES[case]
    bad = mutate(eb.check_evidence(run))
    outcome = assess(run, bad, reported=eb.digest_of(bad))
    assert outcome.verdict == Verdict.INCONCLUSIVE
    assert outcome.problem is not None
    assert outcome.problem.split(":", 1)[0] == prefix, outcome.problem


def test_malformed_problem_names_the_field() -> None:
    run = make_run()
    doc = plain(eb.check_evidence(run))
    del doc["results"]["participants"][0]["nodeName"]
    _, problem, _ = validate_check(run, 0, doc)
    assert problem is not None
    assert problem.startswith("MalformedEvidence: results.participants.0.nodeName:")


# -- decide() -------------------------------------------------------------------------------------

TWO_CHECKS = make_run(checks=2)


def passed(index: int) -> CheckOutcome:
    return assess(TWO_CHECKS, eb.check_evidence(TWO_CHECKS, index), index)


def failed(index: int, participant: int = 1) -> CheckOutcome:
    return assess(TWO_CHECKS, eb.check_evidence(TWO_CHECKS, index, {participant: "Fail"}), index)


def missing(index: int) -> CheckOutcome:
    return assess(TWO_CHECKS, None, index)


def unsure(index: int) -> CheckOutcome:
    """Valid Inconclusive evidence (participant 1 inconclusive, no problem)."""
    return assess(TWO_CHECKS, eb.check_evidence(TWO_CHECKS, index, {1: "Inconclusive"}), index)


def unsure0(index: int) -> CheckOutcome:
    """Valid Inconclusive evidence (participant 0 inconclusive, no problem)."""
    return assess(TWO_CHECKS, eb.check_evidence(TWO_CHECKS, index, {0: "Inconclusive"}), index)


def cleanup_failed_fail(index: int) -> CheckOutcome:
    """A Fail that could not be proven clean: CleanupFailed, per-participant verdicts kept."""
    return assess(TWO_CHECKS, _cleanup_failed(eb.check_evidence(TWO_CHECKS, index, {0: "Fail"})), index)


def forged_fail(index: int) -> CheckOutcome:
    """An outcome saying Fail with a problem: not valid, so it proves nothing."""
    return CheckOutcome(index, f"c{index}", Verdict.FAIL, "ForeignEvidence: x", None, None, {0: Verdict.FAIL})


SAME = {"gpu-000": "uid-0", "gpu-001": "uid-1"}
REPLACED = {"gpu-000": "uid-0", "gpu-001": "uid-1-new"}
DELETED = {"gpu-000": "uid-0", "gpu-001": None}
ABSENT = {"gpu-000": "uid-0"}
P, F, I = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE  # noqa: E741

DECIDE_CASES = [
    # id, outcomes, node uids, workflow phase, deadline, phase, reason, node verdicts
    ("all-pass", [passed, passed], SAME, "Succeeded", False, Phase.SUCCEEDED, "AllChecksPassed", {0: P, 1: P}),
    (
        "workflow-failed",
        [passed, passed],
        SAME,
        "Failed",
        False,
        Phase.INCONCLUSIVE,
        "WorkflowNotSucceeded",
        {0: I, 1: I},
    ),
    (
        "workflow-error",
        [passed, passed],
        SAME,
        "Error",
        False,
        Phase.INCONCLUSIVE,
        "WorkflowNotSucceeded",
        {0: I, 1: I},
    ),
    ("workflow-missing", [passed, passed], SAME, None, False, Phase.INCONCLUSIVE, "WorkflowNotSucceeded", {0: I, 1: I}),
    (
        "workflow-running",
        [passed, passed],
        SAME,
        "Running",
        False,
        Phase.INCONCLUSIVE,
        "WorkflowNotSucceeded",
        {0: I, 1: I},
    ),
    ("fail-then-missing", [failed, missing], SAME, "Failed", False, Phase.FAILED, "CheckFailed", {0: I, 1: F}),
    (
        "pass-then-fail",
        [passed, lambda i: failed(i, 0)],
        SAME,
        "Failed",
        False,
        Phase.FAILED,
        "CheckFailed",
        {0: F, 1: P},
    ),
    ("fail-after-deadline", [failed, missing], SAME, "Failed", True, Phase.FAILED, "CheckFailed", {0: I, 1: F}),
    (
        "fail-with-workflow-succeeded",
        [failed, passed],
        SAME,
        "Succeeded",
        False,
        Phase.FAILED,
        "CheckFailed",
        {0: P, 1: F},
    ),
    (
        "fail-all-valid-after-deadline",
        [failed, passed],
        SAME,
        "Failed",
        True,
        Phase.FAILED,
        "CheckFailed",
        {0: P, 1: F},
    ),
    (
        "fail-and-replaced-node",
        [lambda i: failed(i, 0), passed],
        REPLACED,
        "Succeeded",
        False,
        Phase.FAILED,
        "CheckFailed",
        {0: F},
    ),
    ("fail-on-replaced-node", [failed, passed], REPLACED, "Succeeded", False, Phase.FAILED, "CheckFailed", {0: P}),
    ("fail-and-unsure", [unsure, failed], SAME, "Failed", False, Phase.FAILED, "CheckFailed", {0: P, 1: F}),
    ("fail-and-own-unsure", [unsure0, failed], SAME, "Failed", False, Phase.FAILED, "CheckFailed", {0: I, 1: F}),
    (
        "fail-and-cleanup-failed",
        [failed, cleanup_failed_fail],
        SAME,
        "Failed",
        False,
        Phase.FAILED,
        "CheckFailed",
        {0: I, 1: F},
    ),
    ("fail-and-forged-fail", [failed, forged_fail], SAME, "Failed", False, Phase.FAILED, "CheckFailed", {0: I, 1: F}),
    ("both-fail", [lambda i: failed(i, 0), failed], SAME, "Failed", False, Phase.FAILED, "CheckFailed", {0: F, 1: F}),
    ("node-replaced", [passed, passed], REPLACED, "Succeeded", False, Phase.INCONCLUSIVE, "NodeReplaced", {0: I}),
    ("node-deleted", [passed, passed], DELETED, "Succeeded", False, Phase.INCONCLUSIVE, "NodeReplaced", {0: I}),
    ("node-not-looked-up", [passed, passed], ABSENT, "Succeeded", False, Phase.INCONCLUSIVE, "NodeReplaced", {0: I}),
    ("replaced-beats-deadline", [passed, passed], REPLACED, "Failed", True, Phase.INCONCLUSIVE, "NodeReplaced", {0: I}),
    ("deadline", [passed, passed], SAME, "Succeeded", True, Phase.INCONCLUSIVE, "SuiteDeadlineExceeded", {0: I, 1: I}),
    (
        "deadline-beats-problem",
        [passed, missing],
        SAME,
        "Failed",
        True,
        Phase.INCONCLUSIVE,
        "SuiteDeadlineExceeded",
        {0: I, 1: I},
    ),
    (
        "missing-later-check",
        [passed, missing],
        SAME,
        "Succeeded",
        False,
        Phase.INCONCLUSIVE,
        "MissingEvidence",
        {0: I, 1: I},
    ),
    (
        "missing-first-check",
        [missing, passed],
        SAME,
        "Failed",
        False,
        Phase.INCONCLUSIVE,
        "MissingEvidence",
        {0: I, 1: I},
    ),
    (
        "valid-inconclusive",
        [passed, unsure],
        SAME,
        "Succeeded",
        False,
        Phase.INCONCLUSIVE,
        "Inconclusive",
        {0: I, 1: I},
    ),
    (
        "cleanup-failed-fail",
        [cleanup_failed_fail, passed],
        SAME,
        "Failed",
        False,
        Phase.INCONCLUSIVE,
        "CleanupFailed",
        {0: I, 1: I},
    ),
    (
        "forged-fail-proves-nothing",
        [forged_fail, passed],
        SAME,
        "Succeeded",
        False,
        Phase.INCONCLUSIVE,
        "ForeignEvidence",
        {0: I, 1: I},
    ),
]


@pytest.mark.parametrize(
    ("outcomes", "uids", "workflow_phase", "late", "phase", "reason", "nodes"),
    [pytest.param(*case[1:], id=case[0]) for case in DECIDE_CASES],
)
def test_decide(
    outcomes: list[Callable[[int], CheckOutcome]],
    uids: dict[str, str | None],
    workflow_phase: str | None,
    late: bool,
    phase: Phase,
    reason: str,
    nodes: dict[int, Verdict],
) -> None:
    checks = [make(i) for i, make in enumerate(outcomes)]
    decision = decide(TWO_CHECKS, checks, node_uids=uids, workflow_phase=workflow_phase, deadline_passed=late)
    assert (decision.phase, decision.reason) == (phase, reason), decision.message
    assert decision.node_verdicts == {NODES[i]: v for i, v in nodes.items()}
    assert decision.checks == checks
    assert len(decision.message) <= 1000


def test_node_verdict_rules_hold_across_the_table() -> None:
    """Across every case of the table: Fail exactly where a valid check says the Node failed;
    Pass only in a Succeeded Run, or in a Failed Run where every check is valid and says the
    Node passed; never Pass in an Inconclusive Run; never a replaced Node."""
    for _, outcomes, uids, wf, late, *_ in DECIDE_CASES:
        checks = [make(i) for i, make in enumerate(outcomes)]
        decision = decide(TWO_CHECKS, checks, node_uids=uids, workflow_phase=wf, deadline_passed=late)
        valid = [c for c in checks if c.problem is None]
        for index, node in enumerate(NODES):
            if uids.get(node) != f"uid-{index}":
                assert node not in decision.node_verdicts
                continue
            own = [c.participant_verdicts[index] for c in valid]
            verdict = decision.node_verdicts[node]
            assert (verdict == F) == (F in own)
            if verdict == P:
                assert decision.phase in {Phase.SUCCEEDED, Phase.FAILED}
                assert len(valid) == len(checks)
                assert all(v == P for v in own)
        if any(c.problem for c in checks) or late or wf != "Succeeded" or uids != SAME:
            assert decision.phase != Phase.SUCCEEDED
        if decision.phase == Phase.INCONCLUSIVE:
            assert P not in decision.node_verdicts.values()


def test_decide_messages() -> None:
    both = [passed(0), passed(1)]
    assert decide(TWO_CHECKS, both, node_uids=SAME, workflow_phase="Succeeded", deadline_passed=False).message == (
        "all 2 check(s) passed"
    )
    assert "missing" in decide(TWO_CHECKS, both, node_uids=SAME, workflow_phase=None, deadline_passed=False).message
    assert "600s" in decide(TWO_CHECKS, both, node_uids=SAME, workflow_phase="Succeeded", deadline_passed=True).message
    replaced = decide(TWO_CHECKS, both, node_uids=REPLACED, workflow_phase="Succeeded", deadline_passed=False)
    assert "gpu-001" in replaced.message
    assert "gpu-000" not in replaced.message
    first_fail = decide(
        TWO_CHECKS, [failed(0), failed(1)], node_uids=SAME, workflow_phase="Failed", deadline_passed=False
    )
    assert first_fail.message == "check 'inventory' proved a failure"
    problem = decide(TWO_CHECKS, [passed(0), missing(1)], node_uids=SAME, workflow_phase=None, deadline_passed=False)
    assert problem.message.startswith("check 'check-1': MissingEvidence: no ConfigMap r1-c1-evidence")


def test_decide_message_is_bounded() -> None:
    long = CheckOutcome(0, "c", Verdict.INCONCLUSIVE, "Odd: " + "x" * 5000, None, None, {})
    decision = decide(TWO_CHECKS, [long, passed(1)], node_uids=SAME, workflow_phase=None, deadline_passed=False)
    assert decision.reason == "Odd"
    assert len(decision.message) == 1000


def test_decide_uses_participant_index_not_list_order() -> None:
    run = copy.deepcopy(TWO_CHECKS)
    run["spec"]["participants"].reverse()
    checks = [failed(0, participant=0), passed(1)]
    decision = decide(run, checks, node_uids=SAME, workflow_phase="Failed", deadline_passed=False)
    assert decision.node_verdicts == {"gpu-000": F, "gpu-001": P}


@pytest.mark.parametrize("given", [[0], []], ids=["one-of-two", "none"])
def test_decide_with_fewer_outcomes_than_checks_is_not_succeeded(given: list[int]) -> None:
    decision = decide(
        TWO_CHECKS, [passed(i) for i in given], node_uids=SAME, workflow_phase="Succeeded", deadline_passed=False
    )
    assert decision.phase != Phase.SUCCEEDED
    assert Verdict.PASS not in decision.node_verdicts.values()


# -- run_document ---------------------------------------------------------------------------------


def _decision(phase_checks: list[CheckOutcome], **kw: Any) -> RunDecision:
    args: dict[str, Any] = {"node_uids": SAME, "workflow_phase": "Succeeded", "deadline_passed": False, **kw}
    return decide(TWO_CHECKS, phase_checks, **args)


def test_run_document_shape() -> None:
    checks = [passed(0), failed(1)]
    decision = _decision(checks)
    workflow = {"metadata": {"name": "r1", "uid": "wf"}, "status": {"phase": "Failed"}}
    document = run_document(TWO_CHECKS, decision, workflow=workflow, decided_at="2026-11-30T00:10:00Z")
    assert document == {
        "schema": RUN_EVIDENCE_SCHEMA,
        "run": {"namespace": "signal", "name": "r1", "uid": RUN_UID},
        "profile": TWO_CHECKS["spec"]["profile"],
        "sourceDigest": TWO_CHECKS["spec"]["source"]["digest"],
        "attempt": 1,
        "participants": [
            {"index": 0, "nodeName": "gpu-000", "nodeUID": "uid-0"},
            {"index": 1, "nodeName": "gpu-001", "nodeUID": "uid-1"},
        ],
        "workflow": {"name": "r1", "phase": "Failed"},
        "checks": [
            {
                "index": c.index,
                "name": c.name,
                "verdict": c.verdict.value,
                "problem": c.problem,
                "configMap": f"r1-c{c.index}-evidence",
                "digest": c.digest,
                "reportedDigest": c.reported_digest,
                "resultsConfigMap": (c.document or {}).get("resultsConfigMap"),
                "resultsDigest": (c.document or {}).get("resultsDigest"),
            }
            for c in checks
        ],
        "replacedNodes": [],
        "deadlinePassed": False,
        "nodes": {"gpu-000": "Pass", "gpu-001": "Fail"},
        "phase": "Failed",
        "reason": "CheckFailed",
        "message": "check 'check-1' proved a failure",
        "decidedAt": "2026-11-30T00:10:00Z",
    }
    assert RUN_EVIDENCE_SCHEMA == "projectsignal.dev/evidence/v2"


def test_run_document_names_each_checks_evidence_by_config_map_and_digest() -> None:
    """Issue 41: named, not embedded, with the results link the check evidence records."""
    docs = [eb.check_evidence(TWO_CHECKS, 0), eb.check_evidence(TWO_CHECKS, 1)]
    checks = [assess(TWO_CHECKS, d, i) for i, d in enumerate(docs)]
    document = run_document(TWO_CHECKS, _decision(checks), workflow=None, decided_at="t")
    for i, entry in enumerate(document["checks"]):
        assert "evidence" not in entry
        assert entry["configMap"] == f"r1-c{i}-evidence"
        assert entry["digest"] == eb.digest_of(docs[i])
        assert (entry["resultsConfigMap"], entry["resultsDigest"]) == (f"r1-c{i}-results", docs[i]["resultsDigest"])
        assert (entry["verdict"], entry["problem"]) == ("Pass", None)
    assert document["workflow"] == {"name": None, "phase": None}
    assert document["nodes"] == {"gpu-000": "Pass", "gpu-001": "Pass"}
    assert document["phase"] == "Succeeded"


def test_run_document_size_grows_with_the_checks_not_with_their_output() -> None:
    """64 participants, each with the largest stdout and stderr tails: the check evidence is
    large, the Run document names it and stays small (docs/reference.md, Evidence sizes)."""
    run = make_run(64, checks=32)
    quiet, loud = [], []
    for i in range(32):
        document = eb.check_evidence(run, i)
        quiet.append(assess(run, document, i))
        for p in document["results"]["participants"]:
            p["stdout"] = {"digest": "sha256:" + "1" * 64, "bytes": 10**9, "tail": f"{p['index']:04d}" * 256}
            p["stderr"] = {"digest": "sha256:" + "2" * 64, "bytes": 10**9, "tail": f"{p['index']:04d}" * 256}
        loud.append(assess(run, eb.seal(document), i))
        assert loud[-1].problem is None, loud[-1].problem
    uids = {p["nodeName"]: p["nodeUID"] for p in run["spec"]["participants"]}
    sizes = []
    for checks in (quiet, loud):
        decision = decide(run, checks, node_uids=uids, workflow_phase="Succeeded", deadline_passed=False)
        assert decision.phase == Phase.SUCCEEDED
        sizes.append(len(encode(run_document(run, decision, workflow=None, decided_at="t"))[0]))
    assert sizes[0] == sizes[1] < 40 * 1024, sizes


def test_run_document_records_missing_evidence_as_null() -> None:
    checks = [passed(0), missing(1)]
    document = run_document(TWO_CHECKS, _decision(checks), workflow=None, decided_at="t")
    assert document["checks"][1] == {
        "index": 1,
        "name": "check-1",
        "verdict": "Inconclusive",
        "problem": "MissingEvidence: no ConfigMap r1-c1-evidence (the check did not finish)",
        "configMap": "r1-c1-evidence",
        "digest": None,
        "reportedDigest": None,
        "resultsConfigMap": None,
        "resultsDigest": None,
    }


def test_run_document_is_canonical_encodable_and_round_trips() -> None:
    checks = [passed(0), failed(1)]
    document = run_document(TWO_CHECKS, _decision(checks), workflow=None, decided_at="t")
    payload, digest, compressed = encode(document)
    cm = {"metadata": {"name": "r1-evidence"}, "immutable": True}
    cm["binaryData"] = {EVIDENCE_KEY: base64.b64encode(compressed).decode()}
    assert decode_document(cm, RUN_EVIDENCE_SCHEMA) == (document, digest)
    assert json.loads(payload) == document


def test_run_document_orders_participants_and_nodes() -> None:
    run = make_run(3, checks=2)
    run["spec"]["participants"].reverse()
    run["spec"]["attempt"] = 3
    uids = {f"gpu-{i:03d}": f"uid-{i}" for i in range(3)}
    checks = [
        assess(run, eb.check_evidence(run, 0, {2: "Fail"}), 0),
        assess(run, eb.check_evidence(run, 1), 1),
    ]
    decision = decide(run, checks, node_uids=uids, workflow_phase="Failed", deadline_passed=False)
    document = run_document(run, decision, workflow=None, decided_at="t")
    assert [p["index"] for p in document["participants"]] == [0, 1, 2]
    assert list(document["nodes"]) == ["gpu-000", "gpu-001", "gpu-002"]
    assert document["nodes"]["gpu-002"] == "Fail"
    assert document["attempt"] == 3


def test_run_document_attempt_defaults_to_one() -> None:
    run = copy.deepcopy(TWO_CHECKS)
    del run["spec"]["attempt"]
    decision = decide(run, [passed(0), passed(1)], node_uids=SAME, workflow_phase="Succeeded", deadline_passed=False)
    assert run_document(run, decision, workflow=None, decided_at="t")["attempt"] == 1


def test_run_document_omits_replaced_nodes() -> None:
    decision = _decision([passed(0), passed(1)], node_uids=REPLACED)
    document = run_document(TWO_CHECKS, decision, workflow=None, decided_at="t")
    assert document["nodes"] == {"gpu-000": "Inconclusive"}
    assert [p["nodeName"] for p in document["participants"]] == NODES
    assert (document["phase"], document["reason"]) == ("Inconclusive", "NodeReplaced")


def test_evidence_not_owned_by_the_run_is_foreign() -> None:
    run = make_run()
    document = eb.check_evidence(run)
    stranger = {"metadata": {"name": "other", "uid": "someone-else"}}
    outcome = assess(run, document, owner=stranger)
    assert outcome.verdict == Verdict.INCONCLUSIVE
    assert (outcome.problem or "").startswith("ForeignEvidence: ConfigMap r1-c0-evidence is not owned by this Run")
    assert assess(run, document).problem is None
