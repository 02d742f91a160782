"""Names of Signal's ValidatingAdmissionPolicies (deploy/base/*-admission-policy.yaml), the
contract between those manifests and the start-up checks of the adapter and the controller
(adapter/policy.py, controller/process/policy.py). Pure constants; no I/O.

A denial by a policy reads ``... ValidatingAdmissionPolicy '<name>' with binding '<binding>'
denied request: ...``; a start-up check recognises its policy by that name (or a name that
starts with it, as the per-namespace copies of the local test cluster are named)."""

from typing import Final

EVIDENCE_POLICY: Final = "signal-evidence"
"""Who may create, change and delete evidence ConfigMaps in the Signal namespace."""
ADAPTER_WORKLOADS_POLICY: Final = "signal-adapter-workloads"
"""What the adapter may put in the Pods and MPIJobs it creates."""
CONTROLLER_WORKFLOWS_POLICY: Final = "signal-controller-workflows"
"""The only Workflow the controller may create: the signal-adapter template's."""
SCRIPTS_POLICY: Final = "signal-scripts"
"""Who may create, change and delete a Run's script snapshot ConfigMap in the Signal namespace."""
ADAPTER_KUEUE_POLICY: Final = "signal-adapter-kueue"
"""The only Kueue Workloads the adapter may delete: its own pod groups' (issue 41 §4)."""
IDENTITIES_POLICY: Final = "signal-identities"
"""Who may run Pods as Signal's ServiceAccounts, write Argo objects and Signal's control objects
(the admission ledger, the leader Lease) in the Signal namespace."""

POLICY_FILES: Final = {
    ADAPTER_WORKLOADS_POLICY: "deploy/base/adapter-admission-policy.yaml",
    EVIDENCE_POLICY: "deploy/base/evidence-admission-policy.yaml",
    CONTROLLER_WORKFLOWS_POLICY: "deploy/base/workflow-admission-policy.yaml",
    SCRIPTS_POLICY: "deploy/base/scripts-admission-policy.yaml",
    IDENTITIES_POLICY: "deploy/base/identity-admission-policy.yaml",
    ADAPTER_KUEUE_POLICY: "deploy/base/adapter-kueue-admission-policy.yaml",
}
"""Where each policy and its binding are defined (repository-relative)."""

PROBE_NAME: Final = "signal-policy-probe"
"""Name stem of the objects the start-up checks send as server-side dry-runs (never stored)."""
EXIT_POLICY_NOT_IN_FORCE: Final = 4
"""Exit status of the adapter and the controller when a policy is not in force."""
