"""The modules a service can import, read from its sources (no import runs): the closure of the
project's modules reachable from its entry modules through ``import`` statements at any depth
(function-level imports included; ``if TYPE_CHECKING:`` blocks excluded), and the third-party
top-level names those modules import. Used to check each image's lock
(tests/unit/test_image_imports.py) and to import the same modules inside the built images
(tests/integration/test_container_images.py)."""

import ast
import functools
import re
import sys
from collections.abc import Mapping
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parent.parent
PROJECT: Final = frozenset(
    {"shared", "kubeio", "controller", "adapter", "runner", "portal", "signalctl", "localcluster"}
)
# Each image's entry modules: its console script's module (Dockerfile ENTRYPOINT) and, for the
# runner, the file the entrypoint links to.
SERVICES: Final = {
    "controller": ("controller.process.main",),
    "adapter": ("adapter.main",),
    "portal": ("portal.main",),
    "runner": ("runner.main", "runner.launch"),
}


def _source(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[str]:
    """Every module an ``import``/``from`` names, outside ``if TYPE_CHECKING:`` blocks; for
    ``from a import b`` both ``a`` and ``a.b`` (``b`` may be a submodule)."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def reachable(entries: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """(project modules reachable from ``entries``, third-party top-level names they import)."""
    modules: set[str] = set()
    external: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        top = name.split(".")[0]
        if top not in PROJECT:
            # Private top-level names (``_sha2``) are CPython's own, tried under try/except.
            if top not in sys.stdlib_module_names and not top.startswith("_"):
                external.add(top)
            continue
        # Importing a.b.c runs a/__init__, a/b/__init__ too.
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in modules:
                continue
            path = _source(prefix)
            if path is None:
                continue  # ``from pkg import name`` where name is not a module
            modules.add(prefix)
            todo.extend(_imports(ast.parse(path.read_text(), str(path))))
    return modules, external


def distributions(top_levels: set[str]) -> set[str]:
    """The (normalized) distributions that provide these top-level import names."""
    provided = _provided()
    missing = sorted(top_levels - set(provided))
    assert not missing, f"no installed distribution provides {missing}"
    return {normalize(dist) for top in top_levels for dist in provided[top]}


@functools.cache
def _provided() -> Mapping[str, list[str]]:
    return packages_distributions()


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """{normalized name: version} of a .in or .lock file (``name==version`` lines)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\]+)", line)
        if match:
            found[normalize(match.group(1))] = match.group(2)
    return found
