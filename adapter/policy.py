"""The adapter's start-up check (docs/security.md): before it creates anything, prove with
server-side dry-runs in the Run's namespace that the admission policies it relies on are in
force there, and refuse to run otherwise:

* ``signal-evidence``: a ConfigMap named like check results but without the Run's labels,
  owner and immutability is denied (so no one else could have pre-created results or
  evidence that this check would adopt);
* ``signal-adapter-workloads``: a Pod that keeps the default API token is denied (so a
  backend Pod never carries one).

The dry-run objects are otherwise acceptable (a Pod that Pod Security ``restricted`` admits),
so that only the policy can be what refuses them."""

from kubeio.admission import Probe, config_map_probe, prove_all_denied
from kubeio.client import Kube, resource_path
from shared import policies

EVIDENCE_PROBE_NAME = f"{policies.PROBE_NAME}-c0-results"


def probes(namespace: str) -> list[Probe]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": policies.PROBE_NAME, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "probe",
                    "image": "signal-policy-probe.invalid/never-pulled:0",
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    return [
        config_map_probe(
            policies.EVIDENCE_POLICY,
            policies.POLICY_FILES[policies.EVIDENCE_POLICY],
            namespace,
            EVIDENCE_PROBE_NAME,
            "a check's results",
        ),
        Probe(
            policies.ADAPTER_WORKLOADS_POLICY,
            f"Pod {policies.PROBE_NAME} (keeps an API token)",
            resource_path("v1", "pods", namespace),
            pod,
            policies.POLICY_FILES[policies.ADAPTER_WORKLOADS_POLICY],
        ),
    ]


async def require_policies(kube: Kube, namespace: str, *, wait_seconds: float) -> None:
    """Raise ``kubeio.admission.PolicyNotInForce`` unless both policies deny their probe."""
    await prove_all_denied(kube, probes(namespace), namespace, wait_seconds=wait_seconds)
