"""What stored evidence the controller and the adapter adopt (issue 12 items 1 and 2), table-
tested on the pure rules: controller/rules/evidence_adoption.py (a Run evidence document found
stored) and adapter/adoption.py (a check's results or evidence found stored)."""

import copy
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from adapter.adoption import adoptable
from adapter.inputs import Refusal, parse_inputs
from controller.rules.evidence_adoption import adoption_problem
from controller.rules.manifests import owner_reference
from shared import keys
from shared.acceptance import CheckInput, assess_check, decide, run_document
from shared.evidence import CHECK_EVIDENCE_SCHEMA, RESULTS_SCHEMA, config_map
from tests import evidence_builders as eb
from tests.run_builders import run_body

Obj = dict[str, Any]


def _run() -> Obj:
    nodes = [{"metadata": {"name": f"n{i}", "uid": f"uid-{i}"}} for i in range(2)]
    run = run_body("ns", nodes, "p")
    run["metadata"]["uid"] = str(uuid.uuid4())
    return run


STORED: dict[str, dict[int, Obj | None]] = {}
"""Per Run uid: the check evidence ConfigMaps as stored (what the v2 document names)."""


def _stored(run: Obj, check: Obj, reported: str | None) -> tuple[Obj, Obj, dict[int, str]]:
    """The Run evidence document the controller derives, its ConfigMap, the reported digests."""
    name = keys.check_evidence_name(run["metadata"]["name"], 0)
    cm = eb.config_map(name, check)
    STORED[run["metadata"]["uid"]] = {0: cm}
    outcome = assess_check(run, CheckInput(0, name, cm, reported))
    uids = {p["nodeName"]: p["nodeUID"] for p in run["spec"]["participants"]}
    decision = decide(run, [outcome], node_uids=uids, workflow_phase="Succeeded", deadline_passed=False)
    document = run_document(run, decision, workflow={"status": {"phase": "Succeeded"}}, decided_at=eb.STAMP)
    body, _, _ = config_map(name="r-evidence", namespace="ns", owner=owner_reference(run), labels={}, document=document)
    return document, body, ({0: reported} if reported else {})


def _problem(run: Obj, document: Obj, body: Obj, reported: dict[int, str]) -> str | None:
    uids: dict[str, str | None] = {p["nodeName"]: p["nodeUID"] for p in run["spec"]["participants"]}
    return adoption_problem(
        run,
        body,
        document,
        reported=reported,
        node_uids=uids,
        workflow_phase="Succeeded",
        check_config_maps=STORED[run["metadata"]["uid"]],
    )


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    def change(document: Obj) -> None:
        *parents, last = path.split(".")
        target: Any = document
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[last] = value

    return change


def test_the_controllers_own_document_is_adopted() -> None:
    run = _run()
    check = eb.check_evidence(run)
    document, body, reported = _stored(run, check, eb.digest_of(check))
    assert document["phase"] == "Succeeded"
    assert _problem(run, document, body, reported) is None
    # Once the Workflow is gone, the stored check evidence's digest stands in (same value).
    assert _problem(run, document, body, {0: eb.digest_of(check)}) is None


def test_a_failed_run_is_adopted_too() -> None:
    run = _run()
    check = eb.check_evidence(run, verdicts={1: "Fail"})
    document, body, reported = _stored(run, check, eb.digest_of(check))
    assert document["phase"] == "Failed"
    assert _problem(run, document, body, reported) is None


FORGERIES: dict[str, tuple[Callable[[Obj], None], str]] = {
    "claims-success": (_set("phase", "Succeeded"), "gives Failed, not Succeeded"),
    "claims-a-pass": (_set("nodes.n1", "Pass"), "other Node verdicts (for n1)"),
    "names-a-stranger": (lambda d: d["nodes"].update(stranger="Pass"), "outside spec.participants: stranger"),
    "another-run": (_set("run.uid", "someone-else"), "names another Run"),
    "other-participants": (_set("participants.0.nodeUID", "other"), "participants are not the Run's"),
    "evidence-digest-edited": (_set("checks.0.digest", "sha256:" + "0" * 64), "gives Inconclusive, not Failed"),
    "evidence-named-elsewhere": (_set("checks.0.configMap", "elsewhere"), "gives Inconclusive, not Failed"),
    "no-check-entry": (lambda d: d["checks"].clear(), "exactly one entry per check"),
    "deadline-not-a-bool": (_set("deadlinePassed", "no"), "deadlinePassed is not a boolean"),
    # Wrongly shaped documents are refused with a reason, never an exception that would leave
    # the Run Running, retried for ever, instead of ending it Inconclusive.
    "a-check-not-an-object": (lambda d: d["checks"].__setitem__(0, "x"), "exactly one entry per check"),
    "an-index-not-a-number": (_set("checks.0.index", "0"), "exactly one entry per check"),
    "an-index-a-boolean": (_set("checks.0.index", False), "exactly one entry per check"),
    "nodes-not-an-object": (_set("nodes", ["n0"]), "malformed nodes"),
    "a-verdict-not-a-string": (_set("nodes.n1", ["Pass"]), "other Node verdicts (for n1)"),
    "participants-not-a-list": (_set("participants", "n0"), "participants are not the Run's"),
}


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_a_forged_document_is_not_adopted(case: str) -> None:
    run = _run()
    check = eb.check_evidence(run, verdicts={1: "Fail"})
    document, body, reported = _stored(run, check, eb.digest_of(check))
    change, why = FORGERIES[case]
    forged = copy.deepcopy(document)
    change(forged)
    problem = _problem(run, forged, body, reported)
    assert problem is not None
    assert why in problem, problem


@pytest.mark.parametrize("case", ["deleted", "replaced", "not-the-runs"])
def test_a_v2_document_whose_check_evidence_changed_is_not_adopted(case: str) -> None:
    """The v2 document names each check's evidence: adoption reads it again; a missing or
    altered ConfigMap makes that check Inconclusive, so a recorded Pass no longer re-derives."""
    run = _run()
    check = eb.check_evidence(run)
    document, body, reported = _stored(run, check, eb.digest_of(check))
    assert document["phase"] == "Succeeded"
    assert "evidence" not in document["checks"][0]
    name = keys.check_evidence_name(run["metadata"]["name"], 0)
    if case == "deleted":
        STORED[run["metadata"]["uid"]][0] = None
    elif case == "replaced":
        STORED[run["metadata"]["uid"]][0] = eb.config_map(name, eb.check_evidence(run, verdicts={0: "Fail"}))
    else:
        STORED[run["metadata"]["uid"]][0] = eb.config_map(name, check, owner={"metadata": {"name": "o", "uid": "o"}})
    assert "gives Inconclusive, not Succeeded" in str(_problem(run, document, body, reported))


def test_an_old_v1_document_is_still_adopted_and_checked() -> None:
    """A v1 document (evidence embedded, written before issue 41) found after an upgrade."""
    run = _run()
    check = eb.check_evidence(run, verdicts={1: "Fail"})
    document, body, reported = _stored(run, check, eb.digest_of(check))
    old = eb.as_v1(document, STORED[run["metadata"]["uid"]])
    assert old["checks"][0]["evidence"] == check
    assert _problem(run, old, body, reported) is None
    old["checks"][0]["evidence"]["reason"] = "edited"
    assert "does not match the digest recorded beside it" in str(_problem(run, old, body, reported))


def test_evidence_that_is_not_what_the_adapter_reported_is_not_adopted_as_a_pass() -> None:
    run = _run()
    check = eb.check_evidence(run)
    document, body, _ = _stored(run, check, eb.digest_of(check))
    other = eb.digest_of(eb.check_evidence(run, verdicts={0: "Fail"}))
    assert "gives Inconclusive, not Succeeded" in str(_problem(run, document, body, {0: other}))
    assert "gives Inconclusive, not Succeeded" in str(_problem(run, document, body, {}))  # unverifiable


def test_without_a_controller_owner_reference_nothing_is_adopted() -> None:
    run = _run()
    check = eb.check_evidence(run)
    document, body, reported = _stored(run, check, eb.digest_of(check))
    for refs in ([], [{**owner_reference(run), "controller": False}], [{**owner_reference(run), "uid": "x"}]):
        unowned = copy.deepcopy(body)
        unowned["metadata"]["ownerReferences"] = refs
        assert "no controller ownerReference" in str(_problem(run, document, unowned, reported))


def test_a_too_large_document_is_adopted_only_if_it_certifies_nothing() -> None:
    run = _run()
    check = eb.check_evidence(run, verdicts={1: "Fail"})
    document, body, reported = _stored(run, check, eb.digest_of(check))
    stripped = copy.deepcopy(document)
    stripped["reason"] = "EvidenceTooLarge"
    stripped["nodes"] = {"n0": "Inconclusive", "n1": "Fail"}
    assert _problem(run, stripped, body, reported) is None
    stripped["nodes"]["n0"] = "Pass"
    assert "claims a pass" in str(_problem(run, stripped, body, reported))


# --- the adapter ------------------------------------------------------------------------------


def _inputs(run: Obj) -> Any:
    meta, spec = run["metadata"], run["spec"]
    return parse_inputs(
        run_namespace=meta["namespace"],
        run_name=meta["name"],
        run_uid=meta["uid"],
        participants_json=json.dumps(
            [{"index": p["index"], "nodeName": p["nodeName"], "nodeUID": p["nodeUID"]} for p in spec["participants"]]
        ),
        snapshot=spec["source"]["snapshotConfigMap"],
        check_index="0",
        check_json=json.dumps(spec["checks"][0]),
    )


def _adapter_cm(run: Obj, document: Obj, **labels: str) -> Obj:
    meta = run["metadata"]
    base = {
        keys.RUN_NAME_LABEL: meta["name"],
        keys.RUN_UID_LABEL: meta["uid"],
        keys.CHECK_LABEL: run["spec"]["checks"][0]["name"],
        keys.COMPONENT_LABEL: "evidence",
    }
    owner = {k: owner_reference(run)[k] for k in ("apiVersion", "kind", "name", "uid")}
    body, _, _ = config_map(
        name=f"{meta['name']}-c0-results", namespace="ns", owner=owner, labels={**base, **labels}, document=document
    )
    return body


def test_the_adapter_adopts_its_own_results_and_evidence() -> None:
    run = _run()
    evidence = eb.check_evidence(run)
    inputs = _inputs(run)
    assert adoptable(_adapter_cm(run, evidence["results"]), inputs, RESULTS_SCHEMA)[0] == evidence["results"]
    assert adoptable(_adapter_cm(run, evidence), inputs, CHECK_EVIDENCE_SCHEMA)[0] == evidence


ADAPTER_CASES: dict[str, tuple[Callable[[Obj, Obj], Obj], str]] = {
    "foreign-uid-label": (lambda run, doc: _adapter_cm(run, doc, **{keys.RUN_UID_LABEL: "x"}), "labels"),
    "no-component-label": (lambda run, doc: _adapter_cm(run, doc, **{keys.COMPONENT_LABEL: "backend"}), "labels"),
    "another-check-label": (lambda run, doc: _adapter_cm(run, doc, **{keys.CHECK_LABEL: "other"}), "labels"),
    "not-owned": (
        lambda run, doc: {
            **_adapter_cm(run, doc),
            "metadata": {**_adapter_cm(run, doc)["metadata"], "ownerReferences": []},
        },
        "not owned by Run",
    ),
    "another-run-in-the-document": (
        lambda run, doc: _adapter_cm(run, {**doc, "run": {**doc["run"], "uid": "x"}}),
        "describes another Run",
    ),
    "another-check-in-the-document": (
        lambda run, doc: _adapter_cm(run, {**doc, "check": {**doc["check"], "index": 1}}),
        "describes another check",
    ),
    "mutable": (lambda run, doc: {**_adapter_cm(run, doc), "immutable": False}, "is unusable"),
}


@pytest.mark.parametrize("case", sorted(ADAPTER_CASES))
def test_the_adapter_refuses_what_is_not_its_checks_own(case: str) -> None:
    run = _run()
    build, why = ADAPTER_CASES[case]
    with pytest.raises(Refusal) as refused:
        adoptable(build(run, eb.check_evidence(run)["results"]), _inputs(run), RESULTS_SCHEMA)
    assert why in str(refused.value)
    assert f"{run['metadata']['name']}-c0-results" in str(refused.value)
