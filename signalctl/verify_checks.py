"""``signalctl evidence verify``, per check: the findings for one check of a Run's evidence
document, v2 (the check's evidence named by ConfigMap and digest) or v1 (embedded). Pure; the
command fetches the ConfigMaps.

v2, per check ``i``: the entry names ``<run>-c<i>-evidence`` (the adapter's name); that ConfigMap
exists (MISSING otherwise, unless the check was recorded ``MissingEvidence``) and decodes to the
recorded digest (MISMATCH otherwise); its results link holds: the entry's ``resultsConfigMap``
and ``resultsDigest`` are the ones the evidence records, and that results ConfigMap, when
fetched, decodes to exactly that digest; re-validating the evidence (``assess_check``) gives
the recorded verdict and problem.
"""

from dataclasses import dataclass
from typing import Any, Final, Literal

from shared import keys
from shared.acceptance import CheckInput, CheckOutcome, assess_check
from shared.digests import canonical_json, sha256_digest
from shared.evidence import RESULTS_SCHEMA, EvidenceError, decode_document

Obj = dict[str, Any]
State = Literal["OK", "MISMATCH", "MISSING"]
REPORTED_DIGEST_PROBLEM: Final = "DigestMismatch: the stored evidence is not what the adapter reported"
TOO_LARGE: Final = "EvidenceTooLarge"
check_config_map_name = keys.check_evidence_name
results_config_map_name = keys.check_results_name


@dataclass(frozen=True)
class Finding:
    state: State
    subject: str
    detail: str


def item(ok: bool, subject: str, good: str, bad: str) -> Finding:
    return Finding("OK" if ok else "MISMATCH", subject, good if ok else bad)


def _verdict(subject: str, recorded: Obj, outcome: CheckOutcome) -> Finding:
    """The recorded verdict against re-validation's."""
    if (outcome.verdict.value, outcome.problem) == (recorded.get("verdict"), recorded.get("problem")):
        problem = f" ({outcome.problem})" if outcome.problem else ""
        return Finding("OK", f"{subject} verdict", f"{outcome.verdict.value}{problem}")
    if recorded.get("problem") == REPORTED_DIGEST_PROBLEM and recorded.get("verdict") == "Inconclusive":
        return Finding(
            "OK",
            f"{subject} verdict",
            f"recorded Inconclusive ({REPORTED_DIGEST_PROBLEM}): depends on the Workflow's reported digest, "
            f"not re-derivable here; the stored evidence alone gives {outcome.verdict.value}",
        )
    return Finding(
        "MISMATCH",
        f"{subject} verdict",
        f"recorded {recorded.get('verdict')} ({recorded.get('problem')}), "
        f"re-validation gives {outcome.verdict.value} ({outcome.problem})",
    )


def _placed(subject: str, index: int, name: str, recorded: Obj) -> list[Finding]:
    if (recorded.get("index"), recorded.get("name")) == (index, name):
        return []
    where = f"the Run evidence records check {recorded.get('index')} {recorded.get('name')!r} here"
    return [Finding("MISMATCH", subject, where)]


def _absent(subject: str, cm_name: str, recorded: Obj) -> Finding:
    if recorded.get("digest") is None and str(recorded.get("problem") or "").startswith("MissingEvidence"):
        return Finding("OK", f"{subject} evidence", f"ConfigMap {cm_name} absent, as recorded (MissingEvidence)")
    return Finding("MISSING", f"{subject} evidence", f"ConfigMap {cm_name} not found; the Run evidence records it")


def check_v1(
    run: Obj, index: int, recorded: Obj, config_map: Obj | None, stripped: bool
) -> tuple[list[Finding], CheckOutcome]:
    """Findings for check ``index`` of a v1 document (its evidence embedded in ``recorded``)."""
    spec_check = run["spec"]["checks"][index]
    cm_name = check_config_map_name(run["metadata"]["name"], index)
    subject = f"check {index} {spec_check['name']}"
    outcome = assess_check(run, CheckInput(index, cm_name, config_map, None))
    found = _placed(subject, index, spec_check["name"], recorded)
    evidence, digest = recorded.get("evidence"), recorded.get("digest")
    if config_map is None:
        found.append(_absent(subject, cm_name, {**recorded, "digest": None if evidence is None else digest}))
        if found[-1].state != "OK":
            return found, outcome
    elif stripped:
        found.append(Finding("OK", f"{subject} evidence", f"not embedded ({TOO_LARGE}); compared by digest below"))
    else:
        found.append(
            item(
                evidence == outcome.document,
                f"{subject} evidence",
                f"ConfigMap {cm_name} equals the embedded evidence",
                f"ConfigMap {cm_name} differs from the evidence embedded in the Run evidence"
                + (f" ({outcome.problem})" if outcome.document is None else ""),
            )
        )
    embedded = sha256_digest(canonical_json(evidence)) if evidence is not None else None
    consistent = evidence is None or embedded == digest
    found.append(
        item(
            consistent and outcome.digest == digest,
            f"{subject} digest",
            f"{digest}",
            f"recorded {digest}, stored ConfigMap {outcome.digest}, embedded document {embedded}",
        )
    )
    found.append(_verdict(subject, recorded, outcome))
    return found, outcome


def _results_link(subject: str, recorded: Obj, outcome: CheckOutcome, results_cm: Obj | None) -> Finding:
    """The evidence -> results link: names and digest recorded alike, and the results ConfigMap
    (when it was fetched: ``results_cm``) decoding to that digest."""
    name, digest = recorded.get("resultsConfigMap"), recorded.get("resultsDigest")
    document = outcome.document or {}
    subject = f"{subject} results"
    if (name, digest) != (document.get("resultsConfigMap"), document.get("resultsDigest")):
        return Finding(
            "MISMATCH",
            subject,
            f"the Run evidence names {name} ({digest}); the check evidence records "
            f"{document.get('resultsConfigMap')} ({document.get('resultsDigest')})",
        )
    if digest is None:
        return Finding("OK", subject, "no results recorded (the check left no valid evidence)")
    if results_cm is None:
        return Finding("MISSING", subject, f"ConfigMap {name} not found; the check evidence records {digest}")
    try:
        stored = decode_document(results_cm, RESULTS_SCHEMA)[1]
    except EvidenceError as exc:
        return Finding("MISMATCH", subject, str(exc)[:300])
    return item(
        stored == digest, subject, f"ConfigMap {name}: {digest}", f"ConfigMap {name} holds {stored}, not {digest}"
    )


def check_v2(
    run: Obj, index: int, recorded: Obj, config_map: Obj | None, results_cm: Obj | None, *, results_read: bool
) -> tuple[list[Finding], CheckOutcome]:
    """Findings for check ``index`` of a v2 document; without ``results_read`` (the results
    ConfigMaps were not fetched) the results link is checked by name and digest only."""
    spec_check = run["spec"]["checks"][index]
    cm_name = check_config_map_name(run["metadata"]["name"], index)
    subject = f"check {index} {spec_check['name']}"
    outcome = assess_check(run, CheckInput(index, cm_name, config_map, None))
    found = _placed(subject, index, spec_check["name"], recorded)
    digest = recorded.get("digest")
    if recorded.get("configMap") != cm_name:
        found.append(
            Finding("MISMATCH", f"{subject} evidence", f"the Run evidence names {recorded.get('configMap')!r}")
        )
    elif config_map is None:
        found.append(_absent(subject, cm_name, recorded))
        if found[-1].state != "OK":
            return found, outcome
    else:
        found.append(
            item(
                outcome.digest == digest,
                f"{subject} evidence",
                f"ConfigMap {cm_name}: {digest}",
                f"ConfigMap {cm_name} holds {outcome.digest}, the Run evidence names {digest}"
                + (f" ({outcome.problem})" if outcome.document is None else ""),
            )
        )
    if config_map is not None and outcome.document is not None:
        link = _results_link(subject, recorded, outcome, results_cm)
        if link.state == "MISSING" and not results_read:
            link = Finding("OK", link.subject, f"{recorded.get('resultsDigest')} (results ConfigMap not read)")
        found.append(link)
    found.append(_verdict(subject, recorded, outcome))
    return found, outcome
