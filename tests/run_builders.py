"""Runs, Workflows and evidence ConfigMaps made directly on the API server (as an admin), for
tests that exercise the controller's acceptance code, signalctl and the portal without
running real checks: a Running Run over given Nodes, the Workflow status Argo would report,
and the check evidence stored under the adapter's name."""

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from localcluster.kube import ApiError, KubeClient, resource_path
from shared import keys
from shared.digests import bundle_digest
from shared.evidence import decode_document
from shared.runevidence import RUN_EVIDENCE_SCHEMAS, config_map_names, materialize
from tests import evidence_builders as eb

Obj = dict[str, Any]
SCRIPTS = {"s.sh": "exit 0"}


def run_body(namespace: str, nodes: Sequence[Obj], profile: str, checks: int = 1) -> Obj:
    """A CertificationRun of ``checks`` Pod checks over ``nodes`` (index = list order)."""
    name = f"r-{uuid.uuid4().hex[:8]}"
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.RUN_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": {keys.PROFILE_LABEL: profile}},
        "spec": {
            "profile": {"name": profile, "uid": str(uuid.uuid4()), "generation": 1},
            "checks": [
                {"name": f"check-{i}", "scriptKey": "s.sh", "backend": "Pod", "backendActiveDeadline": "1m"}
                for i in range(checks)
            ],
            "source": {"digest": bundle_digest(SCRIPTS, {}), "snapshotConfigMap": f"{name}-scripts"},
            "participants": [
                {"index": i, "nodeName": n["metadata"]["name"], "nodeUID": n["metadata"]["uid"]}
                for i, n in enumerate(nodes)
            ],
            "suiteDeadlineSeconds": 600,
        },
    }


async def running_run(
    admin: KubeClient, namespace: str, nodes: Sequence[Obj], profile: str, checks: int = 1, *, started: str = ""
) -> Obj:
    """Create the Run and mark it Running (as the controller would after admission)."""
    body = run_body(namespace, nodes, profile, checks)
    name = body["metadata"]["name"]
    await admin.create(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace), body)
    stamp = started or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"status": {"phase": "Running", "startTime": stamp}}
    return await admin.merge_patch(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, name, "status"), status)


def workflow_status(run: Obj, digests: dict[int, str], phase: str = "Succeeded") -> Obj:
    """The Run's Workflow as the controller caches it: phase, and each check step's index and
    reported evidence digest."""
    nodes = {
        f"n{i}": {
            "templateName": "check",
            "phase": "Succeeded",
            "inputs": {"parameters": [{"name": "index", "value": str(i)}]},
            "outputs": {"parameters": [{"name": "evidence-digest", "value": d}]},
        }
        for i, d in digests.items()
    }
    return {"metadata": {"name": run["metadata"]["name"]}, "status": {"phase": phase, "nodes": nodes}}


async def store(admin: KubeClient, namespace: str, name: str, body: Obj) -> None:
    """Create an evidence ConfigMap under ``name`` (keeping its owner references)."""
    await admin.create(
        resource_path("v1", "configmaps", namespace), {**body, "metadata": {**body["metadata"], "name": name}}
    )


async def finished_run(
    admin: KubeClient,
    namespace: str,
    nodes: Sequence[Obj],
    profile: str,
    *,
    name: str = "",
    labels: dict[str, str] | None = None,
    completed: str = "2026-11-30T01:00:00Z",
) -> Obj:
    """A Run as an earlier certification leaves it: Succeeded and Released (its group given
    back), named ``name`` when given and carrying ``labels`` besides the profile's."""
    body = run_body(namespace, nodes, profile)
    if name:
        body["metadata"]["name"] = name
        body["spec"]["source"]["snapshotConfigMap"] = f"{name}-scripts"
    body["metadata"]["labels"].update(labels or {})
    name = body["metadata"]["name"]
    await admin.create(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace), body)
    released = {
        "type": "Released",
        "status": "True",
        "reason": "Released",
        "message": "every participant released",
        "lastTransitionTime": completed,
    }
    status = {
        "phase": "Succeeded",
        "reason": "AllChecksPassed",
        "startTime": "2026-11-30T00:00:00Z",
        "completionTime": completed,
        "conditions": [released],
    }
    return await admin.merge_patch(
        resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, name, "status"), {"status": status}
    )


async def stored_run_evidence(admin: KubeClient, run: Obj) -> Obj:
    """The Run's stored evidence document, its digest checked against status.evidence, with each
    check's evidence read from the ConfigMap it names and matched to the named digest
    (shared/runevidence.materialize: ``checks[i].evidence``, None with the problem otherwise)."""
    meta = run["metadata"]
    ref = run["status"]["evidence"]
    path = resource_path("v1", "configmaps", meta["namespace"])
    document, digest = decode_document(await admin.get(f"{path}/{ref['configMap']}"), RUN_EVIDENCE_SCHEMAS)
    assert digest == ref["digest"]
    stored = {}
    for index, name in config_map_names(run, document).items():
        try:
            stored[index] = await admin.get(f"{path}/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise
            stored[index] = None
    return materialize(run, document, stored)


async def store_results(admin: KubeClient, namespace: str, run: Obj, document: Obj) -> None:
    """Store the results a check evidence document embeds under the name it records, as the
    adapter does before it writes the evidence (``signalctl evidence verify`` checks that link)."""
    name = document["resultsConfigMap"]
    await store(admin, namespace, name, eb.config_map(name, document["results"], owner=run))
