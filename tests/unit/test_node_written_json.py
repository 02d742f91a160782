"""JSON that a Node's kubelet (or a portal caller) may write, read by every reader of it: text
nested too deep for Python's parser, or holding a number of more digits than it converts, is
read as absent or refused with the reader's own error, never an exception past the reader (one
Node must not stop a projection, a portal refresh, a release or a CLI listing)."""

import base64
from typing import Any

import pytest

from controller.rules.projection import recorded
from portal.health import node_health
from portal.pagination import MAX_TOKEN_LENGTH, TokenError, decode_token
from shared import keys
from signalctl.actions import reservation_of
from signalctl.nodeview import detail_of

PROFILE = "gpu"
UID = "run-uid"
HOSTILE = [
    pytest.param("[" * 2000, id="nested too deep for the parser"),
    pytest.param('{"run": ' + "9" * 5000 + "}", id="a number of 5000 digits"),
]


def _node(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "n",
            "uid": "node-uid",
            "labels": {keys.RESERVED_BY_LABEL: UID},
            "annotations": annotations,
        },
        "spec": {"taints": [{"key": keys.RESERVED_TAINT_KEY, "value": UID, "effect": "NoSchedule"}]},
        "status": {},
    }


@pytest.mark.parametrize("text", HOSTILE)
def test_a_nodes_certified_annotation_is_no_recorded_result(text: str) -> None:
    node = _node({keys.certified_label(PROFILE): text})
    assert recorded(node, PROFILE) is None
    assert detail_of(node, PROFILE) is None


@pytest.mark.parametrize("text", HOSTILE)
def test_a_nodes_reservation_annotation_names_no_run(text: str) -> None:
    node = _node({keys.RESERVATION_ANNOTATION: text})
    health = node_health(node)
    assert health.held is not None
    assert health.held.run_uid == UID
    assert health.held.run_name == ""
    assert reservation_of(node) is not None


def test_a_continue_token_nested_too_deep_is_an_invalid_token() -> None:
    raw = b"[" * 1500
    token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert len(token) <= MAX_TOKEN_LENGTH
    with pytest.raises(TokenError, match="invalid continue token"):
        decode_token(token)
