"""The controller's folders are its layers (pyproject.toml's import contracts, issue 46): every
module of controller/ is in one of the packages of the "Controller layers" contract (none beside
them), and in one layer of its package's own contract, so lint-imports checks where it may
import from; a module that says it is pure is in ``controller.rules``, which the pure contract
holds to importing no I/O library (issue 46: reassert, evidence_adoption, requested and requeue
were once in no layer)."""

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTROLLER = REPO / "controller"


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _layered(container: str) -> dict[str, object]:
    return next(c for c in _contracts() if c["type"] == "layers" and c.get("containers") == [container])


def _names(contract: dict[str, object]) -> list[str]:
    return [m.strip() for layer in contract["layers"] for m in str(layer).replace("|", ":").split(":")]  # type: ignore[attr-defined]


def _modules(package: Path) -> set[str]:
    return {p.stem for p in package.glob("*.py") if p.stem != "__init__"}


def test_the_controller_is_its_layer_packages_and_nothing_beside_them() -> None:
    top = _layered("controller")
    assert str(top["name"]).startswith("Controller layers")
    assert top.get("exhaustive") is True, "lint-imports must refuse a module beside the layer packages"
    packages = _names(top)
    assert _modules(CONTROLLER) == set(), "modules directly in controller/: move each into its layer's package"
    found = {p.name for p in CONTROLLER.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(found) == sorted(packages), "controller's packages and the layers of pyproject.toml's contract"


def test_every_controller_module_is_in_one_layer_of_its_package() -> None:
    for package in _names(_layered("controller")):
        contract = _layered(f"controller.{package}")
        assert contract.get("exhaustive") is True, f"controller.{package}: its layers contract must be exhaustive"
        named = _names(contract)
        modules = _modules(CONTROLLER / package)
        assert sorted(m for m in set(named) if named.count(m) > 1) == [], f"controller.{package}: in two layers"
        assert sorted(modules - set(named)) == [], f"controller.{package} modules in no layer of pyproject.toml"
        assert sorted(set(named) - modules) == [], f"controller.{package} layers naming modules that do not exist"
        assert not any(p.is_dir() and p.name != "__pycache__" for p in (CONTROLLER / package).iterdir()), (
            f"controller.{package}: a nested package needs its own layers contract"
        )


def test_every_controller_module_that_says_it_is_pure_is_in_the_pure_contract() -> None:
    pure = next(c for c in _contracts() if str(c["name"]).startswith("Pure decision modules"))
    listed: list[str] = pure["source_modules"]  # type: ignore[assignment]
    assert "controller.rules" in listed, "the pure contract holds the whole rules package"
    # "Pure" about the module, not "Pure: ``f``, ``g``" about some of an I/O module's functions
    said = {
        ".".join(p.relative_to(REPO).with_suffix("").parts)
        for p in CONTROLLER.rglob("*.py")
        if p.stem != "__init__" and re.search(r"\bPure\b(?!: ``)", ast.get_docstring(ast.parse(p.read_text())) or "")
    }
    held = {m for m in said if any(m == s or m.startswith(f"{s}.") for s in listed)}
    assert sorted(said - held) == [], "modules whose docstring says Pure but that lint-imports does not hold to it"
