"""Invariant 3's question, "does this Run's stored evidence pass this Node?", asked twice: of
``signalctl evidence verify``'s pure verification (the ``shared.acceptance`` rules the controller
decides with) and of the checker's own re-derivation from the raw bytes (tests/chaos/rederive.py,
which shares no code with those rules). A projection counts as proven only when both say Pass;
when only one does, the answer says which, so a bug on either side is reported, not hidden.
Pure; no I/O."""

from typing import Any

from shared.evidence import EvidenceError, decode_document
from shared.runevidence import RUN_EVIDENCE_SCHEMAS
from signalctl import verify as independent
from tests.chaos import rederive

Obj = dict[str, Any]


def verify_shared(run: Obj, objects: dict[tuple[str, str, str], Obj], node: str) -> str | None:
    """None when ``run``'s stored evidence verifies (``signalctl evidence verify``, the shared
    rules) and passes ``node``; else why not."""
    meta = run["metadata"]
    ref = (run.get("status") or {}).get("evidence") or {}
    if not ref.get("configMap"):
        return "the Run has no evidence yet"
    ns = meta["namespace"]
    run_cm = objects.get(("ConfigMap", ns, ref["configMap"]))
    checks = {
        i: objects.get(("ConfigMap", ns, independent.check_config_map_name(meta["name"], i)))
        for i in range(len(run["spec"]["checks"]))
    }
    results = {
        i: objects.get(("ConfigMap", ns, independent.results_config_map_name(meta["name"], i)))
        for i in range(len(run["spec"]["checks"]))
    }
    findings = independent.verify(run, run_cm, checks, results)
    bad = [f for f in findings if f.state != "OK"]
    if bad:
        return f"evidence does not verify: {bad[0].subject}: {bad[0].detail}"[:300]
    assert run_cm is not None
    try:
        document, _ = decode_document(run_cm, RUN_EVIDENCE_SCHEMAS)
    except EvidenceError as exc:  # verify() decoded it already; kept for the type checker
        return str(exc)
    verdict = (document.get("nodes") or {}).get(node)
    return None if verdict == "Pass" else f"the evidence gives {node} {verdict!r}, not Pass"


def verify_own(run: Obj, objects: dict[tuple[str, str, str], Obj], node: str) -> str | None:
    """The checker's own re-derivation (tests/chaos/rederive.py) of the same question."""
    ns = run["metadata"]["namespace"]
    config_maps = {name: obj for (kind, space, name), obj in objects.items() if kind == "ConfigMap" and space == ns}
    return rederive.why_not_pass(run, config_maps, node)


def verify_pass(run: Obj, objects: dict[tuple[str, str, str], Obj], node: str) -> str | None:
    """None when both the shared verification and the independent re-derivation pass ``node``;
    else why not, saying which of the two disagrees when only one of them passes it."""
    shared = verify_shared(run, objects, node)
    own = verify_own(run, objects, node)
    if shared is None and own is None:
        return None
    if shared is None:
        return f"the shared rules (signalctl evidence verify) pass it, the independent re-derivation does not: {own}"
    if own is None:
        return f"the independent re-derivation passes it, the shared rules (signalctl evidence verify) do not: {shared}"
    return shared
