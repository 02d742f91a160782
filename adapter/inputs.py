"""The adapter's inputs (Workflow parameters) and the checks that they agree with the Run
the adapter re-reads before acting. Pure; no I/O.

The adapter refuses to act (``Refusal``) when the Run is missing, terminal, cancelled, has
another uid, or when any parameter disagrees with the Run's immutable spec: the
Workflow's parameters are a convenience, the Run is the authority.
"""

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from shared import quarantine
from shared.profile import Check
from shared.run import TERMINAL_PHASES, Participant, Phase


class Refusal(RuntimeError):
    """The adapter must not act for this Run (the step fails with this message)."""


@dataclass(frozen=True)
class Inputs:
    run_namespace: str
    run_name: str
    run_uid: str
    participants: tuple[Participant, ...]
    snapshot: str
    check_index: int
    check: Check
    quarantine_tolerations: tuple[Mapping[str, str], ...] = ()
    """The tolerations of the quarantine the Run adopted (set from the Run: ``with_run``)."""


def parse_inputs(
    *,
    run_namespace: str,
    run_name: str,
    run_uid: str,
    participants_json: str,
    snapshot: str,
    check_index: str,
    check_json: str,
) -> Inputs:
    """Parse the Workflow parameters; raise Refusal with what is wrong."""
    try:
        raw_participants = json.loads(participants_json)
        participants = tuple(Participant.model_validate(p) for p in raw_participants)
        check = Check.model_validate(json.loads(check_json))
        index = int(check_index)
    except (ValueError, TypeError, ValidationError) as exc:
        raise Refusal(f"Run {run_namespace}/{run_name}: malformed Workflow parameters: {exc}") from exc
    if not participants:
        raise Refusal(f"Run {run_namespace}/{run_name}: participants-json is empty")
    return Inputs(run_namespace, run_name, run_uid, participants, snapshot, index, check)


def _compact(participants: Any) -> list[tuple[int, str, str]]:
    return sorted((int(p["index"]), str(p["nodeName"]), str(p["nodeUID"])) for p in participants)


def ended(run: dict[str, Any]) -> bool:
    """The Run is cancelled, terminal or being deleted: no check may start for it."""
    phase = (run.get("status") or {}).get("phase", Phase.PENDING.value)
    return bool(
        (run.get("spec") or {}).get("cancel")
        or run.get("metadata", {}).get("deletionTimestamp")
        or phase in {p.value for p in TERMINAL_PHASES}
    )


def validate_against_run(inputs: Inputs, run: dict[str, Any] | None, *, allow_ended: bool = False) -> None:
    """Raise Refusal unless ``run`` is the live, uncancelled Run these inputs describe
    (``allow_ended``: cancelled, terminal or being deleted is accepted, for cleanup only)."""
    where = f"Run {inputs.run_namespace}/{inputs.run_name}"
    if run is None:
        raise Refusal(f"{where} does not exist; nothing to do (was it deleted?)")
    meta, spec, status = run.get("metadata", {}), run.get("spec", {}), run.get("status") or {}
    if meta.get("uid") != inputs.run_uid:
        raise Refusal(f"{where} has uid {meta.get('uid')}, not {inputs.run_uid}: it was replaced")
    if meta.get("deletionTimestamp") and not allow_ended:
        raise Refusal(f"{where} is being deleted")
    if spec.get("cancel") and not allow_ended:
        raise Refusal(f"{where} is cancelled (spec.cancel is true)")
    phase = status.get("phase", Phase.PENDING.value)
    if phase in {p.value for p in TERMINAL_PHASES} and not allow_ended:
        raise Refusal(f"{where} is already {phase}")
    wanted = [(p.index, p.node_name, p.node_uid) for p in inputs.participants]
    if sorted(wanted) != _compact(spec.get("participants", [])):
        raise Refusal(f"{where}: participants-json does not match the Run's participants")
    checks = spec.get("checks", [])
    if not 0 <= inputs.check_index < len(checks):
        raise Refusal(f"{where} has {len(checks)} checks; check index {inputs.check_index} is out of range")
    try:
        expected = Check.model_validate(checks[inputs.check_index])
    except ValidationError as exc:
        raise Refusal(f"{where}: check {inputs.check_index} in the Run is invalid: {exc}") from exc
    if expected != inputs.check:
        raise Refusal(f"{where}: the check parameter differs from the Run's check {inputs.check_index}")
    if spec.get("source", {}).get("snapshotConfigMap") != inputs.snapshot:
        raise Refusal(f"{where}: snapshot {inputs.snapshot!r} is not the Run's snapshot ConfigMap")


def with_run(inputs: Inputs, run: Mapping[str, Any]) -> Inputs:
    """``inputs`` with what they take from the validated Run itself: the tolerations of the
    quarantine it adopted (shared/quarantine.py; issue 43, item 1)."""
    return dataclasses.replace(inputs, quarantine_tolerations=tuple(quarantine.tolerations(run.get("spec") or {})))
