"""Generates the two CustomResourceDefinitions from the pydantic models.

``render_crds()`` is pure: models in, YAML text out. ``python -m shared.crdgen [DIR]``
writes them to ``crds/`` (the only way those files are made); a test regenerates them
in memory and fails on drift. The conversion turns pydantic's JSON Schema into a
Kubernetes structural schema: references inlined, nullable unions collapsed (Signal
never sends nulls), titles dropped, ``propertyNames`` dropped (key rules are CEL).
"""

import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from shared import keys
from shared.meta import DNS_LABEL_PATTERN
from shared.profile import CertificationProfile
from shared.run import CertificationRun
from shared.schema_docs import DocumentedSchema

JsonSchema = dict[str, Any]


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper with its own string style, whatever a library imported in the same
    process registered on ``yaml.SafeDumper`` (hera renders multi-line strings as blocks), so
    the rendering, and the drift test, do not depend on what else was imported."""


_Dumper.add_representer(str, yaml.representer.SafeRepresenter.represent_str)
_DROP = {"title", "propertyNames", "patternProperties", "$defs"}


def _resolve(node: Any, defs: dict[str, JsonSchema]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**target, **node}
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node.pop("allOf")[0], **node}
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        if len(options) != 1:
            raise ValueError(f"unsupported union in CRD schema: {node['anyOf']}")
        del node["anyOf"]
        node = {**_resolve(options[0], defs), **node}
        if node.get("default", 0) is None:
            del node["default"]
    if "patternProperties" in node and "additionalProperties" not in node:
        # Key patterns are not structural; keys are checked by CEL rules instead.
        (value_schema,) = node.pop("patternProperties").values()
        node["additionalProperties"] = value_schema
    if "exclusiveMaximum" in node and node.get("type") == "integer":
        node["maximum"] = node.pop("exclusiveMaximum") - 1
    out: JsonSchema = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {name: _resolve(prop, defs) for name, prop in value.items()}
        elif key in {"items", "additionalProperties"} and isinstance(value, dict):
            out[key] = _resolve(value, defs)
        else:
            out[key] = value
    if "$ref" in out or "anyOf" in out or "allOf" in out:
        return _resolve(out, defs)
    return out


def structural_schema(model: type[BaseModel]) -> JsonSchema:
    """The model's JSON Schema as a Kubernetes structural schema (refs inlined)."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=DocumentedSchema)
    schema: JsonSchema = _resolve(raw, raw.get("$defs", {}))
    return schema


def _crd(
    model: type[BaseModel],
    *,
    kind: str,
    plural: str,
    scope: str,
    short_names: list[str],
    columns: list[dict[str, str | int]],
    name_pattern: str | None = None,
) -> JsonSchema:
    schema = structural_schema(model)
    properties = schema["properties"]
    metadata: JsonSchema = {"type": "object"}
    if name_pattern:
        metadata["properties"] = {"name": {"type": "string", "maxLength": 63, "pattern": name_pattern}}
    root: JsonSchema = {
        "type": "object",
        "description": schema.get("description", ""),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": metadata,
            "spec": properties["spec"],
            "status": properties["status"],
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{keys.GROUP}"},
        "spec": {
            "group": keys.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["signal"],
            },
            "scope": scope,
            "versions": [
                {
                    "name": keys.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def _ready(column: str) -> str:
    return f'.status.conditions[?(@.type=="{column}")].status'


def crd_documents() -> dict[str, JsonSchema]:
    """File name to CRD object, for both Signal kinds."""
    return {
        f"{keys.GROUP}_{keys.PROFILE_PLURAL}.yaml": _crd(
            CertificationProfile,
            kind=keys.PROFILE_KIND,
            plural=keys.PROFILE_PLURAL,
            scope="Cluster",
            short_names=["cprof"],
            name_pattern=DNS_LABEL_PATTERN,
            columns=[
                {"name": "Count", "type": "integer", "jsonPath": ".spec.participants.count"},
                {"name": "Ready", "type": "string", "jsonPath": _ready("Ready")},
                {
                    "name": "Reason",
                    "type": "string",
                    "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
                },
                {"name": "Eligible", "type": "integer", "jsonPath": ".status.eligibleNodes"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        ),
        f"{keys.GROUP}_{keys.RUN_PLURAL}.yaml": _crd(
            CertificationRun,
            kind=keys.RUN_KIND,
            plural=keys.RUN_PLURAL,
            scope="Namespaced",
            short_names=["crun"],
            columns=[
                {"name": "Profile", "type": "string", "jsonPath": ".spec.profile.name"},
                {"name": "Attempt", "type": "integer", "jsonPath": ".spec.attempt"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
                {
                    "name": "Evidence",
                    "type": "string",
                    "priority": 1,
                    "jsonPath": ".status.evidence.digest",
                },
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        ),
    }


HEADER = "# Generated by `python -m shared.crdgen` from the models in shared/. Do not edit.\n"


def render_crds() -> dict[str, str]:
    """File name to YAML text, exactly as written to crds/."""
    return {
        name: HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=True, width=120)
        for name, doc in crd_documents().items()
    }


def main(argv: list[str] | None = None) -> int:
    """Write the CRDs into the given directory (default: crds/)."""
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0] if args else "crds")
    target.mkdir(parents=True, exist_ok=True)
    for name, text in render_crds().items():
        (target / name).write_text(text, encoding="utf-8")
        print(f"wrote {target / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
