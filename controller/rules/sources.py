"""Verification of a profile's source ConfigMap, beyond the schema. Pure.

The ConfigMap must exist, be ``immutable: true``, contain every check's ``scriptKey`` and
have the pinned bundle digest. The caller fetches it with an uncached GET."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.digests import BundleError, bundle_digest
from shared.profile import CertificationProfile


@dataclass(frozen=True)
class SourceCheck:
    ok: bool
    reason: str
    message: str
    digest: str = ""


ANY_NAMESPACE = "*"
"""In ``--source-namespaces``: sources may live in any namespace (the controller then reads, and
copies into its snapshots, any ConfigMap a profile author names)."""
DEFAULT_SOURCE_NAMESPACES = ("signal-scripts",)


def parse_source_namespaces(text: str) -> tuple[str, ...]:
    """``--source-namespaces``: a comma-separated list (``*``: any namespace)."""
    return tuple(sorted({part.strip() for part in text.split(",") if part.strip()}))


def source_namespace_refused(profile: CertificationProfile, own: str, allowed: tuple[str, ...]) -> SourceCheck | None:
    """Whether the profile's source lies outside the namespaces sources may come from (the
    controller's own and ``allowed``): the controller reads a source with its cluster-wide
    ConfigMap read and copies it into the Run's snapshot, so without this a profile author (who
    need not read ConfigMaps anywhere) could learn whether any ConfigMap of any namespace exists,
    is immutable and holds a key, and have its content copied where the adapter reads it. The
    refusal names the namespace only: nothing is read."""
    namespace = profile.spec.source.namespace
    if ANY_NAMESPACE in allowed or namespace == own or namespace in allowed:
        return None
    listed = ", ".join(sorted({own, *allowed}))
    return SourceCheck(
        False,
        "SourceNamespaceNotAllowed",
        f"sources are read only from the namespaces {listed}; namespace {namespace} is not one of them. Put the "
        "ConfigMap there, or add the namespace to the controller's --source-namespaces",
    )


def verify_source(profile: CertificationProfile, config_map: Mapping[str, Any] | None) -> SourceCheck:
    source = profile.spec.source
    where = f"ConfigMap {source.namespace}/{source.name}"
    if config_map is None:
        return SourceCheck(False, "SourceNotFound", f"{where} does not exist; create it (immutable: true)")
    if config_map.get("immutable") is not True:
        return SourceCheck(
            False, "SourceMutable", f"{where} is not immutable; recreate it with immutable: true and pin its digest"
        )
    data, binary = config_map.get("data") or {}, config_map.get("binaryData") or {}
    missing = sorted({c.script_key for c in profile.spec.checks} - set(data) - set(binary))
    if missing:
        return SourceCheck(
            False, "ScriptKeyMissing", f"{where} has no key {', '.join(missing)}; add it or fix scriptKey"
        )
    try:
        digest = bundle_digest(data, binary)
    except BundleError as exc:
        return SourceCheck(False, "SourceMalformed", f"{where}: {exc}")
    if digest != source.digest:
        return SourceCheck(
            False,
            "DigestMismatch",
            f"{where} has bundle digest {digest}, but the profile pins {source.digest}; "
            "verify the scripts and update spec.source.digest",
        )
    return SourceCheck(True, "SourceVerified", f"{where} verified at {digest}", digest)
