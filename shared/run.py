"""CertificationRun (namespaced, created only by the controller): the API model.

The spec is an immutable record of what was admitted; CEL rules in the generated CRD
make the API server refuse any change except ``cancel`` and ``release`` going from false
to true. The status is compact: measurements and identities live in the evidence
document. Pure; no I/O.
"""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, JsonValue

from shared import keys
from shared.busynodes import BusyNodes
from shared.limits import MAX_PARTICIPANTS
from shared.meta import (
    Conditions,
    Digest,
    DnsLabel,
    DnsSubdomain,
    ObjectMeta,
    ResourceMap,
    Uid,
    WireModel,
)
from shared.profile import Checks
from shared.quarantine import Adopted, AdoptQuarantine, OnFail
from shared.verdict import Verdict as Verdict  # noqa: PLC0414 - re-exported; stdlib-only home

_IMMUTABLE = {"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "is immutable"}]}


class Phase(StrEnum):
    """Lifecycle phase of a Run (SPEC §3)."""

    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"
    CANCELED = "Canceled"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.INCONCLUSIVE, Phase.CANCELED})


class ProfileRef(WireModel):
    """The profile (and its exact generation) a Run was admitted from."""

    name: DnsLabel
    uid: Uid
    generation: Annotated[int, Field(ge=1)]


class SourceSnapshot(WireModel):
    """The verified source digest and the Run-owned snapshot ConfigMap holding its bytes."""

    digest: Digest
    snapshot_config_map: DnsSubdomain


class Participant(WireModel):
    """One admitted Node, bound by index, name and immutable uid."""

    index: Annotated[int, Field(ge=0, lt=MAX_PARTICIPANTS)]
    node_name: DnsSubdomain
    node_uid: Annotated[Uid, Field(alias="nodeUID")]
    capacity: ResourceMap = Field(default_factory=dict)
    """The Node's capacity at admission."""
    allocatable: ResourceMap = Field(default_factory=dict)
    """The Node's allocatable resources at admission."""
    adopted: Adopted | None = None
    """The quarantine the Run adopted on this Node (shared/quarantine.py): lifted only when the
    Node is released after a Pass."""


Participants = Annotated[
    list[Participant],
    Field(
        min_length=1,
        max_length=MAX_PARTICIPANTS,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["index"],
            **_IMMUTABLE,
        },
    ),
]


RUN_SPEC_RULES: list[JsonValue] = [
    {
        "rule": "!oldSelf.cancel || self.cancel",
        "message": "cancel may only go from false to true",
        "fieldPath": ".cancel",
    },
    {
        "rule": "!oldSelf.release || self.release",
        "message": "release may only go from false to true",
        "fieldPath": ".release",
    },
    # The quarantine a Run adopts is fixed at its creation: never added later (a transition rule
    # on the field itself does not run when it was absent).
    {"rule": "has(oldSelf.adoptQuarantine) == has(self.adoptQuarantine)", "message": "is immutable"},
    {"rule": "has(oldSelf.onFail) == has(self.onFail)", "message": "is immutable"},
]


class RunSpec(WireModel):
    """What was admitted. Immutable except ``cancel`` and ``release`` (false to true only)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": RUN_SPEC_RULES})

    profile: Annotated[ProfileRef, Field(json_schema_extra=_IMMUTABLE)]
    checks: Annotated[Checks, Field(json_schema_extra=_IMMUTABLE)]
    """Immutable copy of the profile's checks at admission."""
    source: Annotated[SourceSnapshot, Field(json_schema_extra=_IMMUTABLE)]
    participants: Participants
    """Participants ordered by index."""
    suite_deadline_seconds: Annotated[int, Field(ge=1, le=7 * 24 * 3600, json_schema_extra=_IMMUTABLE)]
    """Sum of check deadlines plus the profile's evidence reserve."""
    attempt: Annotated[int, Field(ge=1, le=10, json_schema_extra=_IMMUTABLE)] = 1
    adopt_quarantine: Annotated[AdoptQuarantine | None, Field(json_schema_extra=_IMMUTABLE)] = None
    """Immutable copy of the profile's ``adoptQuarantine`` at admission."""
    on_fail: Annotated[OnFail | None, Field(json_schema_extra=_IMMUTABLE)] = None
    """Immutable copy of the profile's ``onFail`` at admission."""
    cancel: bool = False
    """Ask Signal to stop the Run. May only go from false to true."""
    release: bool = False
    """Release the group of a terminal Run. May only go from false to true."""
    busy_nodes: Annotated[BusyNodes | None, Field(json_schema_extra=_IMMUTABLE)] = None
    """The profile's ``busyNodes`` at admission, when its policy is not ``none``."""


class WorkflowRef(WireModel):
    name: DnsSubdomain
    uid: Uid | None = None


class EvidenceRef(WireModel):
    """Where the evidence document is and what its digest is."""

    config_map: DnsSubdomain
    digest: Digest
    bytes: Annotated[int, Field(ge=0)]


class CheckVerdict(WireModel):
    name: DnsLabel
    verdict: Verdict


class RunStatus(WireModel):
    """Compact observed state of a Run."""

    phase: Phase = Phase.PENDING
    reason: Annotated[str, Field(max_length=256)] | None = None
    message: Annotated[str, Field(max_length=4096)] | None = None
    observed_generation: int | None = None
    conditions: Conditions = Field(default_factory=list)
    workflow: WorkflowRef | None = None
    evidence: EvidenceRef | None = None
    start_time: datetime | None = None
    completion_time: datetime | None = None
    check_verdicts: Annotated[list[CheckVerdict], Field(max_length=32)] = Field(default_factory=list)
    workflow_resubmits: Annotated[int, Field(ge=0, le=100)] | None = None
    """How many times the controller replaced a finished Workflow that left backend workloads
    behind (controller/reconcile/runs.py); bounded, then the workloads are left to the operator."""


class CertificationRun(WireModel):
    """One admitted group of Nodes going through one profile's checks."""

    api_version: Literal["projectsignal.dev/v1alpha1"] = keys.API_VERSION
    kind: Literal["CertificationRun"] = keys.RUN_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: RunSpec
    status: RunStatus = Field(default_factory=RunStatus)


def may_have_mpijobs(checks: object) -> bool:
    """Whether a Run whose ``spec.checks`` (raw) is ``checks`` may have MPIJobs: unless every
    check names the ``Pod`` backend (then no MPIJob of the Run can exist: the adapter creates
    one only for an MPIJob check of the Run), True. Fail closed: a check without a backend, or
    checks that are not a list, count as possibly MPIJob. Pure."""
    if not isinstance(checks, list):
        return True
    return not all(isinstance(c, dict) and c.get("backend") == "Pod" for c in checks)
