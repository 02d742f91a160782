"""``signalctl evidence verify`` (signalctl/verify.py): the recorded decision is re-derived from
stored evidence. The records are made with the same shared code the controller uses
(assess_check, decide, run_document, config_map), as controller/reconcile/accept.py does, then tampered."""

import base64
import copy
from collections.abc import Callable
from typing import Any

import pytest

from shared.acceptance import CheckInput, assess_check, decide, run_document
from shared.digests import bundle_digest
from shared.evidence import DIGEST_ANNOTATION, config_map
from signalctl import verify
from tests import evidence_builders as eb

Obj = dict[str, Any]
OWNER = {"apiVersion": "projectsignal.dev/v1alpha1", "kind": "CertificationRun", "name": "r1", "uid": "run-uid"}


def make_run(checks: int = 2, participants: int = 2) -> Obj:
    return {
        "metadata": {"name": "r1", "namespace": "ns", "uid": "run-uid", "creationTimestamp": "2026-11-30T00:00:00Z"},
        "spec": {
            "profile": {"name": "gpu", "uid": "p-uid", "generation": 1},
            "checks": [
                {"name": f"check-{i}", "scriptKey": "s.sh", "backend": "Pod", "backendActiveDeadline": "1m"}
                for i in range(checks)
            ],
            "source": {"digest": bundle_digest({"s.sh": "exit 0"}, {}), "snapshotConfigMap": "r1-scripts"},
            "participants": [{"index": i, "nodeName": f"n{i}", "nodeUID": f"uid-{i}"} for i in range(participants)],
            "suiteDeadlineSeconds": 600,
        },
        "status": {"phase": "Running"},
    }


class Recorded:
    """A finished Run as the controller leaves it: status, Run evidence ConfigMap, check ConfigMaps."""

    def __init__(
        self,
        run: Obj,
        documents: dict[int, Obj | None],
        *,
        node_uids: dict[str, str | None] | None = None,
        workflow_phase: str = "Succeeded",
        reported: dict[int, str] | None = None,
    ) -> None:
        self.check_cms: dict[int, Obj | None] = {
            i: None if d is None else eb.config_map(f"r1-c{i}-evidence", d) for i, d in documents.items()
        }
        self.results_cms: dict[int, Obj | None] = {
            i: None if d is None else eb.config_map(f"r1-c{i}-results", d["results"]) for i, d in documents.items()
        }
        outcomes = [
            assess_check(run, CheckInput(i, f"r1-c{i}-evidence", self.check_cms.get(i), (reported or {}).get(i)))
            for i in range(len(run["spec"]["checks"]))
        ]
        uids = node_uids or {p["nodeName"]: p["nodeUID"] for p in run["spec"]["participants"]}
        decision = decide(run, outcomes, node_uids=uids, workflow_phase=workflow_phase, deadline_passed=False)
        workflow = {"metadata": {"name": "r1"}, "status": {"phase": workflow_phase}}
        self.document = run_document(run, decision, workflow=workflow, decided_at="2026-11-30T00:10:00Z")
        self.run_cm, digest, size = config_map(
            name="r1-evidence", namespace="ns", owner=OWNER, labels={}, document=self.document
        )
        self.run = copy.deepcopy(run)
        self.run["status"] = {
            "phase": self.document["phase"],
            "reason": self.document["reason"],
            "message": self.document["message"],
            "checkVerdicts": [{"name": c["name"], "verdict": c["verdict"]} for c in self.document["checks"]],
            "evidence": {"configMap": "r1-evidence", "digest": digest, "bytes": size},
        }

    def verify(self) -> list[verify.Finding]:
        return verify.verify(self.run, self.run_cm, self.check_cms, self.results_cms)


def passing() -> Recorded:
    run = make_run()
    return Recorded(run, {0: eb.check_evidence(run, 0), 1: eb.check_evidence(run, 1)})


def states(findings: list[verify.Finding]) -> dict[str, str]:
    return {f.subject: f.state for f in findings}


def test_untouched_evidence_verifies_item_by_item() -> None:
    findings = passing().verify()
    assert verify.exit_code(findings) == 0
    assert set(states(findings).values()) == {"OK"}
    subjects = [f.subject for f in findings]
    assert subjects == [
        "Run evidence ConfigMap r1-evidence",
        "Run evidence digest",
        "ConfigMap r1-evidence digest annotation",
        "Run evidence bytes",
        "Run identity",
        "Run status",
        "check 0 check-0 evidence",
        "check 0 check-0 results",
        "check 0 check-0 verdict",
        "check 1 check-1 evidence",
        "check 1 check-1 results",
        "check 1 check-1 verdict",
        "Run decision",
    ]
    lines = verify.render(findings)
    assert lines[0].endswith("decodes (immutable, canonical, evidence/v2)")
    assert lines[1].startswith("OK        Run evidence digest: sha256:")
    assert lines[6].startswith("OK        check 0 check-0 evidence: ConfigMap r1-c0-evidence: sha256:")


def _as_v1(rec: Recorded) -> None:
    """The Run document as it was stored before issue 41 (v1: each check's evidence embedded)."""
    _resign(lambda d: d.update(eb.as_v1(d, rec.check_cms)))(rec)


def test_an_old_v1_document_still_verifies_item_by_item() -> None:
    rec = passing()
    _as_v1(rec)
    findings = rec.verify()
    assert verify.exit_code(findings) == 0, verify.render(findings)
    assert findings[0].detail == "decodes (immutable, canonical, evidence/v1)"
    assert [f.subject for f in findings][6:9] == [
        "check 0 check-0 evidence",
        "check 0 check-0 digest",
        "check 0 check-0 verdict",
    ]
    rec.document["checks"][0]["evidence"]["reason"] = "edited"
    _resign(lambda d: None)(rec)
    assert states(rec.verify())["check 0 check-0 evidence"] == "MISMATCH"


def test_without_the_results_config_maps_the_link_is_checked_by_name_and_digest() -> None:
    """What describe node does (it reads only the check evidence ConfigMaps)."""
    rec = passing()
    findings = verify.verify(rec.run, rec.run_cm, rec.check_cms)
    assert verify.exit_code(findings) == 0, verify.render(findings)
    assert "results ConfigMap not read" in next(f.detail for f in findings if f.subject == "check 0 check-0 results")


def _replace_check(rec: Recorded) -> None:
    forged = eb.check_evidence(rec.run, 1, verdicts={0: "Fail"})
    rec.check_cms[1] = eb.config_map("r1-c1-evidence", forged)


def _edit_status(field: str, value: Any) -> Callable[[Recorded], None]:
    return lambda rec: rec.run["status"].update({field: value})


def _resign(mutate: Callable[[Obj], None]) -> Callable[[Recorded], None]:
    """Change the Run document and re-store it, status digest included (a consistent forgery)."""

    def apply(rec: Recorded) -> None:
        mutate(rec.document)
        rec.run_cm, digest, size = config_map(
            name="r1-evidence", namespace="ns", owner=OWNER, labels={}, document=rec.document
        )
        rec.run["status"]["evidence"].update(digest=digest, bytes=size)

    return apply


def _set_phase(doc: Obj) -> None:
    doc["checks"][1].update(verdict="Fail")


TAMPERING: dict[str, tuple[Callable[[Recorded], None], str, int]] = {
    "check-config-map-replaced": (_replace_check, "check 1 check-1 evidence", 1),
    "check-config-map-deleted": (lambda rec: rec.check_cms.update({0: None}), "check 0 check-0 evidence", 2),
    "status-digest-edited": (
        _edit_status("evidence", {"configMap": "r1-evidence", "digest": "sha256:" + "0" * 64, "bytes": 1}),
        "Run evidence digest",
        1,
    ),
    "status-phase-edited": (_edit_status("phase", "Failed"), "Run status", 1),
    "status-verdicts-edited": (_edit_status("checkVerdicts", []), "Run status", 1),
    "run-config-map-gone": (lambda rec: setattr(rec, "run_cm", None), "Run evidence ConfigMap ns/r1-evidence", 2),
    "run-config-map-mutable": (lambda rec: rec.run_cm.update(immutable=False), "Run evidence ConfigMap r1-evidence", 1),
    "annotation-edited": (
        lambda rec: rec.run_cm["metadata"]["annotations"].update({DIGEST_ANNOTATION: "sha256:" + "1" * 64}),
        "ConfigMap r1-evidence digest annotation",
        1,
    ),
    "document-names-other-run": (_resign(lambda d: d["run"].update(uid="other")), "Run identity", 1),
    "embedded-verdict-flipped": (_resign(_set_phase), "check 1 check-1 verdict", 1),
    "named-evidence-digest-edited": (
        _resign(lambda d: d["checks"][0].update(digest="sha256:" + "0" * 64)),
        "check 0 check-0 evidence",
        1,
    ),
    "named-evidence-elsewhere": (
        _resign(lambda d: d["checks"][0].update(configMap="elsewhere")),
        "check 0 check-0 evidence",
        1,
    ),
    "results-config-map-deleted": (lambda rec: rec.results_cms.update({1: None}), "check 1 check-1 results", 2),
    "results-config-map-replaced": (
        lambda rec: rec.results_cms.update(
            {1: eb.config_map("r1-c1-results", eb.check_evidence(rec.run, 1, verdicts={0: "Fail"})["results"])}
        ),
        "check 1 check-1 results",
        1,
    ),
    "results-link-edited": (
        _resign(lambda d: d["checks"][1].update(resultsDigest="sha256:" + "3" * 64)),
        "check 1 check-1 results",
        1,
    ),
    "decision-flipped": (_resign(lambda d: d.update(phase="Failed", reason="CheckFailed")), "Run decision", 1),
    "node-verdict-flipped": (_resign(lambda d: d["nodes"].update(n0="Fail")), "Run decision", 1),
}


@pytest.mark.parametrize("case", TAMPERING)
def test_tampering_is_reported_where_it_happened(case: str) -> None:
    tamper, subject, code = TAMPERING[case]
    rec = passing()
    tamper(rec)
    findings = rec.verify()
    assert states(findings)[subject] == ("MISSING" if code == 2 else "MISMATCH"), verify.render(findings)
    assert verify.exit_code(findings) == code


def test_run_without_evidence_is_missing() -> None:
    findings = verify.verify(make_run(), None, {})
    assert [f.state for f in findings] == ["MISSING"]
    assert "status.evidence is not set (phase Running)" in findings[0].detail
    assert verify.exit_code(findings) == 2


def _negative(case: str) -> Recorded:
    run = make_run()
    valid = {0: eb.check_evidence(run, 0), 1: eb.check_evidence(run, 1)}
    if case == "check-failed":
        return Recorded(run, {**valid, 1: eb.check_evidence(run, 1, verdicts={1: "Fail"})})
    if case == "evidence-missing":
        return Recorded(run, {0: valid[0], 1: None})
    if case == "foreign-evidence":
        return Recorded(run, {**valid, 0: eb.DOCUMENT_MUTATIONS["other-run-uid"](valid[0])})
    if case == "adapter-reported-another-digest":
        return Recorded(run, valid, reported={0: "sha256:" + "2" * 64})
    if case == "workflow-failed":
        return Recorded(run, valid, workflow_phase="Failed")
    if case == "node-replaced":
        return Recorded(run, valid, node_uids={"n0": "uid-0", "n1": "uid-new"})
    if case == "node-replaced-behind-a-failure":
        failing = {**valid, 0: eb.check_evidence(run, 0, verdicts={0: "Fail"})}
        return Recorded(run, failing, node_uids={"n0": "uid-0", "n1": None})
    raise AssertionError(case)


@pytest.mark.parametrize(
    ("case", "phase", "reason"),
    [
        ("check-failed", "Failed", "CheckFailed"),
        ("evidence-missing", "Inconclusive", "MissingEvidence"),
        ("foreign-evidence", "Inconclusive", "ForeignEvidence"),
        ("adapter-reported-another-digest", "Inconclusive", "DigestMismatch"),
        ("workflow-failed", "Inconclusive", "WorkflowNotSucceeded"),
        ("node-replaced", "Inconclusive", "NodeReplaced"),
        ("node-replaced-behind-a-failure", "Failed", "CheckFailed"),
    ],
)
def test_negative_decisions_verify_when_untouched(case: str, phase: str, reason: str) -> None:
    rec = _negative(case)
    assert (rec.run["status"]["phase"], rec.run["status"]["reason"]) == (phase, reason)
    findings = rec.verify()
    assert verify.exit_code(findings) == 0, verify.render(findings)
    if case == "adapter-reported-another-digest":
        verdict = next(f for f in findings if f.subject == "check 0 check-0 verdict")
        assert "not re-derivable here" in verdict.detail
        assert "alone gives Pass" in verdict.detail
    if case == "evidence-missing":
        assert "absent, as recorded" in next(f.detail for f in findings if f.subject == "check 1 check-1 evidence")


def test_a_missing_check_that_reappears_is_a_mismatch() -> None:
    rec = _negative("evidence-missing")
    doc = eb.check_evidence(rec.run, 1)
    rec.check_cms[1] = eb.config_map("r1-c1-evidence", doc)
    findings = rec.verify()
    assert states(findings)["check 1 check-1 evidence"] == "MISMATCH"
    assert verify.exit_code(findings) == 1


def test_the_recorded_size_must_be_the_exact_stored_size() -> None:
    """The controller records the exact gzip size; a base64-length estimate is not it."""
    rec = passing()
    encoded = rec.run_cm["binaryData"]["evidence.json.gz"]
    exact = len(base64.b64decode(encoded))
    assert rec.run["status"]["evidence"]["bytes"] == exact
    assert verify.exit_code(rec.verify()) == 0
    for wrong in {len(encoded) * 3 // 4, exact + 1, 5} - {exact}:
        rec.run["status"]["evidence"]["bytes"] = wrong
        assert states(rec.verify())["Run evidence bytes"] == "MISMATCH", wrong


def test_too_large_run_evidence_is_compared_by_digest() -> None:
    """What controller/reconcile/accept.py stored (v1) when the Run document would not fit: no embedded evidence."""
    rec = passing()
    _as_v1(rec)

    def strip(doc: Obj) -> None:
        for check in doc["checks"]:
            check["evidence"] = None
        doc.update(
            phase="Inconclusive",
            reason="EvidenceTooLarge",
            message="too large",
            nodes={"n0": "Inconclusive", "n1": "Inconclusive"},
        )

    _resign(strip)(rec)
    rec.run["status"].update(phase="Inconclusive", reason="EvidenceTooLarge", message="too large")
    findings = rec.verify()
    assert verify.exit_code(findings) == 0, verify.render(findings)
    assert "compared by digest" in next(f.detail for f in findings if f.subject == "check 0 check-0 evidence")
