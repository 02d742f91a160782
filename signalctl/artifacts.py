"""The artifact store as ``signalctl`` reads it (issue 41 §2): fetching an artifact the check
evidence records and checking it against the recorded sha256 and size, and the findings
``signalctl evidence verify`` adds for them.

Configured by ``$SIGNAL_ARTIFACT_STORE`` (shared/artifacts.py: a directory of the Secret's keys
or a YAML mapping) with the operator's own credential, which needs only ``Read`` of the bucket.
Without it, the artifacts are listed as recorded but not fetched. An artifact whose bytes do not
hash to the recorded digest is MISMATCH; one that is absent, or a store that cannot be reached,
is MISSING (verification incomplete): never OK.
"""

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from hashlib import sha256
from typing import IO, Any

from shared.artifacts import STORE_ENV, StoreConfig, StoreError, load_store
from shared.evidence import CHECK_EVIDENCE_SCHEMA, EvidenceError, decode_document
from signalctl.kubectx import CommandError
from signalctl.verify_checks import Finding

Obj = dict[str, Any]
SPOOL_BYTES = 8 * 1024 * 1024
"""An artifact is kept in memory up to this size while it is checked, on disk beyond."""


def configured_store() -> StoreConfig | None:
    """The store named by ``$SIGNAL_ARTIFACT_STORE``; None when unset; CommandError if malformed."""
    try:
        return load_store(os.environ.get(STORE_ENV))
    except StoreError as exc:
        raise CommandError(f"{exc}; fix it or unset {STORE_ENV}") from exc


@dataclass(frozen=True)
class Recorded:
    """One artifact as a check's evidence records it, and whose it is."""

    check: int
    check_name: str
    node: str
    participant: int
    name: str
    key: str
    digest: str
    bytes: int

    @property
    def subject(self) -> str:
        return f"check {self.check} {self.check_name} node {self.node} artifact {self.name}"


def recorded(check_index: int, document: Obj) -> list[Recorded]:
    """Every artifact a decoded check evidence document records, participant by participant."""
    results = document.get("results") or {}
    name = str((results.get("check") or {}).get("name", "?"))
    found = []
    for participant in results.get("participants") or []:
        for artifact in participant.get("artifacts") or []:
            found.append(
                Recorded(
                    check_index,
                    name,
                    str(participant.get("nodeName")),
                    int(participant.get("index", -1)),
                    str(artifact.get("name")),
                    str(artifact.get("key")),
                    str(artifact.get("digest")),
                    int(artifact.get("bytes", -1)),
                )
            )
    return found


class Fetched:
    """An artifact's bytes (spooled), their sha256 and size, or why they could not be read."""

    def __init__(self, store: StoreConfig, key: str) -> None:
        self.data: IO[bytes] = tempfile.SpooledTemporaryFile(SPOOL_BYTES)  # noqa: SIM115 - closed by close()
        self.digest = ""
        self.size = 0
        self.missing = ""
        self._fetch(store, key)

    def _fetch(self, store: StoreConfig, key: str) -> None:
        import urllib3  # noqa: PLC0415 - with a store only
        from minio import Minio  # noqa: PLC0415 - with a store only: verify without one never loads it
        from minio.error import S3Error  # noqa: PLC0415

        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=5.0, read=30.0), retries=urllib3.Retry(total=1))
        client = Minio(
            store.host, store.access_key, store.secret_key, secure=store.secure, region=store.region, http_client=http
        )
        digest = sha256()
        try:
            response = client.get_object(store.bucket, key)
            try:
                for block in response.stream(1 << 16):
                    digest.update(block)
                    self.data.write(block)
                    self.size += len(block)
            finally:
                response.close()
                response.release_conn()
        except S3Error as exc:
            self.missing = f"{exc.code}: s3://{store.bucket}/{key}"
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self.missing = f"the artifact store at {store.endpoint} could not be read: {type(exc).__name__}: {exc}"
            return
        self.digest = "sha256:" + digest.hexdigest()
        self.data.seek(0)

    def matches(self, item: Recorded) -> bool:
        return not self.missing and (self.digest, self.size) == (item.digest, item.bytes)

    def close(self) -> None:
        self.data.close()


def finding(item: Recorded, fetched: Fetched) -> Finding:
    if fetched.missing:
        return Finding("MISSING", item.subject, fetched.missing[:300])
    if fetched.matches(item):
        return Finding("OK", item.subject, f"{item.key}: {item.digest}, {item.bytes} bytes")
    return Finding(
        "MISMATCH",
        item.subject,
        f"{item.key} holds {fetched.digest} ({fetched.size} bytes); the evidence records {item.digest} "
        f"({item.bytes} bytes): the artifact was replaced",
    )


def decoded_checks(check_cms: dict[int, Obj | None]) -> Iterator[tuple[int, Obj]]:
    """The check evidence documents that decode (the others are reported by verify already)."""
    for index, config_map in sorted(check_cms.items()):
        if config_map is None:
            continue
        try:
            yield index, decode_document(config_map, CHECK_EVIDENCE_SCHEMA)[0]
        except EvidenceError:
            continue


def verify_artifacts(check_cms: dict[int, Obj | None], store: StoreConfig | None) -> list[Finding]:
    """One finding per recorded artifact (fetched and checked when ``store`` is given), or one
    saying that none were fetched."""
    items = [item for index, document in decoded_checks(check_cms) for item in recorded(index, document)]
    if not items:
        return []
    if store is None:
        return [
            Finding(
                "OK",
                "artifacts",
                f"{len(items)} recorded, not fetched (no artifact store configured: set ${STORE_ENV})",
            )
        ]
    found = []
    for item in items:
        fetched = Fetched(store, item.key)
        try:
            found.append(finding(item, fetched))
        finally:
            fetched.close()
    return found
