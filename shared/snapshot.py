"""The Run's script snapshot: what makes a ``<run>-scripts-…`` ConfigMap the Run's own, and the
digests that follow it downstream. Pure; no I/O.

A snapshot is the Run's only when it is ``immutable``, controlled by the Run (an
ownerReference of kind CertificationRun with its uid and ``controller: true``) and its bytes
form exactly the Run's source digest (``shared.digests`` bundle recipe). The controller
checks that before it adopts one it finds (controller/reconcile/admission.py), the adapter again before
any workload mounts it (adapter/check.py), and the adapter records every key's sha256 in the
check evidence (``CheckIdentity.bundle``), so that acceptance can recompute the bundle digest
and compare each runner's reported ``scriptDigest`` (the sha256 of the bytes it executed) with
the script key's.
"""

from collections.abc import Mapping
from typing import Any, Final

from shared import keys
from shared.digests import BundleError, bundle_bytes, bundle_digest_of_files, sha256_digest
from shared.evidence import CheckResults
from shared.run import Verdict

Obj = Mapping[str, Any]
COMPONENT: Final = "scripts"
"""The snapshot's ``projectsignal.dev/component`` label (deploy/base/scripts-admission-policy.yaml)."""


def _controlled_by_run(obj: Obj, run_uid: str) -> bool:
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(
        isinstance(o, Mapping) and o.get("kind") == keys.RUN_KIND and o.get("uid") == run_uid and o.get("controller")
        for o in owners
    )


def files_of(config_map: Obj) -> dict[str, bytes]:
    """Every key's exact bytes; raise BundleError."""
    return bundle_bytes(config_map.get("data") or {}, config_map.get("binaryData") or {})


def problem(config_map: Obj, run_uid: str, source_digest: str) -> str | None:
    """Why ``config_map`` is not the Run's snapshot of ``source_digest``, or None."""
    if not _controlled_by_run(config_map, run_uid):
        return "it is not controlled by the Run"
    if config_map.get("immutable") is not True:
        return "it is not immutable"
    try:
        found = bundle_digest_of_files(files_of(config_map))
    except BundleError as exc:
        return f"its content is not a bundle: {exc}"
    if found != source_digest:
        return f"its bytes digest to {found}, not the Run's {source_digest}"
    return None


def key_digests(config_map: Obj) -> dict[str, str]:
    """sha256 (``sha256:<hex>``) of every key's bytes; raise BundleError."""
    return {key: sha256_digest(value) for key, value in files_of(config_map).items()}


def bundle_of_digests(digests: Mapping[str, str]) -> str:
    """The bundle digest from every key's ``sha256:<hex>`` (the recipe of ``shared.digests``,
    from the per-key digests instead of the bytes)."""
    manifest = b"".join(
        f"{digests[key].removeprefix('sha256:')}  {key}\n".encode()
        for key in sorted(digests, key=lambda k: k.encode("utf-8"))
    )
    return sha256_digest(manifest)


def script_problem(source_digest: str, results: CheckResults) -> str | None:
    """Why the check's proven verdicts do not come from the Run's script, or None: the
    evidence must record the snapshot's key digests (recomputing to ``source_digest``), the
    script key's among them, and every proven participant's runner must have reported
    executing exactly that. Evidence without them (written before they were recorded) proves
    nothing."""
    if all(p.verdict == Verdict.INCONCLUSIVE for p in results.participants):
        return None
    check = results.check
    if check.bundle is None or check.script_digest is None:
        return "UnprovenScript: the evidence records no verified snapshot (written before scripts were hashed)"
    if bundle_of_digests(check.bundle) != source_digest:
        return "UnprovenScript: the recorded snapshot does not digest to the Run's source digest"
    if check.bundle.get(check.script_key) != check.script_digest:
        return f"UnprovenScript: the recorded script digest is not the snapshot's key {check.script_key!r}"
    for p in results.participants:
        if p.verdict != Verdict.INCONCLUSIVE and p.script_digest != check.script_digest:
            return f"UnprovenScript: participant {p.index}'s runner did not report executing the snapshot's script"
    return None
