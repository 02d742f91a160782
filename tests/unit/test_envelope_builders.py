"""Builders for envelope, classification and portal tests: Runs decided by the real
acceptance rules (shared/acceptance.py) from check evidence built by tests/evidence_builders.py,
with the Run's evidence ConfigMap exactly as the controller writes it. No tests here."""

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from shared import keys
from shared.acceptance import CheckInput, assess_check, decide, run_document
from shared.envelope import RunEvidence, read_run_evidence
from shared.evidence import config_map
from shared.run import TERMINAL_PHASES
from shared.runevidence import materialize
from tests import evidence_builders as eb
from tests.builders import run_manifest

Obj = dict[str, Any]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RUN_UID = "7d3f2a10-5b6c-4d7e-8f90-a1b2c3d4e5f6"
CHECK_CONFIG_MAPS: dict[str, dict[int, Obj | None]] = {}
"""Per Run evidence digest made by ``accepted``: the check evidence ConfigMaps it names (the
Run document names them, v2; a reader fetches them)."""


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_run(name: str = "r1", participants: int = 2, checks: int = 1, namespace: str = "team-a") -> Obj:
    run = run_manifest(name, participants)
    uid = RUN_UID if name == "r1" else f"uid-{name}"
    run["metadata"].update(namespace=namespace, uid=uid, creationTimestamp=stamp(NOW - timedelta(hours=1)))
    for i in range(1, checks):
        run["spec"]["checks"].append(
            {"name": f"check-{i}", "scriptKey": "nccl.sh", "backend": "Pod", "backendActiveDeadline": "1m"}
        )
    run["status"] = {"phase": "Running", "startTime": stamp(NOW - timedelta(hours=1))}
    return run


def evidence(run: Obj, index: int = 0, verdicts: dict[int, str] | None = None, finished: datetime = NOW) -> Obj:
    """A valid check-evidence/v1 document whose timestamps say it finished at ``finished``."""
    document = json.loads(json.dumps(eb.check_evidence(run, index, verdicts)))
    document["results"]["startedAt"] = stamp(finished - timedelta(minutes=5))
    document["results"]["collectedAt"] = stamp(finished - timedelta(minutes=1))
    document["cleanup"]["finishedAt"] = stamp(finished)
    return eb.seal(document)


def node_uids(run: Obj) -> dict[str, str]:
    return {p["nodeName"]: p["nodeUID"] for p in run["spec"]["participants"]}


def accepted(
    run: Obj,
    documents: list[Obj | None] | None = None,
    *,
    workflow_phase: str = "Succeeded",
    uids: dict[str, str | None] | None = None,
    decided: datetime = NOW,
) -> tuple[Obj, Obj, Obj, str]:
    """(the Run with its terminal status, its evidence ConfigMap, the document, its digest)."""
    if documents is None:
        documents = [evidence(run, i) for i in range(len(run["spec"]["checks"]))]
    meta = run["metadata"]
    outcomes, stored = [], {}
    for index, document in enumerate(documents):
        name = f"{meta['name']}-c{index}-evidence"
        cm = eb.config_map(name, document) if document is not None else None
        if cm is not None:
            cm["metadata"]["uid"] = f"cm-{meta['uid']}-c{index}"
        stored[index] = cm
        outcomes.append(assess_check(run, CheckInput(index, name, cm)))
    decision = decide(
        run, outcomes, node_uids=uids or dict(node_uids(run)), workflow_phase=workflow_phase, deadline_passed=False
    )
    workflow = {"metadata": {"name": meta["name"]}, "status": {"phase": workflow_phase}}
    document = run_document(run, decision, workflow=workflow, decided_at=stamp(decided))
    owner = {"apiVersion": keys.API_VERSION, "kind": keys.RUN_KIND, "name": meta["name"], "uid": meta["uid"]}
    labels = {keys.RUN_NAME_LABEL: meta["name"], keys.RUN_UID_LABEL: meta["uid"], keys.COMPONENT_LABEL: "evidence"}
    manifest, digest, size = config_map(
        name=f"{meta['name']}-evidence", namespace=meta["namespace"], owner=owner, labels=labels, document=document
    )
    manifest["metadata"]["uid"] = f"cm-{meta['uid']}"
    CHECK_CONFIG_MAPS[digest] = stored
    done = copy.deepcopy(run)
    done["status"] = {
        **done.get("status", {}),
        "phase": document["phase"],
        "reason": document["reason"],
        "evidence": {"configMap": manifest["metadata"]["name"], "digest": digest, "bytes": size},
        "completionTime": stamp(decided),
    }
    assert done["status"]["phase"] in TERMINAL_PHASES
    return done, manifest, document, digest


def read(run: Obj, config_map: Obj | None, digest: str | None, **options: Any) -> RunEvidence:
    """``read_run_evidence`` and, as the portal does, each check's evidence from the ConfigMaps
    the document names (those ``accepted`` stored for that digest)."""
    found = read_run_evidence(config_map, expected_digest=digest, **options)
    if found.document is None:
        return found
    document = materialize(run, found.document, CHECK_CONFIG_MAPS.get(digest or "", {}))
    return RunEvidence(found.verification, found.message, document, found.digest)
