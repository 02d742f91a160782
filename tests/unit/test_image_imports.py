"""Each image's dependencies are exactly what its service imports (issue 45 §4): the third-party
names reachable from the service's entry modules (tests/import_graph.py) are provided by its
requirements/<image>.in, every .in entry is imported, the lock holds the .in and what it depends
on and nothing else, and pyproject's runtime dependencies are the images' together. Inside the
built images the same modules are imported with only the lock installed
(tests/integration/test_container_images.py)."""

import tomllib
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.import_graph import SERVICES, distributions, normalize, pins, reachable

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements"


def closure(names: set[str]) -> set[str]:
    """The distributions ``names`` need, themselves included (installed metadata, no extras)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(normalize(requirement.name))
    return seen


@pytest.mark.parametrize("image", sorted(SERVICES))
def test_each_image_declares_exactly_the_distributions_its_service_imports(image: str) -> None:
    modules, external = reachable(SERVICES[image])
    assert {entry.split(".")[0] for entry in SERVICES[image]} <= {m.split(".")[0] for m in modules}
    imported = distributions(external)
    declared = set(pins(REQUIREMENTS / f"{image}.in"))
    locked = set(pins(REQUIREMENTS / f"{image}.lock"))
    assert imported <= locked, f"{image} imports {sorted(imported - locked)}, not in requirements/{image}.lock"
    assert declared <= imported, f"requirements/{image}.in declares {sorted(declared - imported)}, never imported"
    assert locked == closure(declared), f"requirements/{image}.lock is not requirements/{image}.in's closure"


def test_the_adapter_image_does_not_need_the_template_generator_or_the_local_cluster() -> None:
    """hera (adapter/workflow_template.py, a tool), httpx and kubernetes_asyncio (localcluster,
    tests) are in no image."""
    for image, entries in SERVICES.items():
        modules, external = reachable(entries)
        assert "adapter.workflow_template" not in modules, image
        assert not {m for m in modules if m.split(".")[0] in {"localcluster", "signalctl"}}, image
        assert not distributions(external) & {"hera", "httpx", "kubernetes-asyncio", "testcontainers"}, image


def test_pyproject_runtime_dependencies_are_the_images_dependencies_together() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    runtime = {
        normalize(Requirement(r).name): str(Requirement(r).specifier) for r in project["project"]["dependencies"]
    }
    images: dict[str, str] = {}
    for image in SERVICES:
        images.update({name: f"=={version}" for name, version in pins(REQUIREMENTS / f"{image}.in").items()})
    assert runtime == images
    (backend,) = project["build-system"]["requires"]
    assert pins(REQUIREMENTS / "build.in") == {
        normalize(Requirement(backend).name): str(Requirement(backend).specifier)[2:]
    }


def test_an_import_the_lock_lacks_is_found() -> None:
    """The graph sees function-level imports and skips TYPE_CHECKING ones (the check can fail)."""
    modules, external = reachable(("signalctl.main",))
    assert "signalctl.demo" in modules  # imported inside a function
    assert "httpx" in external  # by the demo's local cluster
