"""Where backend Pods may run, as required node affinity (pure): on named Nodes (a kubelet
can change its own Node's labels, never its name), or on no Node under test (the adapter's step
Pods and a ``crossNode`` MPI launcher, whose report speaks for every participant)."""

from typing import Any, Final

from shared import keys

NODE_NAME_FIELD: Final = "metadata.name"


NOT_UNDER_TEST: Final = ((keys.CERTIFY_LABEL, "DoesNotExist"), (keys.RESERVED_BY_LABEL, "DoesNotExist"))
"""(label key, operator) requirements, ANDed, of a Node that is neither requested for
certification nor reserved by a Run: the only Nodes where the adapter's step Pods
(``adapter.workflow_template``) and a ``crossNode`` MPI launcher may run."""


def off_nodes_under_test(participants: list[str]) -> dict[str, Any]:
    """Required node affinity, one term: ``NOT_UNDER_TEST`` and none of ``participants`` by
    name (a kubelet can remove its own Node's labels but never change its name; one value per
    field selector, the requirements of a term are ANDed)."""
    expressions = [{"key": key, "operator": operator} for key, operator in NOT_UNDER_TEST]
    fields = [{"key": NODE_NAME_FIELD, "operator": "NotIn", "values": [node]} for node in participants]
    term = {"matchExpressions": expressions, "matchFields": fields}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def node_affinity(nodes: list[str]) -> dict[str, Any]:
    """Required node affinity on the Nodes' names (kubelets cannot change a Node's name): one
    term per Node (the terms are ORed; the API server allows one value per field selector)."""
    terms = [{"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}]} for node in nodes]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
