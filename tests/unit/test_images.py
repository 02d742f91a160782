"""Each image's entrypoint is a console script of this distribution (images cannot be built
here: no Docker engine)."""

import json
import re
from importlib.metadata import entry_points
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dockerfile", sorted(REPO.glob("Dockerfile.*")), ids=lambda p: p.name)
def test_entrypoint_is_a_console_script_and_the_user_is_not_root(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
    scripts = {e.name for e in entry_points(group="console_scripts")}
    assert entrypoint[0] in scripts
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users
    assert not users[-1].startswith(("0", "root"))
