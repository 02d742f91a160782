"""Kubernetes building blocks used by Signal's API models: base model configuration,
object metadata, conditions and label selectors.

Cluster objects are parsed tolerantly (unknown fields are ignored, for forward
compatibility); Signal's own versioned documents use ``StrictModel``. Pure; no I/O.
"""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from shared.quantity import QuantityError, parse_quantity
from shared.timestamps import to_millisecond as to_millisecond  # noqa: PLC0414 - re-exported; stdlib-only home

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONFIGMAP_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# A qualified name such as "nvidia.com/gpu" or "rdma/ib" (prefix/name).
RESOURCE_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
DnsSubdomain = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
Digest = Annotated[str, Field(min_length=71, max_length=71, pattern=DIGEST_PATTERN)]
Quantity = Annotated[str, Field(max_length=64, pattern=QUANTITY_PATTERN)]


def _readable_quantity(value: str) -> str:
    """Within what Signal and Kubernetes read (shared/quantity.py): the pattern admits
    "1e999999", which no Node has; refused, the object is invalid at once, naming the field."""
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return value


ReadableQuantity = Annotated[Quantity, AfterValidator(_readable_quantity)]
"""A quantity Signal compares (a profile's cpu and memory); its schema is Quantity's."""
Uid = Annotated[str, Field(min_length=1, max_length=64)]
ResourceMap = Annotated[
    dict[str, Quantity],
    Field(max_length=64, json_schema_extra={"maxProperties": 64}),
]


class WireModel(BaseModel):
    """A cluster object: camelCase on the wire, unknown fields ignored, immutable.

    Each model's validator is built on its first use, not at import (``defer_build``): a
    process builds only the models it uses, so every service, and the adapter at every check's
    step, starts sooner (issue 15). The first use of a model from several threads at once is
    safe with the pinned pydantic (its rebuild lock); tests/unit/test_deferred_models.py holds
    that, and that every model builds. Attribute docstrings become field descriptions only in
    generated schemas (shared/schema_docs.py), not at class creation."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        defer_build=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """Serialise as the API server expects it: camelCase, no nulls."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class StrictModel(WireModel):
    """A versioned document of Signal's own: unknown fields are an error."""

    model_config = ConfigDict(extra="forbid")


class ObjectMeta(WireModel):
    """The subset of Kubernetes object metadata Signal reads."""

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class LabelSelectorRequirement(WireModel):
    """One set-based requirement of a label selector."""

    key: Annotated[str, Field(min_length=1, max_length=317)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=64)] = Field(default_factory=list)


class LabelSelector(WireModel):
    """A Kubernetes label selector. Signal requires it to be non-empty."""

    match_labels: Annotated[
        dict[str, Annotated[str, Field(max_length=63)]],
        Field(json_schema_extra={"maxProperties": 32}),
    ] = Field(default_factory=dict)
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=32)] = Field(default_factory=list)


class Condition(WireModel):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: Annotated[str, Field(min_length=1, max_length=316)]
    status: Literal["True", "False", "Unknown"]
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    last_transition_time: datetime
    reason: Annotated[str, Field(min_length=1, max_length=1024)]
    message: Annotated[str, Field(max_length=32768)] = ""


Conditions = Annotated[
    list[Condition],
    Field(
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    ),
]
"""A status's conditions: a list-map keyed by type."""
