"""``signalctl evidence verify``: re-derive a finished Run's recorded decision from the stored
evidence, independently of the controller. Pure: plain dicts in, findings out; the command
(signalctl/commands.py) only fetches the objects.

What is compared, item by item:

1. ``status.evidence`` names a ConfigMap that exists and decodes (``decode_document``: immutable,
   bounded, canonical gzip JSON of ``projectsignal.dev/evidence/v2``, or of v1 written before
   issue 41: shared/runevidence.py); its recomputed digest
   equals ``status.evidence.digest`` (and the ConfigMap's digest annotation); ``bytes`` is the
   stored gzip size.
2. The Run document names this Run (namespace, name, uid), its profile, source digest, attempt
   and participants (index, Node name, Node uid); the Run's status (phase, reason, message,
   checkVerdicts) is the document's decision.
3. Per check ``i`` of the Run (signalctl/verify_checks.py): the ConfigMap ``<run>-c<i>-evidence``
   exists and decodes to the recorded ``digest`` (v2: the document names it and that digest,
   and the check's results ConfigMap has the results digest its evidence records; v1: it is
   exactly the evidence embedded in the Run document); and re-validating it (``assess_check``, i.e.
   ``decode_document`` + ``validate_check``) gives the recorded verdict and problem.
   One recorded problem cannot be re-derived from stored evidence: ``DigestMismatch`` against
   the digest the adapter reported in the Workflow (which verify does not read); a recorded
   Inconclusive for that reason is accepted and said so. A check recorded as
   ``MissingEvidence`` whose ConfigMap is still absent verifies.
4. The decision follows from the recorded checks (``decide``) with: the Workflow phase recorded
   in the document; the suite deadline taken as passed only when the recorded reason says so;
   Node uids from the document's participants, except that a participant absent from the
   recorded ``nodes`` map counts as replaced (this is how ``decide`` records replacement, and
   covers a replacement hidden behind ``CheckFailed``). ``EvidenceTooLarge`` is compared as the
   controller derives it (phase and Node verdicts; its message quotes an encoder error).
"""

import base64
import binascii
from typing import Any

from shared.acceptance import CheckOutcome, decide
from shared.evidence import DIGEST_ANNOTATION, EVIDENCE_KEY, EvidenceError, decode_document
from shared.run import Phase, Verdict
from shared.runevidence import RUN_EVIDENCE_SCHEMAS, by_reference
from signalctl.verify_checks import (
    TOO_LARGE,
    Finding,
    check_config_map_name,
    check_v1,
    check_v2,
    results_config_map_name,
)
from signalctl.verify_checks import item as _item

__all__ = ["Finding", "check_config_map_name", "exit_code", "render", "results_config_map_name", "verify"]
Obj = dict[str, Any]


def _differences(expected: Obj, actual: Obj) -> list[str]:
    return [
        f"{key} is {actual.get(key)!r}, expected {value!r}"
        for key, value in expected.items()
        if actual.get(key) != value
    ]


def _stored_bytes(config_map: Obj) -> int | None:
    """The exact gzip size of a stored document (what the controller records)."""
    encoded = (config_map.get("binaryData") or {}).get(EVIDENCE_KEY, "")
    try:
        return len(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return None


def _header(run: Obj, run_cm: Obj, document: Obj, digest: str) -> list[Finding]:
    meta, spec, status = run["metadata"], run["spec"], run.get("status") or {}
    ref = status["evidence"]
    name = ref.get("configMap")
    found = [
        _item(
            digest == ref.get("digest"),
            "Run evidence digest",
            f"{digest} (recomputed) = status.evidence.digest",
            f"recomputed {digest}, status.evidence.digest says {ref.get('digest')}",
        )
    ]
    annotated = ((run_cm.get("metadata") or {}).get("annotations") or {}).get(DIGEST_ANNOTATION)
    found.append(
        _item(
            annotated == digest,
            f"ConfigMap {name} digest annotation",
            "matches",
            f"annotation says {annotated}, recomputed {digest}",
        )
    )
    stored = _stored_bytes(run_cm)
    found.append(
        _item(
            stored is not None and ref.get("bytes") == stored,
            "Run evidence bytes",
            f"{ref.get('bytes')} stored gzip bytes",
            f"status.evidence.bytes is {ref.get('bytes')}, stored {stored if stored is not None else '?'}",
        )
    )
    expected = {
        "run": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
        "profile": spec["profile"],
        "sourceDigest": spec["source"]["digest"],
        "attempt": spec.get("attempt", 1),
        "participants": [
            {"index": p["index"], "nodeName": p["nodeName"], "nodeUID": p["nodeUID"]}
            for p in sorted(spec["participants"], key=lambda p: p["index"])
        ],
    }
    wrong = _differences(expected, document)
    found.append(
        _item(not wrong, "Run identity", "document names this Run, profile, source and participants", "; ".join(wrong))
    )
    recorded = {
        "phase": document.get("phase"),
        "reason": document.get("reason"),
        "message": document.get("message"),
        "checkVerdicts": [{"name": c.get("name"), "verdict": c.get("verdict")} for c in document.get("checks") or []],
    }
    wrong = _differences(recorded, {k: status.get(k) for k in recorded})
    found.append(
        _item(
            not wrong,
            "Run status",
            f"{status.get('phase')} ({status.get('reason')}) is the document's decision",
            "status " + "; ".join(wrong).replace("expected", "document says"),
        )
    )
    return found


def _as_recorded(recorded: Obj, recomputed: CheckOutcome) -> CheckOutcome | None:
    """The recorded check as decide() takes it (participant verdicts from re-validation)."""
    try:
        verdict = Verdict(str(recorded.get("verdict")))
    except ValueError:
        return None
    problem = recorded.get("problem")
    agree = problem is None and recomputed.problem is None
    return CheckOutcome(
        recomputed.index,
        recomputed.name,
        verdict,
        problem,
        recorded.get("digest"),
        recomputed.document,
        recomputed.participant_verdicts if agree else {},
    )


def _decision(run: Obj, document: Obj, checks: list[CheckOutcome]) -> Finding:
    nodes = document.get("nodes") or {}
    uids: dict[str, str | None] = {
        p["nodeName"]: p["nodeUID"] if p["nodeName"] in nodes else None for p in document.get("participants") or []
    }
    workflow_phase = (document.get("workflow") or {}).get("phase")
    reason = document.get("reason")
    decision = decide(
        run, checks, node_uids=uids, workflow_phase=workflow_phase, deadline_passed=reason == "SuiteDeadlineExceeded"
    )
    expected: Obj = {
        "phase": decision.phase.value,
        "reason": decision.reason,
        "message": decision.message,
        "nodes": {n: v.value for n, v in sorted(decision.node_verdicts.items())},
    }
    if reason == TOO_LARGE:
        expected["phase"] = (Phase.FAILED if decision.phase == Phase.FAILED else Phase.INCONCLUSIVE).value
        expected["reason"] = TOO_LARGE
        expected.pop("message")
        expected["nodes"] = {n: "Fail" if v == "Fail" else "Inconclusive" for n, v in expected["nodes"].items()}
    wrong = _differences(expected, {k: document.get(k) for k in expected})
    return _item(
        not wrong,
        "Run decision",
        f"{document.get('phase')} ({reason}) follows from the recorded checks",
        "; ".join(wrong).replace("expected", "the recorded checks give"),
    )


def verify(
    run: Obj,
    run_cm: Obj | None,
    check_cms: dict[int, Obj | None],
    results_cms: dict[int, Obj | None] | None = None,
) -> list[Finding]:
    """Every finding, in order; ``check_cms`` maps a check index to its evidence ConfigMap
    (None: absent), ``results_cms`` to its results ConfigMap (not given: not fetched)."""
    meta, status = run["metadata"], run.get("status") or {}
    ref = status.get("evidence")
    if not ref or not ref.get("configMap"):
        phase = status.get("phase") or "Pending"
        return [
            Finding("MISSING", "Run evidence", f"status.evidence is not set (phase {phase}); nothing to verify yet")
        ]
    name = ref["configMap"]
    if run_cm is None:
        return [Finding("MISSING", f"Run evidence ConfigMap {meta['namespace']}/{name}", "not found")]
    try:
        document, digest = decode_document(run_cm, RUN_EVIDENCE_SCHEMAS)
    except EvidenceError as exc:
        return [Finding("MISMATCH", f"Run evidence ConfigMap {name}", str(exc))]
    version = str(document["schema"]).rsplit("/", 1)[-1]
    found = [Finding("OK", f"Run evidence ConfigMap {name}", f"decodes (immutable, canonical, evidence/{version})")]
    found += _header(run, run_cm, document, digest)
    recorded_checks = [c for c in document.get("checks") or [] if isinstance(c, dict)]
    spec_checks = run["spec"]["checks"]
    if len(recorded_checks) != len(spec_checks):
        found.append(
            Finding(
                "MISMATCH", "Run checks", f"the document records {len(recorded_checks)} of {len(spec_checks)} checks"
            )
        )
    stripped = document.get("reason") == TOO_LARGE
    outcomes: list[CheckOutcome] = []
    for index, recorded in enumerate(recorded_checks[: len(spec_checks)]):
        if by_reference(document):
            items, recomputed = check_v2(
                run,
                index,
                recorded,
                check_cms.get(index),
                (results_cms or {}).get(index),
                results_read=results_cms is not None,
            )
        else:
            items, recomputed = check_v1(
                run, index, recorded, check_cms.get(index), stripped and recorded.get("evidence") is None
            )
        found += items
        as_recorded = _as_recorded(recorded, recomputed)
        if as_recorded is None:
            found.append(Finding("MISMATCH", f"check {index} verdict", f"{recorded.get('verdict')!r} is not a verdict"))
        else:
            outcomes.append(as_recorded)
    if len(outcomes) == len(spec_checks):
        found.append(_decision(run, document, outcomes))
    return found


def exit_code(findings: list[Finding]) -> int:
    """0: everything verifies; 2: something needed is missing (verification incomplete, even if
    something else also mismatched); 1: something does not match."""
    states = {f.state for f in findings}
    if "MISSING" in states:
        return 2
    return 1 if "MISMATCH" in states else 0


def render(findings: list[Finding]) -> list[str]:
    return [f"{f.state:<8}  {f.subject}: {f.detail}" for f in findings]
