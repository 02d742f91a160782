"""The chaos checker's independent re-derivation (tests/chaos/rederive.py): table-tested on the
recorded evidence of tests/unit/test_signalctl_verify.py, untouched and mutated, always against
``signalctl evidence verify`` (both must give the same answer); the checker catches a bug in the
shared acceptance rules that the shared verification cannot see; and the campaign's report says
what it counted (records x invariants)."""

import ast
import base64
import copy
import dataclasses
import gzip
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shared.acceptance
import signalctl.verify
from shared.evidence import CHECK_EVIDENCE_SCHEMA, RESULTS_SCHEMA, config_map, decode_document
from shared.run import Verdict
from tests import evidence_builders as eb
from tests.chaos import passproof, rederive
from tests.chaos.campaign import Report
from tests.chaos.checker import check
from tests.chaos.test_checker import RULES, certified, only, violations
from tests.unit import test_signalctl_verify as recorded_fixtures
from tests.unit.test_signalctl_verify import OWNER, Recorded, make_run, passing

Obj = dict[str, Any]
Mutant = Callable[[Recorded], None]


def by_name(rec: Recorded) -> dict[str, Obj]:
    found = {"r1-evidence": rec.run_cm}
    for kind, cms in (("evidence", rec.check_cms), ("results", rec.results_cms)):
        found.update({f"r1-c{i}-{kind}": cm for i, cm in cms.items() if cm is not None})
    return found


def both(rec: Recorded, node: str) -> tuple[str | None, str | None]:
    """(the re-derivation's answer, the shared verification's answer)."""
    keyed = {("ConfigMap", "ns", name): cm for name, cm in by_name(rec).items()}
    return rederive.why_not_pass(rec.run, by_name(rec), node), passproof.verify_shared(rec.run, keyed, node)


# --- mutations: the stored bytes, or a careful forger who re-seals every digest after a change ---


def _payload(cm: Obj) -> bytes:
    return gzip.decompress(base64.b64decode(cm["binaryData"]["evidence.json.gz"]))


def _store(cm: Obj, payload: bytes) -> None:
    cm["binaryData"]["evidence.json.gz"] = base64.b64encode(gzip.compress(payload, mtime=0)).decode()


def flip(which: str) -> Mutant:
    """One byte of a stored document changed ("test" -> "tesT" in a reason), nothing re-sealed."""

    def mutate(rec: Recorded) -> None:
        cm = rec.run_cm if which == "run" else (rec.check_cms if which == "evidence" else rec.results_cms)[0]
        assert cm is not None
        payload = _payload(cm)
        target = b'"message":"all 2 check(s) passed"' if which == "run" else b'"reason":"test"'
        assert target in payload
        _store(cm, payload.replace(target, target[:-2] + target[-2:].upper(), 1))

    return mutate


def resign(rec: Recorded) -> None:
    rec.run_cm, digest, size = config_map(
        name="r1-evidence", namespace="ns", owner=OWNER, labels={}, document=rec.document
    )
    rec.run["status"]["evidence"] = {"configMap": "r1-evidence", "digest": digest, "bytes": size}


def forge(check: int, change: Callable[[Obj], None], *, seal: bool = True) -> Mutant:
    """Check ``check``'s evidence document changed and every digest up to the Run re-sealed."""

    def mutate(rec: Recorded) -> None:
        cm = rec.check_cms[check]
        assert cm is not None
        document, _ = decode_document(cm, CHECK_EVIDENCE_SCHEMA)
        change(document)
        document = eb.seal(document) if seal else document
        rec.check_cms[check] = eb.config_map(f"r1-c{check}-evidence", document)
        rec.results_cms[check] = eb.config_map(f"r1-c{check}-results", document["results"])
        entry = rec.document["checks"][check]
        entry.update(digest=eb.digest_of(document), resultsDigest=document["resultsDigest"])
        resign(rec)

    return mutate


def drop_participant(doc: Obj) -> None:
    doc["results"]["participants"] = doc["results"]["participants"][:1]


def inconclusive_participant(doc: Obj) -> None:
    doc["results"]["participants"][1]["verdict"] = "Inconclusive"


def other_node_uid(doc: Obj) -> None:
    doc["results"]["participants"][1]["nodeUid"] = "uid-of-another-n1"


def cleanup_failed(doc: Obj) -> None:
    doc["cleanup"]["state"] = "Failed"


def wrong_results_digest(doc: Obj) -> None:
    doc["resultsDigest"] = eb.digest_of({"other": "results"})


def edit(change: Callable[[Recorded], None]) -> Mutant:
    return change


def drop_check_cm(rec: Recorded) -> None:
    rec.check_cms[1] = None


def drop_results_cm(rec: Recorded) -> None:
    rec.results_cms[1] = None


def drop_check_entry(rec: Recorded) -> None:
    rec.document["checks"] = rec.document["checks"][:1]
    resign(rec)


def wrong_entry_digest(rec: Recorded) -> None:
    rec.document["checks"][1]["digest"] = rec.document["checks"][0]["digest"]
    resign(rec)


def wrong_status_digest(rec: Recorded) -> None:
    rec.run["status"]["evidence"]["digest"] = eb.digest_of({"other": "run"})


def mutable(rec: Recorded) -> None:
    assert rec.check_cms[0] is not None
    del rec.check_cms[0]["immutable"]


def foreign_owner(rec: Recorded) -> None:
    assert rec.check_cms[0] is not None
    rec.check_cms[0]["metadata"]["ownerReferences"][0]["uid"] = "another-run"


def not_canonical(rec: Recorded) -> None:
    assert rec.check_cms[0] is not None
    payload = _payload(rec.check_cms[0])
    _store(rec.check_cms[0], json.dumps(json.loads(payload), indent=1, sort_keys=True).encode())


def other_schema(rec: Recorded) -> None:
    assert rec.results_cms[0] is not None
    document = json.loads(_payload(rec.results_cms[0]))
    rec.results_cms[0] = eb.config_map("r1-c0-results", {**document, "schema": RESULTS_SCHEMA + "x"})


def no_evidence(rec: Recorded) -> None:
    rec.run["status"].pop("evidence")


def unchanged(rec: Recorded) -> None:
    pass


CASES: dict[str, tuple[Mutant, str, str | None]] = {
    # case: (mutation, Node asked about, what the re-derivation says; None: Pass)
    "untouched n0": (unchanged, "n0", None),
    "untouched n1": (unchanged, "n1", None),
    "a tampered byte in the Run evidence": (flip("run"), "n0", "status.evidence.digest is"),
    "a tampered byte in a check's evidence": (flip("evidence"), "n0", "r1-c0-evidence holds sha256:"),
    "a tampered byte in a check's results": (flip("results"), "n0", "r1-c0-results holds sha256:"),
    "a missing participant (re-sealed)": (forge(0, drop_participant), "n0", "no result for participant(s) [1]"),
    "a missing check evidence ConfigMap": (drop_check_cm, "n0", "ConfigMap r1-c1-evidence is absent"),
    "a missing check results ConfigMap": (drop_results_cm, "n0", "ConfigMap r1-c1-results is absent"),
    "a missing check in the Run evidence": (drop_check_entry, "n0", "records 1 checks, the Run has 2"),
    "a non-Pass verdict for the Node": (forge(1, inconclusive_participant), "n1", "not all Pass"),
    "a non-Pass verdict for another": (forge(1, inconclusive_participant), "n0", "the decision is Succeeded but"),
    "a participant on another Node uid": (forge(1, other_node_uid), "n0", "names another Node"),
    "an incomplete cleanup": (forge(1, cleanup_failed), "n0", "cleanup did not complete"),
    "a wrong check digest in the Run evidence": (wrong_entry_digest, "n0", "the Run evidence names sha256:"),
    "a wrong Run evidence digest in the status": (wrong_status_digest, "n0", "status.evidence.digest is"),
    "a wrong results digest": (forge(0, wrong_results_digest, seal=False), "n0", "do not hash to resultsDigest"),
    "a mutable ConfigMap": (mutable, "n0", "r1-c0-evidence is not immutable"),
    "another Run's ConfigMap": (foreign_owner, "n0", "not owned by Run uid run-uid"),
    "a non-canonical document": (not_canonical, "n0", "not a canonical JSON object"),
    "another schema": (other_schema, "n0", "schema 'projectsignal.dev/check-results/v1x'"),
    "no evidence yet": (no_evidence, "n0", "status.evidence names None"),
    "not a participant": (unchanged, "n9", "n9 is not a participant"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_rederivation_agrees_with_the_shared_verification(case: str) -> None:
    mutate, node, expected = CASES[case]
    rec = copy.deepcopy(passing())
    mutate(rec)
    own, shared = both(rec, node)
    if expected is None:
        assert own is None, own
    else:
        assert own is not None
        assert expected in own, own
    assert (shared is None) == (own is None), f"the shared verification says {shared!r}, the re-derivation {own!r}"


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ({1: "Fail"}, {"n0": None, "n1": "n1's verdicts in the checks are ['Fail', 'Pass']"}),
        ({1: "Inconclusive"}, {"n0": "the decision is 'Inconclusive'", "n1": "n1's verdicts"}),
    ],
)
def test_honest_negative_runs(verdicts: dict[int, str], expected: dict[str, str | None]) -> None:
    """A Run that failed through another Node still passes the Node that passed every check."""
    run = make_run()
    rec = Recorded(run, {0: eb.check_evidence(run, 0), 1: eb.check_evidence(run, 1, verdicts)})
    for node, fragment in expected.items():
        own, shared = both(rec, node)
        assert (own is None) if fragment is None else (own is not None and fragment in own), own
        assert (shared is None) == (own is None), (shared, own)


def test_a_bug_in_the_shared_rules_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared decision wrongly passes every participant (n1 failed check 1): the Run evidence
    records it, ``signalctl evidence verify`` (same rules) agrees, the re-derivation does not."""
    honest = shared.acceptance.decide

    def buggy(*args: Any, **kwargs: Any) -> shared.acceptance.RunDecision:
        decision = honest(*args, **kwargs)
        return dataclasses.replace(decision, node_verdicts=dict.fromkeys(decision.node_verdicts, Verdict.PASS))

    for module in (shared.acceptance, signalctl.verify, recorded_fixtures):
        monkeypatch.setattr(module, "decide", buggy)
    run = make_run()
    rec = Recorded(run, {0: eb.check_evidence(run, 0), 1: eb.check_evidence(run, 1, {1: "Fail"})})
    assert rec.document["nodes"] == {"n0": "Pass", "n1": "Pass"}
    assert [f for f in rec.verify() if f.state != "OK"] == []  # the shared verification is fooled
    only(
        violations(certified(rec)),
        3,
        "Node n1 projected Pass by Run run-uid: the shared rules (signalctl evidence verify) pass it, "
        "the independent re-derivation does not: n1's verdicts in the checks are ['Fail', 'Pass']",
    )


def test_without_the_rederivation_the_bug_would_hide(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same bug against a checker that asks only the shared verification: nothing found."""
    honest = shared.acceptance.decide

    def buggy(*args: Any, **kwargs: Any) -> shared.acceptance.RunDecision:
        decision = honest(*args, **kwargs)
        return dataclasses.replace(decision, node_verdicts=dict.fromkeys(decision.node_verdicts, Verdict.PASS))

    for module in (shared.acceptance, signalctl.verify, recorded_fixtures):
        monkeypatch.setattr(module, "decide", buggy)
    monkeypatch.setattr(passproof, "verify_own", lambda run, objects, node: None)
    run = make_run()
    rec = Recorded(run, {0: eb.check_evidence(run, 0), 1: eb.check_evidence(run, 1, {1: "Fail"})})
    assert violations(certified(rec)) == []


def test_the_rederivation_imports_none_of_the_shared_rules() -> None:
    tree = ast.parse(Path(rederive.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"base64", "binascii", "hashlib", "json", "zlib", "typing"}


def test_the_report_counts_records_times_invariants() -> None:
    """The campaign's report says what its figure is: records replayed x invariants, not checks."""
    rec = passing()
    found, tally = check(certified(rec).records, RULES)
    assert (found, tally.passes_verified, tally.invariants) == ([], 2, 7)
    report = Report(seed=1, faults=Counter(kill_leader=2), tally=tally, records=tally.records)
    lines = report.lines()
    assert lines[1] == (
        f"  checked: {tally.records} records x 7 invariants = {tally.records * 7} (records x invariants; "
        "not separate evaluations), 2 Pass projections verified twice (shared rules and re-derivation)"
    )
    assert "invariant checks" not in "\n".join(lines)
