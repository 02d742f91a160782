"""controller/rules/nodes.py ``patch_basis`` and controller/reconcile/reservations.py ``reservable``: a
reservation decided on the informer's view of a Node is the very patch an uncached read of
that Node would give (same resourceVersion, labels, annotations and every taint field), and
the view is used only when it shows the Node free to reserve."""

from typing import Any

import pytest

from controller.reconcile.reservations import reservable
from controller.rules.manifests import reservation_patch
from controller.rules.nodes import RESERVED_TAINT_KEY, node_view, patch_basis
from controller.rules.runview import ParticipantRef
from shared import keys
from tests.unit.node_builders import make_node

RUN = {"metadata": {"name": "r-1", "namespace": "ns", "uid": "run-uid"}}


def _node(**changes: Any) -> dict[str, Any]:
    """A free, Ready candidate Node ``n`` (uid ``uid-n``, resourceVersion 4711), changed."""
    node = make_node("n").candidate("p").build()
    node["metadata"].update(uid="uid-n", resourceVersion="4711")
    for key, value in changes.items():
        if key == "taints":
            node.setdefault("spec", {})["taints"] = value
        elif key == "annotations":
            node["metadata"].setdefault("annotations", {}).update(value)
        elif key == "unschedulable":
            node.setdefault("spec", {})["unschedulable"] = value
        elif key == "reserved":
            node["metadata"]["labels"][keys.RESERVED_BY_LABEL] = value
        elif key == "uid":
            node["metadata"]["uid"] = value
        elif key == "ready":
            node["status"]["conditions"] = [{"type": "Ready", "status": str(value)}]
    return node


OPERATOR_TAINT = {
    "key": "example.com/maintenance",
    "value": "soon",
    "effect": "NoExecute",
    "timeAdded": "2026-12-01T10:00:00Z",
}
NODES = {
    "plain": _node(),
    "operator taints kept with every field": _node(
        taints=[OPERATOR_TAINT, {"key": "gpu", "effect": "PreferNoSchedule"}]
    ),
    "a leftover Signal taint is replaced": _node(
        taints=[{"key": RESERVED_TAINT_KEY, "value": "old", "effect": "NoSchedule"}]
    ),
    "a retry's attempt carried over": _node(annotations={keys.ATTEMPT_ANNOTATION: "p:3"}),
    "a malformed attempt carried over as it is": _node(annotations={keys.ATTEMPT_ANNOTATION: "not-an-attempt"}),
    "other annotations are not the patch's business": _node(annotations={"example.com/x": "y"}),
    "an operator's do-not-disrupt annotation is kept as it is": _node(
        annotations={keys.AUTOSCALER_SCALE_DOWN_DISABLED: "true"}
    ),
}


@pytest.mark.parametrize("node", NODES.values(), ids=NODES.keys())
def test_a_patch_from_the_view_is_the_patch_from_the_node(node: dict[str, Any]) -> None:
    from_view = reservation_patch(patch_basis(node_view(node)), RUN, 3)
    assert from_view == reservation_patch(node, RUN, 3)
    assert from_view["metadata"]["resourceVersion"] == "4711"


REF = ParticipantRef(index=0, node_name="n", node_uid="uid-n")
FREE = _node()


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        pytest.param(FREE, True, id="free and Ready"),
        pytest.param(
            _node(
                reserved="another-run",
                taints=[{"key": RESERVED_TAINT_KEY, "value": "another-run", "effect": "NoSchedule"}],
            ),
            False,
            id="reserved",
        ),
        pytest.param(_node(reserved="another-run"), True, id="a reservation label alone (the kubelet's) holds nothing"),
        pytest.param(_node(unschedulable=True), False, id="cordoned by someone"),
        pytest.param(_node(ready=False), False, id="not Ready"),
        pytest.param(_node(uid="uid-other"), False, id="replaced (another uid)"),
    ],
)
def test_only_a_view_showing_the_node_free_is_acted_on(node: dict[str, Any], expected: bool) -> None:
    assert reservable(node_view(node), REF) is expected
