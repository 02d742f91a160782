"""CertificationProfile (cluster-scoped, written by operators): the API model.

Every bound of SPEC §3 lives here, in the pydantic model, and reaches the API server
through the generated CRD (OpenAPI bounds and CEL rules in ``json_schema_extra``), so a
bad profile is rejected by the API server and, again, by ``parse_profile``. Pure; no I/O.
"""

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from shared import keys
from shared.busynodes import BusyNodes
from shared.durations import DURATION_PATTERN
from shared.limits import MAX_PARTICIPANTS, MAX_RANKS
from shared.meta import (
    CONFIGMAP_KEY_PATTERN,
    Conditions,
    Digest,
    DnsLabel,
    DnsSubdomain,
    LabelSelector,
    ObjectMeta,
    WireModel,
)
from shared.quarantine import AdoptQuarantine, OnFail
from shared.workload import Parameters, WorkloadPolicy

MAX_CHECKS = 32
MAX_GPUS = 8
DEFAULT_FRESHNESS = "168h"
"""How old a Pass may be before the portal shows it Stale, for a profile with neither
``freshness`` nor ``recurrence`` (7 days)."""
_POSITIVE_DURATION = {"rule": "duration(self) > duration('0s')", "message": "must be positive"}

Duration = Annotated[
    str,
    Field(
        max_length=32,
        pattern=DURATION_PATTERN,
        json_schema_extra={"x-kubernetes-validations": [_POSITIVE_DURATION]},
    ),
]
Backend = Literal["Pod", "MPIJob"]
PARAMETER_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,62}$"
CHECK_IMAGE_PATTERN = r"^[a-z0-9]([-a-z0-9._:/]*[a-z0-9])?@sha256:[0-9a-f]{64}$"
"""A check's own image: a repository name pinned by digest (``name@sha256:<64 hex>``), never a
tag; the installation's allow-list compares the digest (docs/security.md)."""
MpiScope = Literal["perNode", "crossNode"]


class SourceRef(WireModel):
    """The operator-owned, immutable script ConfigMap and its pinned bundle digest."""

    namespace: DnsLabel
    """Namespace of the source ConfigMap."""
    name: DnsSubdomain
    """Name of the source ConfigMap; it must be ``immutable: true``."""
    digest: Digest
    """Canonical bundle digest of the ConfigMap (``sha256:<64 hex>``); see shared/digests.py."""


class Participants(WireModel):
    """Which requested Nodes may take part, and how many form one group."""

    selector: Annotated[
        LabelSelector,
        Field(
            json_schema_extra={
                "x-kubernetes-validations": [
                    {
                        "rule": "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
                        "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
                        "message": "selector must not be empty: an all-Node selector is not allowed",
                    }
                ]
            }
        ),
    ]
    """Non-empty label selector over Nodes already requested with node-restriction.kubernetes.io/signal.certify."""
    count: Annotated[int, Field(ge=1, le=MAX_PARTICIPANTS)]
    """Exact number of Nodes in one group (1..64)."""

    @field_validator("selector")
    @classmethod
    def _selector_not_empty(cls, value: LabelSelector) -> LabelSelector:
        if not value.match_labels and not value.match_expressions:
            raise ValueError("selector must not be empty: an all-Node selector is not allowed")
        return value


class MpiSpec(WireModel):
    """The MPI world of an MPIJob check."""

    scope: MpiScope = "perNode"
    """``perNode``: a launcher/worker pair per participant, a local world of
    ``slotsPerWorker`` ranks on that one Node; each participant's verdict comes from its own
    launcher. ``crossNode``: one MPIJob, one world across all participants (e.g. NCCL over
    InfiniBand), ``slotsPerWorker`` ranks on each Node."""
    slots_per_worker: Annotated[int, Field(ge=1, le=MAX_GPUS)] = 1
    """MPI ranks per Node (1..8, at most ``gpuCount`` when the check requests GPUs)."""


class Check(WireModel):
    """One ordered check of a suite."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "!has(self.mpi) || self.backend == 'MPIJob'", "message": "mpi is only for the MPIJob backend"},
                {"rule": "!has(self.image) || self.backend == 'Pod'", "message": "image is only for the Pod backend"},
                {
                    "rule": "!has(self.mpi) || !has(self.mpi.slotsPerWorker) || self.mpi.slotsPerWorker <= "
                    "(has(self.gpuCount) && self.gpuCount > 0 ? self.gpuCount : 1)",
                    "message": "mpi.slotsPerWorker may not exceed gpuCount (1 when the check requests no GPU)",
                },
            ]
        }
    )

    name: DnsLabel
    """Unique name of the check within the profile."""
    script_key: Annotated[str, Field(min_length=1, max_length=253, pattern=CONFIGMAP_KEY_PATTERN)]
    """Key of the script in the source ConfigMap."""
    backend: Backend
    """``Pod``: one Pod per participant. ``MPIJob``: one launcher and one worker per participant."""
    gpu_count: Annotated[int, Field(ge=0, le=MAX_GPUS)] = 0
    """GPUs (nvidia.com/gpu) per participant, 0..8."""
    backend_active_deadline: Duration
    """Deadline of the check's backend workloads, e.g. ``10m``."""
    workload: WorkloadPolicy = Field(default_factory=WorkloadPolicy)
    """Constrained workload policy."""
    mpi: MpiSpec | None = None
    """MPIJob checks only: the world's scope and ranks per Node (default: perNode, 1 rank)."""
    parameters: Parameters = Field(default_factory=dict)
    """At most 32 ``name: value`` strings (name ``^[A-Za-z][A-Za-z0-9_]{0,62}$``, value at
    most 1024 characters) the script reads as ``SIGNAL_PARAM_<NAME upper-cased>``; part of the
    Run's immutable copy of the check and of its evidence."""
    image: Annotated[str, Field(max_length=512, pattern=CHECK_IMAGE_PATTERN)] | None = None
    """Pod checks only: the operator's own image (``name@sha256:<digest>``, never a tag), whose
    digest the installation allows (the Signal Namespace's ``projectsignal.dev/check-images``);
    Signal's runner is injected into it from the runner image (docs/operator-guide.md: the
    image must have ``python3`` 3.10 or newer on its PATH). Unset: the runner image."""

    @field_validator("parameters")
    @classmethod
    def _parameter_names(cls, value: dict[str, str]) -> dict[str, str]:
        upper = [k.upper() for k in value]
        clashes = sorted({k for k in value if upper.count(k.upper()) > 1})
        if clashes:
            raise ValueError(f"parameters {', '.join(clashes)}: names must differ by more than case")
        return value

    @model_validator(mode="after")
    def _image_for_pods(self) -> "Check":
        if self.image is not None and self.backend != "Pod":
            raise ValueError(f"check {self.name!r}: image is only for the Pod backend (for now)")
        return self

    @model_validator(mode="after")
    def _mpi_fits(self) -> "Check":
        if self.mpi is None:
            return self
        if self.backend != "MPIJob":
            raise ValueError(f"check {self.name!r}: mpi is only for the MPIJob backend")
        if self.mpi.slots_per_worker > max(1, self.gpu_count):
            raise ValueError(
                f"check {self.name!r}: mpi.slotsPerWorker {self.mpi.slots_per_worker} exceeds gpuCount "
                f"{self.gpu_count} (one rank per GPU at most)"
            )
        return self

    @property
    def mpi_scope(self) -> MpiScope:
        return self.mpi.scope if self.mpi is not None else "perNode"

    @property
    def slots_per_worker(self) -> int:
        return self.mpi.slots_per_worker if self.mpi is not None else 1


Checks = Annotated[
    list[Check],
    Field(
        min_length=1,
        max_length=MAX_CHECKS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    ),
]


class FailureDomainBudget(WireModel):
    """At most ``max_nodes_under_test`` Nodes per value of ``topology_key`` under test at once."""

    topology_key: Annotated[str, Field(min_length=1, max_length=317)]
    """Node label whose value names the failure domain, e.g. topology.kubernetes.io/zone."""
    max_nodes_under_test: Annotated[int, Field(ge=1, le=MAX_PARTICIPANTS * 1024)]
    """Nodes of one domain that all live Runs together may hold, counted over whole groups."""


class Recurrence(WireModel):
    """Re-certify Nodes whose last result from this profile is older than ``interval``."""

    interval: Duration


class Retries(WireModel):
    """New attempts after an Inconclusive Run."""

    max_attempts: Annotated[int, Field(ge=1, le=10)] = 1
    """Total attempts including the first."""


class Retention(WireModel):
    """How many terminal Runs (and their evidence) to keep per profile."""

    keep_terminal_runs: Annotated[int, Field(ge=1, le=1000)] = 10


class ProfileSpec(WireModel):
    """What an operator asks Signal to certify, and how."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.checks.all(c, !has(c.mpi) || !has(c.mpi.scope) || c.mpi.scope != 'crossNode' || "
                    f"(has(c.mpi.slotsPerWorker) ? c.mpi.slotsPerWorker : 1) * self.participants.count <= {MAX_RANKS})",
                    "message": "a crossNode MPI world (participants x slotsPerWorker) may have at most "
                    f"{MAX_RANKS} ranks",
                }
            ]
        }
    )

    source: SourceRef
    participants: Participants
    checks: Checks
    """Ordered checks, 1..32, with unique names."""
    evidence_reserve: Duration = "5m"
    """Time added to the sum of check deadlines to form the suite deadline."""
    failure_domain_budget: FailureDomainBudget | None = None
    recurrence: Recurrence | None = None
    freshness: Duration | None = None
    """How old a Pass may be before the portal shows it Stale; default: ``recurrence.interval``,
    else DEFAULT_FRESHNESS (168h)."""
    retries: Retries = Field(default_factory=Retries)
    retention: Retention = Field(default_factory=Retention)
    adopt_quarantine: AdoptQuarantine | None = None
    """A health system's quarantine (cordon, taints) this profile certifies through and lifts
    after a Pass (shared/quarantine.py; issue 43, item 1)."""
    on_fail: OnFail | None = None
    """What a Fail leaves for a remediator besides its Node condition (issue 43, item 3)."""

    busy_nodes: BusyNodes = Field(default_factory=BusyNodes)
    """What happens to a requested Node still running other work (shared/busynodes.py)."""

    @field_validator("checks")
    @classmethod
    def _unique_check_names(cls, value: list[Check]) -> list[Check]:
        names = [c.name for c in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate check names: {', '.join(duplicates)}")
        return value

    @model_validator(mode="after")
    def _bounded_mpi_worlds(self) -> "ProfileSpec":
        for check in self.checks:
            ranks = self.participants.count * check.slots_per_worker
            if check.mpi_scope == "crossNode" and check.backend == "MPIJob" and ranks > MAX_RANKS:
                raise ValueError(
                    f"check {check.name!r}: a crossNode world of {self.participants.count} Nodes x "
                    f"{check.slots_per_worker} slots is {ranks} ranks; at most {MAX_RANKS}"
                )
        return self


class ProfileStatus(WireModel):
    """Observed state of a profile."""

    observed_generation: int | None = None
    conditions: Conditions = Field(default_factory=list)
    eligible_nodes: int | None = None
    """Requested Nodes eligible at the last admission attempt."""
    certified_nodes: Annotated[str, Field(max_length=1_000_000)] | None = None
    """Authoritative per-Node results (shared/certified.py), written only by the controller."""


class CertificationProfile(WireModel):
    """A certification suite an operator registers."""

    api_version: Literal["projectsignal.dev/v1alpha1"] = keys.API_VERSION
    kind: Literal["CertificationProfile"] = keys.PROFILE_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ProfileSpec
    status: ProfileStatus = Field(default_factory=ProfileStatus)

    @model_validator(mode="after")
    def _name_is_dns_label(self) -> "CertificationProfile":
        name = self.metadata.name
        if name and (len(name) > 63 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)):
            raise ValueError(f"metadata.name {name!r} must be a DNS label of at most 63 characters")
        return self
