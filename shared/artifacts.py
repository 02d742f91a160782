"""The optional artifact store (issue 41 §2): its installation-wide configuration, and the
artifact records a runner reports and the check evidence keeps. Pure apart from reading the
configuration's files (``load_store``); the wire rules the runner shares are in
shared/artifact_wire.py.

Configuration: one Secret of the Signal namespace, ``STORE_SECRET``, mounted into the adapter
(never into a backend Pod), whose keys are ``endpoint`` (``http(s)://host[:port]``), ``bucket``,
``accessKey``, ``secretKey`` and optionally ``prefix`` (default ``signal``) and ``region``
(default ``us-east-1``). Without it, nothing is stored and checks run as before. ``signalctl``
reads the same keys from ``$SIGNAL_ARTIFACT_STORE`` (a directory of key files, as the Secret is
mounted, or a YAML mapping) with the operator's own read credential.
"""

import re
from pathlib import Path
from typing import Annotated, Any, Final
from urllib.parse import urlsplit

import yaml
from pydantic import Field, ValidationError, field_validator

from shared.artifact_wire import (
    MAX_ARTIFACTS,
    MAX_OUTPUT_NAME_CHARS,
    OUTPUT_NAME_PATTERN,
    OUTPUT_PREFIX,
    STDERR,
    STDOUT,
)
from shared.meta import Digest, StrictModel

STORE_SECRET: Final = "signal-artifact-store"
STORE_MOUNT: Final = "/etc/signal/artifact-store"
"""Where the adapter's container mounts ``STORE_SECRET`` (optional: absent means no store)."""
STORE_ENV: Final = "SIGNAL_ARTIFACT_STORE"
"""The adapter's and signalctl's variable naming the configuration's directory or file."""
ArtifactName = Annotated[str, Field(max_length=len(OUTPUT_PREFIX) + MAX_OUTPUT_NAME_CHARS)]
_NAME = re.compile(rf"(?:{STDOUT}|{STDERR}|{re.escape(OUTPUT_PREFIX)}{OUTPUT_NAME_PATTERN})")


class StoreError(ValueError):
    """The artifact store's configuration is malformed or incomplete."""


class ArtifactReport(StrictModel):
    """What a runner reports for one artifact it stored: its name, the sha256 and size sent."""

    name: ArtifactName
    digest: Digest
    bytes: Annotated[int, Field(ge=0)]

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"artifact name {value!r} is not stdout, stderr or out/<file>")
        return value


class StoredArtifact(ArtifactReport):
    """One artifact as the check evidence records it: also the key it is stored under (the one
    the adapter signed the upload for, never one the runner chose)."""

    key: Annotated[str, Field(max_length=1024)]


ArtifactReports = Annotated[list[ArtifactReport], Field(max_length=MAX_ARTIFACTS)]
StoredArtifacts = Annotated[list[StoredArtifact], Field(max_length=MAX_ARTIFACTS)]


class StoreConfig(StrictModel):
    endpoint: str
    bucket: Annotated[str, Field(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]+[a-z0-9]$")]
    access_key: Annotated[str, Field(min_length=1, repr=False)]
    secret_key: Annotated[str, Field(min_length=1, repr=False)]
    prefix: Annotated[str, Field(max_length=256, pattern=r"^[A-Za-z0-9._/-]*$")] = "signal"
    region: str = "us-east-1"

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"endpoint {value!r} must be http(s)://host[:port]")
        return value.rstrip("/")

    @property
    def secure(self) -> bool:
        return self.endpoint.startswith("https://")

    @property
    def host(self) -> str:
        """``host[:port]``, as S3 clients take it."""
        return urlsplit(self.endpoint).netloc


_KEYS: Final = {"endpoint", "bucket", "accessKey", "secretKey", "prefix", "region"}


def load_store(path: str | Path | None) -> StoreConfig | None:
    """The configuration at ``path`` (a directory of key files, or a YAML mapping); None when
    ``path`` is unset or is an empty or absent directory (no store). StoreError otherwise."""
    if not path:
        return None
    where = Path(path)
    values: dict[str, Any]
    if where.is_dir():
        values = {f.name: f.read_text().strip() for f in where.iterdir() if f.name in _KEYS and f.is_file()}
        if not values:
            return None
    elif where.is_file():
        try:
            loaded = yaml.safe_load(where.read_text())
        except yaml.YAMLError as exc:
            raise StoreError(f"artifact store configuration {where} is not YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise StoreError(f"artifact store configuration {where} must be a mapping of {sorted(_KEYS)}")
        values = loaded
    else:
        return None
    try:
        return StoreConfig.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise StoreError(f"artifact store configuration {where}: {field}: {first['msg']}") from None
