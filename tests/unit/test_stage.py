"""hack/stage.py (issue 46, "First run"): one line per stage of make, the raw output in a log
file, the command's own status lines shown, and on failure the tail, the log's path and the
command's exit status. Run as make runs it: a process with the system Python."""

import subprocess
import sys
from pathlib import Path

STAGE = Path(__file__).resolve().parents[2] / "hack" / "stage.py"
LOGS = STAGE.parent.parent / ".cache" / "logs"


def _stage(name: str, script: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(STAGE), name, "what it does", "sh", "-c", script]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_a_stage_prints_its_status_lines_only_and_logs_everything() -> None:
    name = "test-stage-ok"
    done = _stage(name, f"echo 'go: downloading a/b v1'; echo '{name}: cached build x' >&2; echo noise")
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert lines[0] == f"==> {name}: what it does"
    assert lines[1] == f"    {name}: cached build x"
    assert lines[2].startswith(f"    {name}: done in "), lines
    assert len(lines) == 3, lines
    assert "downloading" not in done.stdout + done.stderr
    log = (LOGS / f"{name}.log").read_text()
    for line in ("go: downloading a/b v1", "noise", f"{name}: cached build x"):
        assert line in log


def test_a_failed_stage_shows_its_tail_and_log_and_exits_with_the_commands_status() -> None:
    name = "test-stage-failed"
    failed = _stage(name, "echo 'first'; echo 'error: no space left' >&2; exit 7")
    assert failed.returncode == 7
    assert f"{name}: FAILED (exit 7)" in failed.stderr
    assert "error: no space left" in failed.stderr
    assert str(LOGS / f"{name}.log") in failed.stderr


def test_a_command_that_cannot_start_is_a_failed_stage() -> None:
    command = [sys.executable, str(STAGE), "test-stage-missing", "x", "/nonexistent/tool"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 127
    assert "FAILED to start /nonexistent/tool" in done.stderr
