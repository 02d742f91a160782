"""controller/rules/selectors.py: label selectors as the API server evaluates them."""

from typing import Any

import pytest

from controller.rules.selectors import matches
from shared.meta import LabelSelector


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        # matchLabels
        pytest.param({"matchLabels": {"pool": "gpu"}}, {"pool": "gpu"}, True, id="matchLabels: equal value"),
        pytest.param(
            {"matchLabels": {"pool": "gpu"}}, {"pool": "gpu", "x": "y"}, True, id="matchLabels: extra labels are fine"
        ),
        pytest.param({"matchLabels": {"pool": "gpu"}}, {"pool": "cpu"}, False, id="matchLabels: other value"),
        pytest.param({"matchLabels": {"pool": "gpu"}}, {}, False, id="matchLabels: key absent"),
        pytest.param({"matchLabels": {"pool": ""}}, {"pool": ""}, True, id="matchLabels: empty value equals empty"),
        pytest.param({"matchLabels": {"pool": ""}}, {}, False, id="matchLabels: empty value needs the key present"),
        pytest.param(
            {"matchLabels": {"pool": "gpu", "tier": "a"}},
            {"pool": "gpu", "tier": "b"},
            False,
            id="matchLabels: every pair must match",
        ),
        pytest.param({"matchLabels": {"pool": "gpu"}}, {"pool": "GPU"}, False, id="matchLabels: case-sensitive"),
        # In
        pytest.param({"matchExpressions": [_expr("zone", "In", "a", "b")]}, {"zone": "b"}, True, id="In: member"),
        pytest.param(
            {"matchExpressions": [_expr("zone", "In", "a", "b")]}, {"zone": "c"}, False, id="In: not a member"
        ),
        pytest.param({"matchExpressions": [_expr("zone", "In", "a")]}, {}, False, id="In: key absent never matches"),
        pytest.param(
            {"matchExpressions": [_expr("zone", "In", "")]},
            {},
            False,
            id="In: key absent does not match even the empty value",
        ),
        pytest.param(
            {"matchExpressions": [_expr("zone", "In", "")]},
            {"zone": ""},
            True,
            id="In: present empty value matches the empty value",
        ),
        # NotIn
        pytest.param({"matchExpressions": [_expr("zone", "NotIn", "a")]}, {"zone": "b"}, True, id="NotIn: other"),
        pytest.param({"matchExpressions": [_expr("zone", "NotIn", "a")]}, {"zone": "a"}, False, id="NotIn: member"),
        pytest.param({"matchExpressions": [_expr("zone", "NotIn", "a")]}, {}, True, id="NotIn: key absent matches"),
        pytest.param(
            {"matchExpressions": [_expr("zone", "NotIn", "")]},
            {},
            True,
            id="NotIn empty value: key absent still matches",
        ),
        # Exists / DoesNotExist
        pytest.param({"matchExpressions": [_expr("gpu", "Exists")]}, {"gpu": ""}, True, id="Exists: empty value"),
        pytest.param({"matchExpressions": [_expr("gpu", "Exists")]}, {"gpu": "h100"}, True, id="Exists: any value"),
        pytest.param({"matchExpressions": [_expr("gpu", "Exists")]}, {"other": "x"}, False, id="Exists: absent"),
        pytest.param({"matchExpressions": [_expr("bad", "DoesNotExist")]}, {}, True, id="DoesNotExist: absent"),
        pytest.param(
            {"matchExpressions": [_expr("bad", "DoesNotExist")]}, {"bad": ""}, False, id="DoesNotExist: present empty"
        ),
        # combinations
        pytest.param(
            {
                "matchLabels": {"pool": "gpu"},
                "matchExpressions": [_expr("zone", "In", "a", "b"), _expr("maint", "DoesNotExist")],
            },
            {"pool": "gpu", "zone": "a"},
            True,
            id="labels and expressions all satisfied",
        ),
        pytest.param(
            {
                "matchLabels": {"pool": "gpu"},
                "matchExpressions": [_expr("zone", "In", "a", "b"), _expr("maint", "DoesNotExist")],
            },
            {"pool": "gpu", "zone": "a", "maint": "now"},
            False,
            id="one failing expression fails the selector",
        ),
        pytest.param(
            {"matchLabels": {"pool": "cpu"}, "matchExpressions": [_expr("zone", "Exists")]},
            {"pool": "gpu", "zone": "a"},
            False,
            id="matchLabels failing fails despite expressions",
        ),
        pytest.param(
            {"matchExpressions": [_expr("zone", "In", "a"), _expr("zone", "NotIn", "a")]},
            {"zone": "a"},
            False,
            id="contradictory expressions match nothing",
        ),
        pytest.param({}, {"any": "thing"}, True, id="an empty selector (rejected by the profile model) matches all"),
    ],
)
def test_matches(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert matches(LabelSelector.model_validate(selector), labels) is expected
