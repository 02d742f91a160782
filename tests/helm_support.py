"""Helpers of the tests of Signal's Helm chart (tests/integration/test_helm_*.py): the real
helm, rendering, and comparing rendered objects."""

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

from localcluster.helmchart import CHART, DEPLOY, helm_binary

Obj = dict[str, Any]
DIGEST = "sha256:" + "ab" * 32
Key = tuple[str, str, str, str]


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real helm; with ``kubeconfig``, its cache and settings beside that file."""
    env = {**os.environ, "HELM_CACHE_HOME": "/nonexistent/cache", "HELM_CONFIG_HOME": "/nonexistent/config"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
        env["HELM_CACHE_HOME"] = str(kubeconfig.parent / "helm-cache")
        env["HELM_CONFIG_HOME"] = str(kubeconfig.parent / "helm-config")
    done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, check=False, env=env)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)} failed (exit {done.returncode}):\n{done.stderr}"
    return done


def template(values: Obj | None = None, *extra: str, tmp_path: Path | None = None) -> list[Obj]:
    """``helm template`` of the chart (CRDs included) with ``values`` as a values file."""
    args = ["template", "signal", str(CHART), "--include-crds", *extra]
    if values:
        assert tmp_path is not None
        path = tmp_path / f"values-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]


def keyed(docs: list[Obj]) -> dict[Key, Obj]:
    found: dict[Key, Obj] = {}
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
        assert key not in found, f"{key} rendered twice"
        found[key] = doc
    return found


def assert_same_objects(chart: list[Obj], kustomized: list[Obj]) -> None:
    """Object by object: the same set of (apiVersion, kind, namespace, name), each equal."""
    ours, theirs = keyed(chart), keyed(kustomized)
    assert sorted(ours) == sorted(theirs), (
        f"only in the chart: {sorted(set(ours) - set(theirs))}; only in kustomize: {sorted(set(theirs) - set(ours))}"
    )
    for key, obj in theirs.items():
        assert ours[key] == obj, f"{key} differs:\nchart: {json.dumps(ours[key], sort_keys=True)}\n" + (
            f"kustomize: {json.dumps(obj, sort_keys=True)}"
        )


def overlay(tmp_path: Path, kustomization: Obj) -> Path:
    """A throwaway kustomize overlay; paths in ``kustomization`` are relative to the repository."""
    folder = tmp_path / f"overlay-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    for field in ("resources", "components"):
        if field in kustomization:
            kustomization[field] = [os.path.relpath(DEPLOY.parent / p, folder) for p in kustomization[field]]
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return folder


def find(docs: list[Obj], kind: str, name: str) -> Obj:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def variables(policy: Obj) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
