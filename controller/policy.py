"""The controller's start-up check (docs/security.md): before it acts, prove with server-side
dry-runs in its namespace that the admission policies it relies on are in force there, and
refuse to run otherwise:

* ``signal-controller-workflows``: a Workflow with a podSpecPatch (beside the signal-adapter
  template reference) is denied, so this identity can start only Signal's Workflow;
* ``signal-evidence``: a ConfigMap named like a Run's evidence document but without the
  Run's labels, owner and immutability is denied, so no one else can write evidence that
  acceptance reads."""

from kubeio.admission import Probe, prove_all_denied
from kubeio.client import Kube, resource_path
from shared import keys, policies

EVIDENCE_PROBE_NAME = f"{policies.PROBE_NAME}-evidence"


def probes(namespace: str) -> list[Probe]:
    workflow = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": policies.PROBE_NAME, "namespace": namespace},
        "spec": {"workflowTemplateRef": {"name": keys.WORKFLOW_TEMPLATE}, "podSpecPatch": "{}"},
    }
    evidence = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": EVIDENCE_PROBE_NAME, "namespace": namespace},
        "data": {"probe": "a Run evidence ConfigMap without the Run's labels, owner or immutability"},
    }
    return [
        Probe(
            policies.CONTROLLER_WORKFLOWS_POLICY,
            f"Workflow {policies.PROBE_NAME} (with a podSpecPatch)",
            resource_path("argoproj.io/v1alpha1", "workflows", namespace),
            workflow,
            policies.POLICY_FILES[policies.CONTROLLER_WORKFLOWS_POLICY],
        ),
        Probe(
            policies.EVIDENCE_POLICY,
            f"ConfigMap {EVIDENCE_PROBE_NAME} (evidence without labels, owner or immutable: true)",
            resource_path("v1", "configmaps", namespace),
            evidence,
            policies.POLICY_FILES[policies.EVIDENCE_POLICY],
        ),
    ]


async def require_policies(kube: Kube, namespace: str, *, wait_seconds: float) -> None:
    """Raise ``kubeio.admission.PolicyNotInForce`` unless both policies deny their probe."""
    await prove_all_denied(kube, probes(namespace), namespace, wait_seconds=wait_seconds)
