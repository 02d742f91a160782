"""The adapter's part of the artifact store (issue 41 §2; shared/artifacts.py, shared/artifact_wire.py).

The adapter holds the store's credential (the Secret ``signal-artifact-store`` mounted into its
own container); a backend Pod never does (the adapter's admission policy refuses any Secret in
what it creates). For each backend Pod it signs one S3 ``PUT`` URL per slot, each naming exactly
one key under ``<prefix>/<namespace>/<run>/<run uid>/c<check>/p<participant>/`` and expiring
with the check's deadline, and puts them in the runner's environment; the runner gives its
script none of them. When it collects, it records each artifact a runner reports with the key
it signed for that slot (``record``): the key in the evidence is never the runner's choice.

S3 client: minio (imported here only when a store is configured; chosen for its start-up time,
see docs/operator-guide.md). Signing is local computation: no request reaches the store here.
"""

from datetime import timedelta
from typing import Any

from adapter import workloads
from adapter.inputs import Inputs
from shared.artifact_wire import OUTPUT_PREFIX, UPLOAD_BUDGET_SECONDS, UPLOAD_ENV_PREFIX, object_key, slot_of, slots
from shared.artifacts import StoreConfig, StoredArtifact
from shared.evidence import ParticipantResult
from shared.result import RunnerResult
from shared.run import Verdict

Obj = dict[str, Any]
EXPIRY_MARGIN_SECONDS = 300
"""How long past the check's deadline (and the upload budget) an upload URL stays valid."""


def key(store: StoreConfig, inputs: Inputs, participant: int, slot: str) -> str:
    return object_key(
        store.prefix, inputs.run_namespace, inputs.run_name, inputs.run_uid, inputs.check_index, participant, slot
    )


def upload_env(store: StoreConfig, inputs: Inputs, participant: int) -> list[Obj]:
    """The runner's environment entries: a presigned PUT URL per slot of ``participant``."""
    from minio import Minio  # noqa: PLC0415 - only with a store: an adapter without one never loads it

    client = Minio(store.host, store.access_key, store.secret_key, secure=store.secure, region=store.region)
    seconds = workloads.deadline_seconds(inputs.check) + UPLOAD_BUDGET_SECONDS + EXPIRY_MARGIN_SECONDS
    expires = timedelta(seconds=min(int(seconds), 7 * 24 * 3600))
    return [
        {
            "name": UPLOAD_ENV_PREFIX + slot,
            "value": client.presigned_put_object(store.bucket, key(store, inputs, participant, slot), expires),
        }
        for slot in slots()
    ]


def with_uploads(pod: Obj, store: StoreConfig | None, inputs: Inputs, participant: int) -> Obj:
    """``pod`` (a backend Pod of ``participant``) with its upload URLs when a store is configured."""
    if store is None:
        return pod
    container = pod["spec"]["containers"][0]
    container["env"] = [*container.get("env", []), *upload_env(store, inputs, participant)]
    return pod


def record(
    store: StoreConfig | None, inputs: Inputs, result: ParticipantResult, reported: RunnerResult | None
) -> ParticipantResult:
    """``result`` with the artifacts its runner reported, each under the key signed for its slot.
    With a store, a Pass whose runner reports no stdout and stderr artifacts is Inconclusive: the
    evidence would promise logs that were never stored."""
    if store is None or reported is None:
        return result
    stored: list[StoredArtifact] = []
    outputs = 0
    for artifact in reported.artifacts or []:
        slot = slot_of(artifact.name, outputs)
        if artifact.name.startswith(OUTPUT_PREFIX):
            outputs += 1
        stored.append(StoredArtifact(**artifact.model_dump(), key=key(store, inputs, result.index, slot)))
    names = [a.name for a in stored]
    update: dict[str, Any] = {"artifacts": stored or None}
    if result.verdict == Verdict.PASS and (names[:2] != ["stdout", "stderr"] or len(set(names)) != len(names)):
        update |= {
            "verdict": Verdict.INCONCLUSIVE,
            "reason": "MissingArtifacts: an artifact store is configured but the runner stored no complete "
            "stdout and stderr; check that the runner image is this release's",
        }
    return result.model_copy(update=update)
