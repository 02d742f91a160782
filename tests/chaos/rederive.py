"""The chaos checker's own, minimal re-derivation of "this Run's evidence passes this Node",
from the raw bytes of the stored ConfigMaps. Pure; no I/O.

It deliberately imports nothing of Signal's acceptance code (``shared.acceptance``,
``shared.evidence``'s decoder and verdict rules, ``shared.runevidence``, ``signalctl.verify``):
the checker asks both this and ``signalctl evidence verify`` and requires them to agree, so a
bug in the shared rules (which the controller decides with) cannot hide behind a verifier that
runs the same rules. Only ``json``, ``hashlib``, ``base64`` and ``zlib``, and the wire format
as docs/reference.md and shared/evidence.py describe it:

* a stored document is the ``evidence.json.gz`` key (base64 in ``binaryData``) of an immutable
  ConfigMap: gzip of canonical JSON (sorted keys, UTF-8, no white space), at most 2 MiB raw and
  768 KiB gzip'd; its digest is ``sha256:`` + the hex sha256 of the uncompressed bytes;
* ``<run>-evidence`` (``projectsignal.dev/evidence/v2``, digest ``status.evidence.digest``)
  names per check ``i`` the ConfigMap ``<run>-c<i>-evidence`` and its digest; that check evidence
  (``projectsignal.dev/check-evidence/v1``) embeds its results with their digest
  (``resultsDigest``), which is also the digest of ``<run>-c<i>-results``
  (``projectsignal.dev/check-results/v1``);
* the results name the Run, the check and the source digest, and hold one result per
  participant (index, Node name, Node uid, verdict).

A Node is Pass here only if every link holds (each digest recomputed from the bytes, the Run
and check evidence ConfigMaps owned by the Run), every check of the Run's spec has evidence with a result for every
participant of the Run and no other, the cleanup of every check completed, the Node's own
verdict is Pass in every check, and the decision is one of the two that may pass a Node:
``Succeeded`` (then every participant passed every check) or ``Failed`` (then some participant
failed a check, and it was not this Node). Anything missing, malformed or different is not Pass.
A Run evidence document of the old v1 shape (embedded evidence, before issue 41) is not Pass
here: the campaign runs the current controller, which writes only v2.
"""

import base64
import binascii
import hashlib
import json
import zlib
from typing import Any, Final

Obj = dict[str, Any]

KEY: Final = "evidence.json.gz"
RUN_SCHEMA: Final = "projectsignal.dev/evidence/v2"
CHECK_SCHEMA: Final = "projectsignal.dev/check-evidence/v1"
RESULTS_SCHEMA: Final = "projectsignal.dev/check-results/v1"
MAX_RAW: Final = 2 * 1024 * 1024
MAX_GZIP: Final = 768 * 1024


class NotPass(Exception):
    """Why the evidence does not pass the Node."""


def digest_of(payload: bytes) -> str:
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def canonical(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _reject(name: str) -> Any:
    raise ValueError(f"non-standard constant {name}")


def stored(config_map: Obj | None, name: str, schema: str, owner_uid: str | None) -> tuple[Obj, str]:
    """(document, digest recomputed from its bytes) of one evidence ConfigMap, owned by the Run
    of ``owner_uid`` (None: ownership not required); NotPass otherwise."""
    if config_map is None:
        raise NotPass(f"ConfigMap {name} is absent")
    meta = config_map.get("metadata") or {}
    if config_map.get("immutable") is not True:
        raise NotPass(f"ConfigMap {name} is not immutable")
    owners = {ref.get("uid") for ref in meta.get("ownerReferences") or [] if isinstance(ref, dict)}
    if owner_uid is not None and owner_uid not in owners:
        raise NotPass(f"ConfigMap {name} is not owned by Run uid {owner_uid}")
    encoded = (config_map.get("binaryData") or {}).get(KEY)
    if not isinstance(encoded, str):
        raise NotPass(f"ConfigMap {name} has no binaryData {KEY}")
    try:
        compressed = base64.b64decode(encoded, validate=True)
        if len(compressed) > MAX_GZIP:
            raise NotPass(f"ConfigMap {name}: {len(compressed)} gzip bytes, more than {MAX_GZIP}")
        inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        payload = inflate.decompress(compressed, MAX_RAW + 1)
        if len(payload) > MAX_RAW or not inflate.eof or inflate.unconsumed_tail or inflate.unused_data:
            raise NotPass(f"ConfigMap {name}: not exactly one gzip stream of at most {MAX_RAW} bytes")
        document = json.loads(payload, parse_constant=_reject)
        exact = isinstance(document, dict) and canonical(document) == payload
    except NotPass:
        raise
    except (binascii.Error, zlib.error, ValueError, RecursionError) as exc:
        raise NotPass(f"ConfigMap {name}: undecodable: {exc}"[:200]) from exc
    if not exact:
        raise NotPass(f"ConfigMap {name}: not a canonical JSON object")
    if document.get("schema") != schema:
        raise NotPass(f"ConfigMap {name}: schema {document.get('schema')!r}, not {schema}")
    return document, digest_of(payload)


def _check(run: Obj, index: int, entry: Obj, objects: dict[str, Obj]) -> dict[int, str]:
    """Participant index -> verdict of check ``index``, every link of it verified."""
    meta, spec = run["metadata"], run["spec"]
    name = f"{meta['name']}-c{index}-evidence"
    spec_check = spec["checks"][index]
    if entry.get("index") != index or entry.get("name") != spec_check.get("name"):
        raise NotPass(f"the Run evidence's check {index} is {entry.get('index')!r} {entry.get('name')!r}")
    if entry.get("configMap") != name or entry.get("problem") is not None:
        raise NotPass(f"check {index}: entry names {entry.get('configMap')!r}, problem {entry.get('problem')!r}")
    evidence, digest = stored(objects.get(name), name, CHECK_SCHEMA, meta["uid"])
    if digest != entry.get("digest"):
        raise NotPass(f"check {index}: {name} holds {digest}, the Run evidence names {entry.get('digest')}")
    results = evidence.get("results")
    if not isinstance(results, dict) or digest_of(canonical(results)) != evidence.get("resultsDigest"):
        raise NotPass(f"check {index}: the embedded results do not hash to resultsDigest")
    results_name = f"{meta['name']}-c{index}-results"
    if evidence.get("resultsConfigMap") != results_name:
        raise NotPass(f"check {index}: results ConfigMap {evidence.get('resultsConfigMap')!r}, not {results_name}")
    if (entry.get("resultsConfigMap"), entry.get("resultsDigest")) != (results_name, evidence["resultsDigest"]):
        raise NotPass(f"check {index}: the Run evidence's results link is not the check evidence's")
    # The results' content is bound by the digest the (owned) check evidence records; their
    # ConfigMap's owner adds nothing to that, so it is not required here.
    _, stored_results = stored(objects.get(results_name), results_name, RESULTS_SCHEMA, None)
    if stored_results != evidence["resultsDigest"]:
        raise NotPass(
            f"check {index}: {results_name} holds {stored_results}, evidence says {evidence['resultsDigest']}"
        )
    named = results.get("run") or {}
    if (named.get("namespace"), named.get("name"), named.get("uid")) != (meta["namespace"], meta["name"], meta["uid"]):
        raise NotPass(f"check {index}: the results name another Run")
    ident = results.get("check") or {}
    if (ident.get("index"), ident.get("name"), ident.get("sourceDigest")) != (
        index,
        spec_check.get("name"),
        spec["source"]["digest"],
    ):
        raise NotPass(f"check {index}: the results describe another check or source")
    if (evidence.get("cleanup") or {}).get("state") != "Complete":
        raise NotPass(f"check {index}: cleanup did not complete")
    expected = {p["index"]: (p["nodeName"], p["nodeUID"]) for p in spec["participants"]}
    got: dict[int, str] = {}
    for p in results.get("participants") or []:
        key = p.get("index") if isinstance(p, dict) else None
        if key not in expected or key in got or (p.get("nodeName"), p.get("nodeUid")) != expected[key]:
            raise NotPass(f"check {index}: participant {key!r} is unknown, repeated or names another Node")
        got[key] = str(p.get("verdict"))
    if set(got) != set(expected):
        raise NotPass(f"check {index}: no result for participant(s) {sorted(set(expected) - set(got))}")
    return got


def why_not_pass(run: Obj, objects: dict[str, Obj], node: str) -> str | None:
    """None when the stored evidence of ``run`` passes ``node``; else why not. ``objects``: the
    Run's namespace's ConfigMaps by name."""
    try:
        _derive(run, objects, node)
    except NotPass as exc:
        return str(exc)
    except (KeyError, TypeError, AttributeError) as exc:  # a Run or document of an unexpected shape
        return f"malformed: {type(exc).__name__}: {exc}"[:200]
    return None


def _derive(run: Obj, objects: dict[str, Obj], node: str) -> None:
    meta, spec = run["metadata"], run["spec"]
    ref = (run.get("status") or {}).get("evidence") or {}
    name = f"{meta['name']}-evidence"
    if ref.get("configMap") != name:
        raise NotPass(f"status.evidence names {ref.get('configMap')!r}, not {name}")
    document, digest = stored(objects.get(name), name, RUN_SCHEMA, meta["uid"])
    if digest != ref.get("digest"):
        raise NotPass(f"{name} holds {digest}, status.evidence.digest is {ref.get('digest')}")
    named = document.get("run") or {}
    if (named.get("namespace"), named.get("name"), named.get("uid")) != (meta["namespace"], meta["name"], meta["uid"]):
        raise NotPass(f"{name} names another Run")
    if document.get("sourceDigest") != spec["source"]["digest"]:
        raise NotPass(f"{name} records another source digest")
    participants = sorted(spec["participants"], key=lambda p: p["index"])
    recorded = [(p.get("index"), p.get("nodeName"), p.get("nodeUID")) for p in document.get("participants") or []]
    if recorded != [(p["index"], p["nodeName"], p["nodeUID"]) for p in participants]:
        raise NotPass(f"{name} records other participants than the Run's")
    mine = [p["index"] for p in participants if p["nodeName"] == node]
    if len(mine) != 1:
        raise NotPass(f"{node} is not a participant of the Run")
    entries = document.get("checks")
    if not isinstance(entries, list) or len(entries) != len(spec["checks"]):
        raise NotPass(f"{name} records {len(entries or [])} checks, the Run has {len(spec['checks'])}")
    verdicts = [_check(run, i, entry if isinstance(entry, dict) else {}, objects) for i, entry in enumerate(entries)]
    own = {v[mine[0]] for v in verdicts}
    if own != {"Pass"}:
        raise NotPass(f"{node}'s verdicts in the checks are {sorted(own)}, not all Pass")
    every = {verdict for v in verdicts for verdict in v.values()}
    phase = document.get("phase")
    if phase == "Succeeded" and every != {"Pass"}:
        raise NotPass(f"the decision is Succeeded but the participants' verdicts are {sorted(every)}")
    if phase == "Failed" and "Fail" not in every:
        raise NotPass("the decision is Failed but no participant failed a check")
    if phase not in ("Succeeded", "Failed"):
        raise NotPass(f"the decision is {phase!r}, which passes no Node")
    if (document.get("nodes") or {}).get(node) != "Pass":
        raise NotPass(f"the decision gives {node} {(document.get('nodes') or {}).get(node)!r}, not Pass")
