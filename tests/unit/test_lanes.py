"""The test lanes (tests/lanes.py, issue 46): which lane a test is in, and the listed system
files all exist (a renamed file would silently fall back to the integration lane)."""

from pathlib import Path, PurePath

import pytest

from tests.lanes import SYSTEM_FILES, lane

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("path", "fixtures", "marked", "expected"),
    [
        ("tests/unit/test_next_action.py", (), False, "unit"),
        ("tests/unit/test_next_action.py", ("tmp_path",), False, "unit"),
        ("tests/unit/test_x.py", ("cluster",), False, "integration"),
        ("tests/unit/test_x.py", ("namespace", "admin", "cluster"), False, "integration"),
        # a parameter named namespace, no cluster in the closure
        ("tests/unit/test_controller_sources.py", ("namespace", "allowed"), False, "unit"),
        ("tests/unit/test_x.py", (), True, "system"),
        ("tests/integration/test_controller_admission.py", ("cluster", "admin"), False, "integration"),
        ("tests/integration/test_new_file.py", ("cluster",), False, "integration"),
        ("tests/integration/test_new_file.py", ("cluster",), True, "system"),
        ("tests/integration/test_recovery_after_crash.py", ("cluster",), False, "system"),
        ("tests/integration/test_runs_on_real_nodes.py", ("cluster",), False, "system"),
        ("tests/chaos/test_checker.py", (), False, "system"),
        ("/ci/copy/tests/unit/test_next_action.py", (), False, "unit"),
        # a checkout in a directory named like a lane's folder: only the parts under tests/ count
        ("/work/wt/chaos/tests/unit/test_next_action.py", (), False, "unit"),
        ("/home/unit/repo/tests/integration/test_x.py", ("cluster",), False, "integration"),
        ("/work/wt/chaos/tests/chaos/test_campaign.py", (), False, "system"),
    ],
)
def test_lane(path: str, fixtures: tuple[str, ...], marked: bool, expected: str) -> None:
    assert lane(PurePath(path), fixtures, marked_system=marked) == expected


def test_every_listed_system_file_exists() -> None:
    present = {p.name for p in (TESTS / "integration").glob("test_*.py")}
    assert sorted(SYSTEM_FILES - present) == []
