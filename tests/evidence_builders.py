"""Check evidence as the adapter would write it for a Run, built from the real models, and
the mutations an adversary (or a bug) could make to it. Used by the acceptance corpus."""

import base64
import copy
import gzip
import json
from collections.abc import Callable
from typing import Any

from shared.digests import bundle_digest, canonical_json, sha256_digest
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document, encode
from tests import builders, controller_support, run_builders

Obj = dict[str, Any]
STAMP = "2026-11-30T00:00:00Z"


def run_link(run: Obj) -> Obj:
    """The last link of every owner chain the adapter records: the Run."""
    return {"kind": "CertificationRun", "name": run["metadata"]["name"], "uid": run["metadata"]["uid"]}


def mpi_chain(run: Obj, mpijob_uid: str, *, launcher: bool = False) -> list[Obj]:
    """A worker's (or, ``launcher``, a launcher Pod's) owner chain up to the Run."""
    job = [{"kind": "Job", "name": "job", "uid": f"job-of-{mpijob_uid}"}] if launcher else []
    return [*job, {"kind": "MPIJob", "name": "mpijob", "uid": mpijob_uid}, run_link(run)]


KNOWN_SCRIPTS: tuple[dict[str, str], ...] = (
    builders.SCRIPTS,
    controller_support.SCRIPTS,
    run_builders.SCRIPTS,
    {"s.sh": "exit 0"},
)
"""The script sets the tests' Runs are made from: evidence records the snapshot's key digests,
which only the bytes give (``snapshot_of``)."""


def snapshot_of(run: Obj, scripts: dict[str, str] | None = None) -> dict[str, str]:
    """sha256 of every key of the Run's snapshot (``scripts``, or the known set whose bundle is
    the Run's source digest), as the adapter records it."""
    digest = run["spec"]["source"]["digest"]
    for candidate in (scripts,) if scripts is not None else KNOWN_SCRIPTS:
        if bundle_digest(candidate, {}) == digest:
            return {key: sha256_digest(value.encode()) for key, value in candidate.items()}
    raise AssertionError(f"no known script set digests to the Run's {digest}; pass scripts=")


def check_evidence(
    run: Obj, index: int = 0, verdicts: dict[int, str] | None = None, *, scripts: dict[str, str] | None = None
) -> Obj:
    """A valid check-evidence/v1 document for check ``index`` of ``run`` (Pod backend)."""
    meta, spec = run["metadata"], run["spec"]
    check = spec["checks"][index]
    verdicts = verdicts or {}
    bundle = snapshot_of(run, scripts)
    script = bundle.get(check["scriptKey"], sha256_digest(b"no such key"))
    participants, workloads = [], []
    for p in sorted(spec["participants"], key=lambda p: p["index"]):
        name, uid = f"{meta['name']}-c{index}-p{p['index']}", f"pod-uid-{index}-{p['index']}"
        workloads.append(
            {
                "kind": "Pod",
                "name": name,
                "uid": uid,
                "nodeName": p["nodeName"],
                "participantIndex": p["index"],
                "role": "participant",
                "owners": [run_link(run)],
            }
        )
        verdict = verdicts.get(p["index"], "Pass")
        participants.append(
            {
                "index": p["index"],
                "nodeName": p["nodeName"],
                "nodeUid": p["nodeUID"],
                "verdict": verdict,
                "reason": f"{verdict}: test",
                "workload": name,
                "workloadUid": uid,
                "scriptDigest": script,
                "exitCode": 0 if verdict == "Pass" else 1,
                "measurements": {},
            }
        )
    if "Fail" in verdicts.values():
        overall = "Fail"
    elif all(v == "Pass" for v in (verdicts.get(p["index"], "Pass") for p in spec["participants"])):
        overall = "Pass"
    else:
        overall = "Inconclusive"
    results = {
        "schema": "projectsignal.dev/check-results/v1",
        "run": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
        "check": {
            "index": index,
            "name": check["name"],
            "backend": check["backend"],
            "scriptKey": check["scriptKey"],
            "sourceDigest": spec["source"]["digest"],
            "bundle": bundle,
            "scriptDigest": script,
        },
        "verdict": overall,
        "reason": "test",
        "startedAt": STAMP,
        "collectedAt": STAMP,
        "workloads": workloads,
        "participants": participants,
    }
    return seal(
        {
            "schema": "projectsignal.dev/check-evidence/v1",
            "results": results,
            "resultsDigest": "",
            "resultsConfigMap": f"{meta['name']}-c{index}-results",
            "cleanup": {
                "state": "Complete",
                "message": "every workload is gone",
                "deleted": workloads,
                "retained": [],
                "finishedAt": STAMP,
            },
            "verdict": overall,
            "reason": "test",
        }
    )


def seal(document: Obj) -> Obj:
    """Recompute the results digest, as a careful forger would."""
    document = copy.deepcopy(document)
    document["resultsDigest"] = sha256_digest(canonical_json(document["results"]))
    return document


def config_map(
    name: str, document: Obj | None, *, raw: bytes | None = None, immutable: bool = True, owner: Obj | None = None
) -> Obj:
    """An evidence ConfigMap as the adapter writes it: owned by the Run (``owner``, or the
    Run the document names), immutable, gzip'd canonical JSON."""
    payload = raw if raw is not None else encode(document or {})[2]
    body: Obj = {"metadata": {"name": name}, "binaryData": {"evidence.json.gz": base64.b64encode(payload).decode()}}
    run = (document or {}).get("results", {}).get("run", {})
    if owner is None and run.get("uid"):
        owner = {"metadata": {"name": run.get("name", "run"), "uid": run["uid"]}}
    if owner is not None:
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "projectsignal.dev/v1alpha1",
                "kind": "CertificationRun",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    if immutable:
        body["immutable"] = True
    return body


def digest_of(document: Obj) -> str:
    return encode(document)[1]


def _results(mutate: Callable[[Obj], None]) -> Callable[[Obj], Obj]:
    def apply(doc: Obj) -> Obj:
        doc = copy.deepcopy(doc)
        mutate(doc["results"])
        return seal(doc)

    return apply


def _top(mutate: Callable[[Obj], None]) -> Callable[[Obj], Obj]:
    def apply(doc: Obj) -> Obj:
        doc = copy.deepcopy(doc)
        mutate(doc)
        return doc

    return apply


def _swap_uids(results: Obj) -> None:
    a, b = results["participants"][0], results["participants"][1]
    a["nodeUid"], b["nodeUid"] = b["nodeUid"], a["nodeUid"]


def _extra(results: Obj) -> None:
    extra = copy.deepcopy(results["participants"][0])
    extra["index"] = 7
    results["participants"].append(extra)


def _duplicate(results: Obj) -> None:
    results["participants"].append(copy.deepcopy(results["participants"][0]))


DOCUMENT_MUTATIONS: dict[str, Callable[[Obj], Obj]] = {
    "other-run-uid": _results(lambda r: r["run"].update(uid="00000000-0000-0000-0000-000000000000")),
    "other-run-name": _results(lambda r: r["run"].update(name="someone-else")),
    "other-check-index": _results(lambda r: r["check"].update(index=1)),
    "other-check-name": _results(lambda r: r["check"].update(name="another-check")),
    "other-backend": _results(lambda r: r["check"].update(backend="MPIJob")),
    "other-source-digest": _results(lambda r: r["check"].update(sourceDigest="sha256:" + "0" * 64)),
    "missing-participant": _results(lambda r: r["participants"].pop()),
    "extra-participant": _results(_extra),
    "duplicate-participant": _results(_duplicate),
    "swapped-node-uids": _results(_swap_uids),
    "foreign-node-name": _results(lambda r: r["participants"][0].update(nodeName="elsewhere")),
    "workload-on-other-node": _results(lambda r: r["workloads"][0].update(nodeName="elsewhere")),
    "workload-missing": _results(lambda r: r["workloads"].pop()),
    "result-names-other-workload": _results(lambda r: r["participants"][0].update(workloadUid="other")),
    "pass-over-a-fail": _results(lambda r: r["participants"][1].update(verdict="Fail")),
    "results-digest-stale": _top(lambda d: d["results"].update(reason="edited after sealing")),
    "cleanup-failed-but-pass": _top(lambda d: d["cleanup"].update(state="Failed", message="a Pod remains")),
    "wrong-schema-version": _top(lambda d: d.update(schema="projectsignal.dev/check-evidence/v2")),
    "unknown-field": _top(lambda d: d.update(trustMe=True)),
    "verdict-missing": _top(lambda d: d.pop("verdict")),
}
"""Mutations of a valid document; each still encodes canonically and decodes."""


def truncated_gzip(document: Obj) -> bytes:
    return encode(document)[2][:-12]


def non_canonical(document: Obj) -> bytes:
    return gzip.compress(json.dumps(document, indent=1).encode(), mtime=0)


def oversized(_: Obj) -> bytes:
    return gzip.compress(
        b'{"schema":"projectsignal.dev/check-evidence/v1","x":"' + b"a" * (3 * 1024 * 1024) + b'"}', mtime=0
    )


def as_v1(document: Obj, check_config_maps: dict[int, Obj | None]) -> Obj:
    """A Run evidence document (v2) as it was written before issue 41, ``projectsignal.dev/
    evidence/v1``: each check's evidence embedded (from its stored ConfigMap) instead of named."""
    old = copy.deepcopy(document)
    old["schema"] = "projectsignal.dev/evidence/v1"
    for entry in old["checks"]:
        stored = check_config_maps.get(entry["index"])
        embedded = decode_document(stored, CHECK_EVIDENCE_SCHEMA)[0] if stored and entry["digest"] else None
        for key in ("configMap", "resultsConfigMap", "resultsDigest"):
            entry.pop(key)
        entry["evidence"] = embedded
    return old


def decode_check(stored: Obj | None) -> Obj:
    """The check evidence document a ConfigMap holds."""
    assert stored is not None
    return decode_document(stored, CHECK_EVIDENCE_SCHEMA)[0]
