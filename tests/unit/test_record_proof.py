"""controller/reconcile/recordproof.py (issue 42, H-A), table-tested on the pure rules: a certified-record
entry counts only when the Run evidence it cites, re-derived from the check evidence it names,
gives that Node (that uid) that verdict."""

import copy
import uuid
from typing import Any

import pytest

from controller.reconcile.recordproof import derive_proof, entry_problem
from controller.rules.manifests import owner_reference
from shared import keys
from shared.acceptance import CheckInput, assess_check, decide, run_document
from shared.evidence import config_map
from tests import evidence_builders as eb
from tests.run_builders import run_body

Obj = dict[str, Any]


def _recorded() -> tuple[Obj, Obj, str, dict[int, Obj | None]]:
    """A Failed Run (n0 failed, n1 passed): the Run, its evidence ConfigMap and digest, its checks."""
    nodes = [{"metadata": {"name": f"n{i}", "uid": f"uid-{i}"}} for i in range(2)]
    run = run_body("ns", nodes, "p")
    run["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=eb.STAMP)
    name = keys.check_evidence_name(run["metadata"]["name"], 0)
    check = eb.config_map(name, eb.check_evidence(run, verdicts={0: "Fail"}))
    outcome = assess_check(run, CheckInput(0, name, check, None))
    uids = {p["nodeName"]: p["nodeUID"] for p in run["spec"]["participants"]}
    decision = decide(run, [outcome], node_uids=uids, workflow_phase="Succeeded", deadline_passed=False)
    document = run_document(run, decision, workflow={"status": {"phase": "Succeeded"}}, decided_at=eb.STAMP)
    body, digest, _ = config_map(
        name="r-evidence", namespace="ns", owner=owner_reference(run), labels={}, document=document
    )
    return run, body, digest, {0: check}


def _entry(run: Obj, digest: str, node: str, verdict: str) -> dict[str, str]:
    return {
        "verdict": verdict,
        "run": run["metadata"]["name"],
        "namespace": "ns",
        "runUID": run["metadata"]["uid"],
        "runCreated": eb.STAMP,
        "completionTime": eb.STAMP,
        "evidenceDigest": digest,
        "sourceDigest": run["spec"]["source"]["digest"],
        "profileGeneration": "1",
        "nodeUID": f"uid-{node[1:]}",
    }


def test_the_genuine_entries_are_proven() -> None:
    run, body, digest, checks = _recorded()
    proof = derive_proof(run, body, run["metadata"]["uid"], digest, checks)
    assert proof.problem is None
    assert proof.verdicts == {"n0": ("uid-0", "Fail"), "n1": ("uid-1", "Pass")}
    assert entry_problem(_entry(run, digest, "n1", "Pass"), "n1", proof) is None
    assert entry_problem(_entry(run, digest, "n0", "Fail"), "n0", proof) is None


def test_a_pass_the_evidence_does_not_give_is_unproven() -> None:
    run, body, digest, checks = _recorded()
    proof = derive_proof(run, body, run["metadata"]["uid"], digest, checks)
    problem = entry_problem(_entry(run, digest, "n0", "Pass"), "n0", proof)
    assert problem == "the Run evidence gives Node n0 Fail, the record says Pass"
    other_uid = {**_entry(run, digest, "n1", "Pass"), "nodeUID": "uid-replaced"}
    assert "no verdict for Node n1 with uid uid-replaced" in str(entry_problem(other_uid, "n1", proof))
    assert "no verdict for Node n9" in str(entry_problem(_entry(run, digest, "n9", "Pass"), "n9", proof))


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("completionTime", "2999-01-01T00:00:00Z", "is not at or before the decision"),
        ("completionTime", "soon", "is not at or before the decision"),
        ("runCreated", "2999-01-01T00:00:00Z", "runCreated"),
        ("sourceDigest", "sha256:" + "9" * 64, "sourceDigest"),
        ("profileGeneration", "7", "profileGeneration"),
    ],
)
def test_an_entry_whose_other_fields_are_not_the_runs_is_unproven(key: str, value: str, why: str) -> None:
    """E.g. a far-future completion time that would put off recurrence for ever."""
    run, body, digest, checks = _recorded()
    proof = derive_proof(run, body, run["metadata"]["uid"], digest, checks)
    entry = {**_entry(run, digest, "n1", "Pass"), key: value}
    assert why in str(entry_problem(entry, "n1", proof))


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("evidence-gone", "the Run evidence ConfigMap is gone"),
        ("evidence-not-the-runs", "is not owned by Run uid"),
        ("another-digest", "the record cites sha256:0000"),
        ("run-gone", "no longer exists"),
        ("run-replaced", "no longer exists"),
        ("check-evidence-gone", "does not re-derive"),
        ("check-evidence-replaced", "does not re-derive"),
    ],
)
def test_nothing_is_proven_from_evidence_that_does_not_hold(case: str, why: str) -> None:
    run, body, digest, checks = _recorded()
    uid = run["metadata"]["uid"]
    given: Obj | None = run
    cited = digest
    if case == "evidence-gone":
        body = None  # type: ignore[assignment]
    elif case == "evidence-not-the-runs":
        body = copy.deepcopy(body)
        body["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    elif case == "another-digest":
        cited = "sha256:" + "0" * 64
    elif case == "run-gone":
        given = None
    elif case == "run-replaced":
        given = copy.deepcopy(run)
        given["metadata"]["uid"] = "new"
    elif case == "check-evidence-gone":
        checks = {0: None}
    elif case == "check-evidence-replaced":
        name = keys.check_evidence_name(run["metadata"]["name"], 0)
        checks = {0: eb.config_map(name, eb.check_evidence(run))}  # all pass: not what was decided
    proof = derive_proof(given, body, uid, cited, checks)
    assert proof.problem is not None
    assert why in proof.problem, proof.problem
    assert proof.verdicts == {}
    assert entry_problem(_entry(run, digest, "n1", "Pass"), "n1", proof) == proof.problem
