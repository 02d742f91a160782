"""The workload settings of a check (``Check.workload``) and its parameters: the constrained
part of a backend Pod an operator may shape (issue 44). Pure; no I/O. Each setting is bounded
here (and so in the CRD) and, where the installation decides what is allowed (capabilities,
runtime classes, secondary networks), enforced again by the adapter's admission policy
(deploy/base/adapter-admission-policy.yaml; docs/security.md).
"""

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from shared import keys
from shared.limits import PARAMETER_ENV_PREFIX
from shared.meta import RESOURCE_NAME_PATTERN, DnsSubdomain, ReadableQuantity, WireModel
from shared.quantity import parse_quantity

ALLOWED_CAPABILITIES = ("IPC_LOCK", "SYS_NICE", "SYS_RESOURCE")
Capability = Literal["IPC_LOCK", "SYS_NICE", "SYS_RESOURCE"]
MAX_TOLERATIONS = 8
MAX_PARAMETERS = 32
MAX_PARAMETER_VALUE_CHARS = 1024
MAX_NETWORKS = 8
MAX_SHM_BYTES = 64 * 1024**3
# Taints a check may never tolerate: Signal's own (its workloads tolerate exactly their Run's
# cordon, nothing else of Signal's) and the Node lifecycle taints (not-ready, unreachable,
# unschedulable, pressure...), which say the Node is unfit or cordoned by someone else.
FORBIDDEN_TOLERATION_PREFIXES = (f"{keys.GROUP}/", "node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
_TAINT_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
PARAMETER_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,62}$"


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


class Toleration(WireModel):
    """One taint of the Nodes' own (e.g. ``nvidia.com/gpu:NoSchedule``) that the check's
    backend Pods tolerate. Always a named key: no wildcard toleration, no
    ``tolerationSeconds``, never Signal's own taints nor the Node lifecycle taints
    (``node.kubernetes.io/...``)."""

    key: Annotated[
        str,
        Field(
            min_length=1,
            max_length=317,
            pattern=_TAINT_KEY_PATTERN,
            json_schema_extra={
                "x-kubernetes-validations": [
                    {
                        "rule": " && ".join(f"!self.startsWith('{p}')" for p in FORBIDDEN_TOLERATION_PREFIXES),
                        "message": "Signal's own taints (projectsignal.dev/) and the Node lifecycle taints "
                        "(node.kubernetes.io/, node.cloudprovider.kubernetes.io/) may not be tolerated",
                    }
                ]
            },
        ),
    ]
    """Taint key, e.g. ``nvidia.com/gpu``."""
    operator: Literal["Equal", "Exists"] = "Equal"
    """``Equal`` (the taint's value must be ``value``) or ``Exists`` (any value)."""
    value: Annotated[str, Field(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")] = ""
    """Taint value for ``Equal``; must be empty for ``Exists``."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    """The taint's effect (required: a toleration covers exactly one effect)."""

    @model_validator(mode="after")
    def _valid(self) -> "Toleration":
        if self.key.startswith(FORBIDDEN_TOLERATION_PREFIXES):
            raise ValueError(
                f"toleration {self.key!r}: Signal's own taints and the Node lifecycle taints may not be tolerated"
            )
        if self.operator == "Exists" and self.value:
            raise ValueError(f"toleration {self.key!r}: operator Exists takes no value")
        return self


Tolerations = Annotated[
    list[Toleration],
    Field(
        max_length=MAX_TOLERATIONS,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(t, t.operator != 'Exists' || !has(t.value) || t.value == '')",
                    "message": "a toleration with operator Exists takes no value",
                }
            ]
        },
    ),
]


def parameter_env_name(name: str) -> str:
    """The environment variable that carries parameter ``name`` to the script."""
    return PARAMETER_ENV_PREFIX + name.upper()


Parameters = Annotated[
    dict[
        Annotated[str, Field(min_length=1, max_length=63, pattern=PARAMETER_NAME_PATTERN)],
        Annotated[str, Field(max_length=MAX_PARAMETER_VALUE_CHARS, pattern=r"^[^\x00]*$")],
    ],
    Field(
        max_length=MAX_PARAMETERS,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.all(k, k.matches(r'{PARAMETER_NAME_PATTERN}'))",
                    "message": f"parameter names must match {PARAMETER_NAME_PATTERN}",
                },
                {
                    "rule": "self.all(k, self.filter(j, j.upperAscii() == k.upperAscii()).size() == 1)",
                    "message": "parameter names must differ by more than case (each becomes SIGNAL_PARAM_<NAME>)",
                },
            ],
        },
    ),
]
NetworkName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(@[a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
    ),
]
"""A Multus network attachment: ``name``, ``namespace/name`` or ``name@interface``."""


class WorkloadPolicy(WireModel):
    """The constrained part of a backend Pod an operator may shape. Nothing else."""

    cpu: ReadableQuantity | None = None
    """CPU request (and limit) per participant Pod."""
    memory: ReadableQuantity | None = None
    """Memory request (and limit) per participant Pod."""
    extended_resources: ExtendedResources = Field(default_factory=dict)
    """Extra extended resources per participant, e.g. ``rdma/ib: 1``."""
    host_network: bool = False
    """Run the backend Pods in the host network namespace."""
    capabilities: Annotated[list[Capability], Field(max_length=len(ALLOWED_CAPABILITIES))] = Field(default_factory=list)
    """Linux capabilities to add, from a fixed allow-list."""
    kueue_queue_name: DnsSubdomain | None = None
    """Kueue LocalQueue name, set as the ``kueue.x-k8s.io/queue-name`` label. Such Pods are
    placed by required node affinity (never ``nodeName``), so Kueue can gate them."""
    tolerations: Tolerations = Field(default_factory=list)
    """Taints of the Nodes' own that the backend Pods tolerate (at most 8), e.g.
    ``{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}``. Eligibility excludes
    a Node with a NoSchedule or NoExecute taint that neither these nor Signal's cordon
    tolerate."""
    shm_size: (
        Annotated[
            ReadableQuantity,
            Field(
                json_schema_extra={
                    "x-kubernetes-validations": [
                        {
                            "rule": "quantity(self).isGreaterThan(quantity('0')) && "
                            "quantity(self).compareTo(quantity('64Gi')) <= 0",
                            "message": "shmSize must be more than 0 and at most 64Gi",
                        }
                    ]
                }
            ),
        ]
        | None
    ) = None
    """Size of a memory-backed ``/dev/shm`` (an emptyDir of medium Memory, this sizeLimit,
    at most 64Gi; counted against the Pod's memory), e.g. ``8Gi`` for NCCL within one Node.
    Unset: the container runtime's default (64 MiB)."""
    runtime_class_name: DnsSubdomain | None = None
    """The backend Pods' RuntimeClass (e.g. ``nvidia`` where it is not the default runtime);
    only a name the installation allows (the adapter policy's ``runtimeClasses``)."""
    networks: Annotated[list[NetworkName], Field(max_length=MAX_NETWORKS)] = Field(default_factory=list)
    """Secondary networks (Multus ``k8s.v1.cni.cncf.io/networks``), e.g. SR-IOV or RDMA NICs;
    only names the installation allows (the adapter policy's ``networks``)."""

    @field_validator("shm_size")
    @classmethod
    def _bounded_shm(cls, value: str | None) -> str | None:
        if value is not None and not 0 < parse_quantity(value) <= MAX_SHM_BYTES:
            raise ValueError(f"shmSize {value!r}: must be more than 0 and at most 64Gi")
        return value

    @field_validator("extended_resources")
    @classmethod
    def _extended_resources(cls, value: dict[str, int]) -> dict[str, int]:
        for key in value:
            if "/" not in key or key == keys.GPU_RESOURCE:
                raise ValueError(
                    f"{key!r}: extended resources must be domain-qualified; use gpuCount for {keys.GPU_RESOURCE}"
                )
        return value
