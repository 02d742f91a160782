"""Every module of controller/ is in a layer of the import contracts (pyproject.toml), so
lint-imports checks where it may import from; a new module outside every layer fails here
(issue 46: reassert, evidence_adoption, requested and requeue were in none)."""

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def test_every_controller_module_is_in_a_layer() -> None:
    layered = next(c for c in _contracts() if str(c["name"]).startswith("Controller layers"))
    named = {m.strip() for layer in layered["layers"] for m in str(layer).replace("|", ":").split(":")}  # type: ignore[attr-defined]
    modules = {_module(p) for p in (REPO / "controller").rglob("*.py") if p.stem != "__init__"}
    assert sorted(modules - named) == [], "controller modules in no layer of pyproject.toml's contract"
    assert sorted(named - modules) == [], "layers naming modules that do not exist"


def test_every_controller_module_that_says_it_is_pure_is_in_the_pure_contract() -> None:
    pure = next(c for c in _contracts() if str(c["name"]).startswith("Pure decision modules"))
    listed = set(pure["source_modules"])  # type: ignore[arg-type]
    # "Pure" about the module, not "Pure: ``f``, ``g``" about some of an I/O module's functions
    said = {
        _module(p)
        for p in (REPO / "controller").rglob("*.py")
        if p.stem != "__init__" and re.search(r"\bPure\b(?!: ``)", ast.get_docstring(ast.parse(p.read_text())) or "")
    }
    assert sorted(said - listed) == [], "modules whose docstring says Pure but that lint-imports does not hold to it"
