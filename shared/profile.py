"""CertificationProfile (cluster-scoped, written by operators): the API model.

Every bound of SPEC §3 lives here, in the pydantic model, and reaches the API server
through the generated CRD (OpenAPI bounds and CEL rules in ``json_schema_extra``), so a
bad profile is rejected by the API server and, again, by ``parse_profile``. Pure; no I/O.
"""

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from shared import keys
from shared.durations import DURATION_PATTERN
from shared.meta import (
    CONFIGMAP_KEY_PATTERN,
    RESOURCE_NAME_PATTERN,
    Conditions,
    Digest,
    DnsLabel,
    DnsSubdomain,
    LabelSelector,
    ObjectMeta,
    Quantity,
    WireModel,
)

MAX_PARTICIPANTS = 64
MAX_CHECKS = 32
MAX_GPUS = 8
ALLOWED_CAPABILITIES = ("IPC_LOCK", "SYS_NICE", "SYS_RESOURCE")
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
Capability = Literal["IPC_LOCK", "SYS_NICE", "SYS_RESOURCE"]


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
    """Non-empty label selector over Nodes already requested with projectsignal.dev/certify."""
    count: Annotated[int, Field(ge=1, le=MAX_PARTICIPANTS)]
    """Exact number of Nodes in one group (1..64)."""

    @field_validator("selector")
    @classmethod
    def _selector_not_empty(cls, value: LabelSelector) -> LabelSelector:
        if not value.match_labels and not value.match_expressions:
            raise ValueError("selector must not be empty: an all-Node selector is not allowed")
        return value


ExtendedResources = Annotated[
    dict[
        Annotated[str, Field(max_length=253, pattern=RESOURCE_NAME_PATTERN)],
        Annotated[int, Field(ge=1, le=1024)],
    ],
    Field(
        json_schema_extra={
            "maxProperties": 16,
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(k, k.contains('/') && k != 'nvidia.com/gpu' && "
                    f"k.matches(r'{RESOURCE_NAME_PATTERN}'))",
                    "message": "keys must be extended resources (domain/name) other than nvidia.com/gpu; use gpuCount",
                }
            ],
        }
    ),
]


class WorkloadPolicy(WireModel):
    """The constrained part of a backend Pod an operator may shape. Nothing else."""

    cpu: Quantity | None = None
    """CPU request (and limit) per participant Pod."""
    memory: Quantity | None = None
    """Memory request (and limit) per participant Pod."""
    extended_resources: ExtendedResources = Field(default_factory=dict)
    """Extra extended resources per participant, e.g. ``rdma/ib: 1``."""
    host_network: bool = False
    """Run the backend Pods in the host network namespace."""
    capabilities: Annotated[list[Capability], Field(max_length=len(ALLOWED_CAPABILITIES))] = Field(default_factory=list)
    """Linux capabilities to add, from a fixed allow-list."""
    kueue_queue_name: DnsSubdomain | None = None
    """Kueue LocalQueue name, set as the ``kueue.x-k8s.io/queue-name`` label."""

    @field_validator("extended_resources")
    @classmethod
    def _extended_resources(cls, value: dict[str, int]) -> dict[str, int]:
        for key in value:
            if "/" not in key or key == keys.GPU_RESOURCE:
                raise ValueError(
                    f"{key!r}: extended resources must be domain-qualified; use gpuCount for {keys.GPU_RESOURCE}"
                )
        return value


class Check(WireModel):
    """One ordered check of a suite."""

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

    source: SourceRef
    participants: Participants
    checks: Checks
    """Ordered checks, 1..32, with unique names."""
    evidence_reserve: Duration = "5m"
    """Time added to the sum of check deadlines to form the suite deadline."""
    failure_domain_budget: FailureDomainBudget | None = None
    recurrence: Recurrence | None = None
    retries: Retries = Field(default_factory=Retries)
    retention: Retention = Field(default_factory=Retention)

    @field_validator("checks")
    @classmethod
    def _unique_check_names(cls, value: list[Check]) -> list[Check]:
        names = [c.name for c in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate check names: {', '.join(duplicates)}")
        return value


class ProfileStatus(WireModel):
    """Observed state of a profile."""

    observed_generation: int | None = None
    conditions: Conditions = Field(default_factory=list)
    eligible_nodes: int | None = None
    """Requested Nodes eligible at the last admission attempt."""


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
