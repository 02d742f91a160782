"""The code map (docs/code-map.md) is generated from the modules' docstrings and current: a
module added, removed or re-described without ``python3 hack/codemap.py`` fails here (issue 46).
The README's *Map of the code* names only modules that exist, and every controller module in its
package's row."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_code_map_names_every_module_as_its_docstring_says() -> None:
    check = [sys.executable, str(REPO / "hack" / "codemap.py"), "--check"]
    done = subprocess.run(check, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_the_check_names_a_module_the_map_misses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("codemap", REPO / "hack" / "codemap.py")
    assert spec is not None
    assert spec.loader is not None
    codemap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(codemap)
    text = codemap.render()
    row = next(line for line in text.splitlines() if line.startswith("| `controller/reconcile/runs.py` |"))
    stale = tmp_path / "code-map.md"
    stale.write_text(text.replace(row + "\n", ""))
    monkeypatch.setattr(codemap, "TARGET", stale)
    assert codemap.main(["--check"]) == 1
    assert f"missing from {stale}: {row}" in capsys.readouterr().err
    assert codemap.first_sentence("Short enough to stop here. More.") == "Short enough to stop here."
    assert codemap.first_sentence("A list follows:\n\n* one") == "A list follows"
    assert "| `controller/rules/` | Pure decisions" in text, "a subpackage is shown by its folder"


def _readme_map() -> list[tuple[list[str], list[str]]]:
    """The README's *Map of the code*: per row, the folders it is about and the modules it names."""
    section = (REPO / "README.md").read_text().split("## Map of the code", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `"):
            about, what = line.split(" | ", 1)
            rows.append((re.findall(r"`([^`]+)`", about), re.findall(r"`([\w/.-]+\.py)`", what)))
    return rows


def test_the_readme_map_names_modules_that_exist_and_every_controller_module_by_its_package() -> None:
    rows = _readme_map()
    missing = [
        f"{folders}: {name}"
        for folders, names in rows
        for name in names
        if not ((REPO / name).is_file() if "/" in name else any((REPO / f / name).is_file() for f in folders))
    ]
    assert missing == [], "the README's map names modules that do not exist (moved or removed?)"
    named = {(folder, name) for folders, names in rows for folder in folders for name in names}
    unnamed = [
        path.relative_to(REPO).as_posix()
        for path in sorted((REPO / "controller").glob("*/*.py"))
        if path.name != "__init__.py" and (f"{path.parent.relative_to(REPO).as_posix()}/", path.name) not in named
    ]
    assert unnamed == [], "controller modules the README's map does not name in their package's row"
