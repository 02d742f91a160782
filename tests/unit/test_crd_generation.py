"""crds/ is generated from the models: regenerate in memory and fail on drift."""

import json
from pathlib import Path
from typing import Any

import yaml

from shared.crdgen import crd_documents, render_crds

CRDS = Path(__file__).resolve().parents[2] / "crds"


def test_committed_crds_match_the_models() -> None:
    rendered = render_crds()
    on_disk = {p.name: p.read_text() for p in CRDS.glob("*.yaml")}
    assert set(on_disk) == set(rendered), "run: python -m shared.crdgen"
    for name, text in rendered.items():
        assert on_disk[name] == text, f"{name} drifted from the models; run: python -m shared.crdgen"


def _walk(node: Any, path: str = "") -> list[str]:
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in {
                "$ref",
                "anyOf",
                "allOf",
                "oneOf",
                "title",
                "$defs",
                "propertyNames",
                "patternProperties",
                "const",
            }:
                found.append(f"{path}.{key}")
            if key == "exclusiveMaximum" and not isinstance(value, bool):
                found.append(f"{path}.{key}")
            found += _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += _walk(item, f"{path}[{i}]")
    return found


def test_schemas_are_structural() -> None:
    for doc in crd_documents().values():
        assert _walk(doc) == []
        assert yaml.safe_load(yaml.safe_dump(doc)) == json.loads(json.dumps(doc))


def test_run_spec_is_guarded_by_cel() -> None:
    run = crd_documents()["projectsignal.dev_certificationruns.yaml"]
    spec = run["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert "!oldSelf.cancel || self.cancel" in rules
    assert "!oldSelf.release || self.release" in rules
    immutable = {
        name
        for name, prop in spec["properties"].items()
        if {"rule": "self == oldSelf", "message": "is immutable"} in prop.get("x-kubernetes-validations", [])
    }
    assert immutable == {
        "profile",
        "checks",
        "source",
        "participants",
        "suiteDeadlineSeconds",
        "attempt",
        "adoptQuarantine",
        "onFail",
        "busyNodes",
    }
    assert "has(oldSelf.adoptQuarantine) == has(self.adoptQuarantine)" in rules


def test_both_kinds_have_status_subresource_and_printer_columns() -> None:
    for doc in crd_documents().values():
        version = doc["spec"]["versions"][0]
        assert version["subresources"] == {"status": {}}
        assert {c["name"] for c in version["additionalPrinterColumns"]} >= {"Age"}
