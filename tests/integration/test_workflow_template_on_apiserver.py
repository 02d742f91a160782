"""The generated adapter WorkflowTemplate on the real API server with the full upstream Argo CRDs:
the structural schema keeps every field we send (a pruned field fails here), and a Workflow that
references it with the controller's parameters is accepted."""

import copy
import json

import pytest

from adapter.workflow_template import WORKFLOW_PARAMETERS, build_workflow_template
from localcluster.kube import ApiError, KubeClient, resource_path

ARGO = "argoproj.io/v1alpha1"
STRICT = {"fieldValidation": "Strict"}


def templates(namespace: str) -> str:
    return resource_path(ARGO, "workflowtemplates", namespace)


def workflows(namespace: str) -> str:
    return resource_path(ARGO, "workflows", namespace)


def workflow_arguments() -> dict[str, str]:
    checks = [
        {"name": "gpu-burn", "scriptKey": "burn.sh", "backend": "Pod", "gpuCount": 8, "backendActiveDeadline": "10m"},
        {"name": "nccl", "scriptKey": "nccl.sh", "backend": "MPIJob", "gpuCount": 8, "backendActiveDeadline": "20m"},
    ]
    participants = [
        {"index": 0, "nodeName": "gpu-a", "nodeUID": "uid-a"},
        {"index": 1, "nodeName": "gpu-b", "nodeUID": "uid-b"},
    ]
    values = {
        "run-name": "r-1",
        "run-namespace": "signal-runs",
        "run-uid": "6f1c2b7e-0000-4000-8000-000000000001",
        "participants": "gpu-a,gpu-b",
        "participants-json": json.dumps(participants),
        "checks": json.dumps(checks),
        "check-count": str(len(checks)),
        "snapshot": "r-1-snapshot",
    }
    assert set(values) == set(WORKFLOW_PARAMETERS)
    return values


async def test_server_keeps_every_field_of_the_generated_template(admin: KubeClient, namespace: str) -> None:
    sent = build_workflow_template()
    created = await admin.request("POST", templates(namespace), body=sent, params=STRICT)
    assert created["metadata"]["name"] == "signal-adapter"

    read = await admin.get(f"{templates(namespace)}/signal-adapter")
    assert read["spec"] == sent["spec"], "the WorkflowTemplate CRD schema pruned or changed a field"
    assert read["metadata"]["labels"] == sent["metadata"]["labels"]
    assert (read["apiVersion"], read["kind"]) == (ARGO, "WorkflowTemplate")


async def test_the_schema_is_the_full_one_so_a_pruned_field_would_be_caught(admin: KubeClient, namespace: str) -> None:
    """Control: with the minimal CRD (preserve-unknown-fields) the comparison above proves nothing."""
    body = copy.deepcopy(build_workflow_template())
    body["metadata"]["name"] = "pruning-probe"
    body["spec"]["templates"][0]["notAnArgoField"] = "x"
    with pytest.raises(ApiError) as rejected:
        await admin.request("POST", templates(namespace), body=body, params=STRICT)
    assert rejected.value.status == 400
    assert "notAnArgoField" in rejected.value.message
    await admin.create(templates(namespace), body)
    read = await admin.get(f"{templates(namespace)}/pruning-probe")
    assert "notAnArgoField" not in read["spec"]["templates"][0]


async def test_a_workflow_referencing_the_template_with_the_run_parameters_is_accepted(
    admin: KubeClient, namespace: str
) -> None:
    await admin.create(templates(namespace), build_workflow_template())
    arguments = workflow_arguments()
    sent = {
        "apiVersion": ARGO,
        "kind": "Workflow",
        "metadata": {"name": "r-1-attempt-1", "labels": {"app.kubernetes.io/name": "project-signal"}},
        "spec": {
            "workflowTemplateRef": {"name": "signal-adapter"},
            "activeDeadlineSeconds": 3600,
            "arguments": {"parameters": [{"name": k, "value": v} for k, v in arguments.items()]},
        },
    }
    created = await admin.request("POST", workflows(namespace), body=sent, params=STRICT)
    assert created["metadata"]["uid"]

    read = await admin.get(f"{workflows(namespace)}/r-1-attempt-1")
    assert read["spec"] == sent["spec"]
    received = {p["name"]: p["value"] for p in read["spec"]["arguments"]["parameters"]}
    assert received == arguments
    assert json.loads(received["checks"])[1]["name"] == "nccl"
