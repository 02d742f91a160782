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
