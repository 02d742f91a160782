"""Images are configurable and pinned in one place (issue 11, 2.3): an overlay's kustomize
``images:`` entries (by digest) reach every Pod template deploy/ renders (controller, portal,
the WorkflowTemplate's adapter steps) and the adapter's ``--runner-image``, hence the runner's
own Pod templates (backend Pods, MPI launchers and workers). Rendered with the kustomize of
the local control plane's kubectl; nothing is applied."""

import os
from pathlib import Path
from typing import Any

import yaml

from adapter.main import parser
from adapter.mpispec import mpijobs
from adapter.workflow_template import RUNNER_IMAGE_ENV
from adapter.workloads import backend_pod
from shared import keys
from tests.integration.test_deploy_manifests import DEPLOY, kustomize
from tests.unit.signal_builders import make_inputs

Obj = dict[str, Any]
COMPONENTS = ("controller", "portal", "adapter", "runner")


def digest(component: str) -> str:
    return "sha256:" + f"{COMPONENTS.index(component) + 1}" * 64


def pinned(component: str) -> str:
    return f"registry.example/signal/{component}@{digest(component)}"


def overlay(tmp_path: Path) -> list[Obj]:
    """deploy/ through an operator's overlay that pins every image by digest."""
    directory = tmp_path / "overlay"
    directory.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY, directory)],
        "images": [
            {
                "name": f"projectsignal.dev/{c}",
                "newName": f"registry.example/signal/{c}",
                "digest": digest(c),
            }
            for c in COMPONENTS
        ],
    }
    # Nothing else: the images: entries are the one place (the adapter policy reads the runner
    # image from the Signal Namespace's annotation, which the runner's entry sets).
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return kustomize(directory)


def pod_containers(docs: list[Obj]) -> list[tuple[str, Obj]]:
    """(owner, container) for every container of every Pod template deploy/ renders."""
    found = []
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
            pod = spec["template"]["spec"]
            for container in pod.get("initContainers", []) + pod["containers"]:
                found.append((f"{doc['kind']}/{doc['metadata']['name']}", container))
        if doc["kind"] == "WorkflowTemplate":
            for template in spec["templates"]:
                if "container" in template:
                    found.append((f"WorkflowTemplate/{template['name']}", template["container"]))
    return found


def test_an_overlay_pins_every_image_by_digest_and_reaches_every_pod_template(tmp_path: Path) -> None:
    docs = overlay(tmp_path)
    containers = pod_containers(docs)
    owners = {owner for owner, _ in containers}
    assert {"Deployment/signal-controller", "Deployment/signal-portal"} <= owners
    assert {"WorkflowTemplate/check", "WorkflowTemplate/sweep"} <= owners
    for owner, container in containers:
        component = container["image"].split("/")[-1].split("@")[0]
        assert container["image"] == pinned(component), owner
    # Nothing in the rendered output still names an unpinned image of ours.
    assert "projectsignal.dev/controller" not in yaml.safe_dump_all(docs)
    for prefix in ("projectsignal.dev/runner", "projectsignal.dev/adapter", "projectsignal.dev/portal"):
        for reference in (f"{prefix}:", f"{prefix}@"):  # (the annotation key runner-image is no image)
            assert reference not in yaml.safe_dump_all(docs), reference

    # The runner image reaches every adapter step, and through --runner-image, the runner's
    # own Pod templates.
    steps = [c for owner, c in containers if owner.startswith("WorkflowTemplate/")]
    for step in steps:
        env = {e["name"]: e["value"] for e in step.get("env", [])}
        assert env[RUNNER_IMAGE_ENV] == pinned("runner")
        previous = os.environ.get(RUNNER_IMAGE_ENV)
        os.environ[RUNNER_IMAGE_ENV] = env[RUNNER_IMAGE_ENV]
        try:
            args = parser().parse_args(step["args"])
        finally:
            if previous is None:
                del os.environ[RUNNER_IMAGE_ENV]
            else:
                os.environ[RUNNER_IMAGE_ENV] = previous
        assert args.runner_image == pinned("runner")
    # ... and the Signal Namespace's annotation, the image the adapter's admission policy allows.
    (namespace,) = [d for d in docs if d["kind"] == "Namespace"]
    assert namespace["metadata"]["annotations"][keys.RUNNER_IMAGE_ANNOTATION] == pinned("runner")
    image = pinned("runner")
    runner_templates = [backend_pod(make_inputs(2), 0, "gpu-000", image)["spec"]]
    for job in mpijobs(make_inputs(2, backend="MPIJob"), image):
        runner_templates += [r["template"]["spec"] for r in job["spec"]["mpiReplicaSpecs"].values()]
    assert len(runner_templates) == 5
    for spec in runner_templates:
        assert [c["image"] for c in spec["containers"]] == [pinned("runner")]


def test_without_an_overlay_the_base_names_the_images_once_with_their_release_tag() -> None:
    containers = pod_containers(kustomize(DEPLOY))
    images = {c["image"] for _, c in containers}
    assert images == {f"projectsignal.dev/{c}:0.1.0" for c in ("controller", "portal", "adapter")}
    runner = {
        e["value"]
        for owner, c in containers
        if owner.startswith("Workflow")
        for e in c.get("env", [])
        if e["name"] == RUNNER_IMAGE_ENV
    }
    assert runner == {"projectsignal.dev/runner:0.1.0"}
