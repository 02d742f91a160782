"""Label selector matching (matchLabels and matchExpressions), as the API server does. Pure."""

from collections.abc import Mapping

from shared.meta import LabelSelector


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for expression in selector.match_expressions:
        present = expression.key in labels
        value = labels.get(expression.key, "")
        match expression.operator:
            case "In":
                ok = present and value in expression.values
            case "NotIn":
                ok = not present or value not in expression.values
            case "Exists":
                ok = present
            case "DoesNotExist":
                ok = not present
        if not ok:
            return False
    return True
