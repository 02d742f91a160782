"""Canonical digests: the bundle digest of a script ConfigMap and canonical JSON.

Bundle digest (the recipe an operator can reproduce with standard tools):

1. Take every key of ``data`` and ``binaryData`` (Kubernetes forbids a key in both).
   The value's bytes are the UTF-8 encoding of a ``data`` string, or the base64-decoded
   bytes of a ``binaryData`` value.
2. For each key, in byte-wise ascending order (``LC_ALL=C sort``), write the line
   ``<sha256 hex of the value>  <key>\\n`` (two spaces: exactly what ``sha256sum``
   prints for a file named ``<key>``).
3. The digest is ``sha256:`` followed by the sha256 hex of those lines concatenated.

So, with the keys written to files in an empty directory:
``(cd dir && LC_ALL=C ls | LC_ALL=C sort | xargs sha256sum --) | sha256sum``.
``deploy/tools/bundle-digest.sh`` does exactly that from a ConfigMap's JSON.
Keys are ConfigMap keys (``[-._a-zA-Z0-9]+``), so no escaping is ever involved.

Canonical JSON (``canonical_json``, re-exported from shared/canonical.py): sorted keys, UTF-8,
no insignificant white space. Pure; no I/O.
"""

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

from shared.canonical import canonical_json

DIGEST_PREFIX = "sha256:"


class BundleError(ValueError):
    """A ConfigMap's content cannot form a bundle (duplicate key or bad base64)."""


def bundle_bytes(data: Mapping[str, str], binary_data: Mapping[str, str]) -> dict[str, bytes]:
    """The exact bytes of every key of a ConfigMap; ``binary_data`` values are base64."""
    overlap = sorted(set(data) & set(binary_data))
    if overlap:
        raise BundleError(f"keys present in both data and binaryData: {', '.join(overlap)}")
    files = {key: value.encode("utf-8") for key, value in data.items()}
    for key, encoded in binary_data.items():
        try:
            files[key] = base64.b64decode(encoded, validate=True)
        except binascii.Error as exc:
            raise BundleError(f"binaryData[{key!r}] is not valid base64: {exc}") from exc
    return files


def bundle_digest_of_files(files: Mapping[str, bytes]) -> str:
    """Bundle digest of key -> exact bytes (see the module docstring)."""
    manifest = b"".join(
        f"{hashlib.sha256(files[key]).hexdigest()}  {key}\n".encode()
        for key in sorted(files, key=lambda k: k.encode("utf-8"))
    )
    return DIGEST_PREFIX + hashlib.sha256(manifest).hexdigest()


def bundle_digest(data: Mapping[str, str], binary_data: Mapping[str, str]) -> str:
    """Bundle digest of a ConfigMap's ``data`` and (base64) ``binaryData``."""
    return bundle_digest_of_files(bundle_bytes(data, binary_data))


def sha256_digest(payload: bytes) -> str:
    """``sha256:<hex>`` of ``payload``."""
    return DIGEST_PREFIX + hashlib.sha256(payload).hexdigest()


def template_digest(template: Mapping[str, Any]) -> str:
    """Content digest of a WorkflowTemplate: ``sha256:`` of the canonical JSON of its
    ``spec`` (what Argo runs; metadata is not part of it). The controller compares the live
    ``signal-adapter`` template's with its configured one before it submits a Workflow
    (issue 42 H-A); ``python -m adapter.workflow_template --digest`` prints it for the
    template in a rendered manifest."""
    return sha256_digest(canonical_json(template.get("spec") or {}))


__all__ = [
    "DIGEST_PREFIX",
    "BundleError",
    "bundle_bytes",
    "bundle_digest",
    "bundle_digest_of_files",
    "canonical_json",
    "sha256_digest",
    "template_digest",
]
