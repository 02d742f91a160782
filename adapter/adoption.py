"""What the adapter may adopt of a check's stored results or evidence. Pure.

A retried step finds ``<run>-c<index>-results`` (and perhaps ``-evidence``) already there and
reuses it instead of running the check again. That is safe only for what this step would
have written itself, so a stored document is adopted only if its ConfigMap carries this
Run's and this check's labels (``run``, ``run-uid``, ``check``, ``component=evidence``) and an
ownerReference to this Run (name and uid), and the document decodes (immutable, canonical, the
expected schema) and describes this Run (namespace, name, uid) and this check (index, name,
backend, script key). Anything else is refused, naming the ConfigMap: the step fails, no later
check starts, and the Run cannot pass.

Who may write such a ConfigMap at all is the API server's business (the ``signal-evidence``
admission policy, deploy/base/evidence-admission-policy.yaml); this is the adapter's own
check that what it reads is what it wrote for this check."""

from typing import Any

from adapter.inputs import Inputs, Refusal
from shared import keys
from shared.evidence import RESULTS_SCHEMA, EvidenceError, decode_document

Obj = dict[str, Any]
COMPONENT = "evidence"


def labels(inputs: Inputs) -> dict[str, str]:
    """The labels the adapter puts on a check's results and evidence ConfigMaps."""
    return {
        keys.RUN_NAME_LABEL: inputs.run_name,
        keys.RUN_UID_LABEL: inputs.run_uid,
        keys.CHECK_LABEL: inputs.check.name,
        keys.COMPONENT_LABEL: COMPONENT,
    }


def _problem(config_map: Obj, inputs: Inputs, document: Obj, schema: str) -> str | None:
    meta = config_map.get("metadata") or {}
    found = meta.get("labels") or {}
    wrong = sorted(k for k, v in labels(inputs).items() if found.get(k) != v)
    if wrong:
        return f"its labels {', '.join(wrong)} are not this Run's and check's"
    owners = meta.get("ownerReferences") or []
    if not any(
        o.get("kind") == keys.RUN_KIND and o.get("name") == inputs.run_name and o.get("uid") == inputs.run_uid
        for o in owners
    ):
        return f"it is not owned by Run {inputs.run_name} ({inputs.run_uid})"
    results = document if schema == RESULTS_SCHEMA else document.get("results")
    if not isinstance(results, dict):
        return "it holds no results"
    run = {"namespace": inputs.run_namespace, "name": inputs.run_name, "uid": inputs.run_uid}
    if results.get("run") != run:
        return "it describes another Run"
    check = results.get("check") or {}
    mine = (inputs.check_index, inputs.check.name, inputs.check.backend, inputs.check.script_key)
    if (check.get("index"), check.get("name"), check.get("backend"), check.get("scriptKey")) != mine:
        return f"it describes another check ({check.get('index')} {check.get('name')!r})"
    return None


def adoptable(config_map: Obj, inputs: Inputs, schema: str) -> tuple[Obj, str]:
    """The document stored in ``config_map`` and its digest; raise Refusal unless it is this
    check's own."""
    name = f"{inputs.run_namespace}/{(config_map.get('metadata') or {}).get('name', '?')}"
    try:
        document, digest = decode_document(config_map, schema)
    except EvidenceError as exc:
        raise Refusal(f"ConfigMap {name} is unusable: {exc}; delete it to run the check again") from exc
    problem = _problem(config_map, inputs, document, schema)
    if problem is not None:
        raise Refusal(
            f"ConfigMap {name} is not this check's to adopt: {problem}. It was not written by this check's "
            "adapter; inspect and delete it (the Run cannot pass while it is there)"
        )
    return document, digest
