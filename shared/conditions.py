"""Kubernetes-style conditions as plain dicts on the wire. Pure.

``set_condition`` keeps ``lastTransitionTime`` when the status does not change, records
``observedGeneration`` and truncates messages (kueue's coding guidelines)."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

MAX_MESSAGE = 1024


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    *,
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]]:
    value = status if isinstance(status, str) else ("True" if status else "False")
    previous = next((c for c in conditions if c.get("type") == type_), None)
    transition = (
        previous["lastTransitionTime"]
        if previous and previous.get("status") == value and previous.get("lastTransitionTime")
        else now.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    text = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
    updated: dict[str, Any] = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": text,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        updated["observedGeneration"] = generation
    return [dict(c) for c in conditions if c.get("type") != type_] + [updated]


def condition(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def is_true(conditions: Sequence[Mapping[str, Any]], type_: str) -> bool:
    found = condition(conditions, type_)
    return found is not None and found.get("status") == "True"
