"""The controller's start-up check (docs/security.md): before it acts, prove with server-side
dry-runs in its namespace that the admission policies it relies on are in force there, and
refuse to run otherwise:

* ``signal-controller-workflows``: a Workflow with a podSpecPatch (beside the signal-adapter
  template reference) is denied, so this identity can start only Signal's Workflow;
* ``signal-evidence``: a ConfigMap named like a Run's evidence document but without the
  Run's labels, owner and immutability is denied, so no one else can write evidence that
  acceptance reads."""

from kubeio.admission import Probe, config_map_probe, prove_all_denied
from kubeio.client import Kube, resource_path
from shared import keys, policies

EVIDENCE_PROBE_NAME = f"{policies.PROBE_NAME}-evidence"


def probes(namespace: str) -> list[Probe]:
    workflow = {
        "apiVersion": keys.ARGO_API_VERSION,
        "kind": "Workflow",
        "metadata": {"name": policies.PROBE_NAME, "namespace": namespace},
        "spec": {"workflowTemplateRef": {"name": keys.WORKFLOW_TEMPLATE}, "podSpecPatch": "{}"},
    }
    return [
        Probe(
            policies.CONTROLLER_WORKFLOWS_POLICY,
            f"Workflow {policies.PROBE_NAME} (with a podSpecPatch)",
            resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, namespace),
            workflow,
            policies.POLICY_FILES[policies.CONTROLLER_WORKFLOWS_POLICY],
        ),
        config_map_probe(
            policies.EVIDENCE_POLICY,
            policies.POLICY_FILES[policies.EVIDENCE_POLICY],
            namespace,
            EVIDENCE_PROBE_NAME,
            "a Run's evidence",
        ),
    ]


async def require_policies(kube: Kube, namespace: str, *, wait_seconds: float) -> None:
    """Raise ``kubeio.admission.PolicyNotInForce`` unless both policies deny their probe."""
    await prove_all_denied(kube, probes(namespace), namespace, wait_seconds=wait_seconds)
