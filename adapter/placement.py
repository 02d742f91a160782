"""Where backend Pods may run, as required node affinity (pure): on named Nodes (a kubelet
can change its own Node's labels, never its name), or on no Node under test (the adapter's step
Pods and a ``crossNode`` MPI launcher, whose report speaks for every participant)."""

from collections.abc import Mapping
from typing import Any, Final

from shared import keys
from shared.certified import TRUSTED_LABEL_PREFIX

NODE_NAME_FIELD: Final = "metadata.name"


NOT_UNDER_TEST: Final = ((keys.CERTIFY_LABEL, "DoesNotExist"), (keys.RESERVED_BY_LABEL, "DoesNotExist"))
"""(label key, operator) requirements, ANDed, of a Node that is neither requested for
certification nor reserved by a Run: the only Nodes where the adapter's step Pods
(``adapter.workflow_template``) and a ``crossNode`` MPI launcher may run."""


TRUSTED_SELECTOR_ENV: Final = "SIGNAL_TRUSTED_NODE_SELECTOR"
"""The trusted Nodes' labels (``key=value,...``), for the adapter's step Pods (the WorkflowTemplate's
``nodeSelector``) and its ``crossNode`` launchers alike; set by the WorkflowTemplate."""


class PlacementError(ValueError):
    """A trusted-node selector that a kubelet could satisfy on its own, or malformed."""


def parse_trusted_selector(text: str) -> dict[str, str]:
    """``key=value,...`` into labels; at least one key under ``node-restriction.kubernetes.io/``,
    the only prefix NodeRestriction forbids a kubelet to set on its own Node (a selector on other
    labels alone lets a compromised Node make itself trusted). Empty text: no selector."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PlacementError(f"trusted-node selector item {item!r} is not key=value")
        labels[key] = value
    check_trusted(labels)
    return labels


def check_trusted(labels: Mapping[str, str]) -> None:
    """Raise PlacementError unless at least one key (with a value) is one a kubelet cannot set:
    a selector is ANDed, so that key alone proves an admin labelled the Node; other keys (an
    operator's pool label) may narrow it further but never stand alone."""
    if labels and not any(key.startswith(TRUSTED_LABEL_PREFIX) and value for key, value in labels.items()):
        raise PlacementError(
            f"a trusted-node selector needs a label under {TRUSTED_LABEL_PREFIX} (a kubelet can set any other "
            f"label on its own Node), got {', '.join(sorted(labels))}; label the trusted Nodes with such a key as "
            "a cluster admin"
        )


def off_nodes_under_test(participants: list[str], trusted: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Required node affinity, one term: ``NOT_UNDER_TEST``, the ``trusted`` Nodes' labels
    (``key In [value]``, when an operator marked them) and none of ``participants`` by name (a
    kubelet can remove its own Node's labels but never change its name; one value per field
    selector, the requirements of a term are ANDed)."""
    expressions: list[dict[str, Any]] = [{"key": key, "operator": operator} for key, operator in NOT_UNDER_TEST]
    expressions += [{"key": key, "operator": "In", "values": [value]} for key, value in sorted((trusted or {}).items())]
    fields = [{"key": NODE_NAME_FIELD, "operator": "NotIn", "values": [node]} for node in participants]
    term = {"matchExpressions": expressions, "matchFields": fields}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def node_affinity(nodes: list[str]) -> dict[str, Any]:
    """Required node affinity on the Nodes' names (kubelets cannot change a Node's name): one
    term per Node (the terms are ORed; the API server allows one value per field selector)."""
    terms = [{"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}]} for node in nodes]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
