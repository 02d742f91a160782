"""Helpers for the catalog's tests (checks/*): load a check script as a module, read a recorded
real output, and run the script the way the runner does (its ``#!`` line, a clean environment,
``SIGNAL_PARAM_*`` parameters, a ``PATH`` that holds only what the test puts there)."""

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHECKS = REPO / "checks"
DATA = REPO / "tests" / "data" / "checks"
EXIT = {"Pass": 0, "Fail": 1, "Inconclusive": 3}


def load_check(check: str, script: str) -> ModuleType:
    """A catalog script as a module (its verification functions are pure)."""
    name = f"catalog_{script.removesuffix('.py')}"
    spec = importlib.util.spec_from_file_location(name, CHECKS / check / script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def fixture(check: str, name: str) -> str:
    return (DATA / check / name).read_text(encoding="utf-8")


def fixtures(check: str) -> list[Path]:
    return sorted((DATA / check).iterdir())


def verify_cli(check: str, script: str, path: Path, params: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """``python3 SCRIPT --verify FILE --name value ...``: (exit code, the JSON line)."""
    argv = [sys.executable, str(CHECKS / check / script), "--verify", str(path)]
    for name, value in params.items():
        argv += [f"--{name}", value]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, done.stdout + done.stderr
    return done.returncode, json.loads(lines[0])


def tool_dir(tmp: Path) -> Path:
    """A directory for ``PATH`` holding ``python3`` alone (the scripts' ``#!/usr/bin/env python3``)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if not (bin_dir / "python3").exists():
        (bin_dir / "python3").symlink_to(sys.executable)
    return bin_dir


def stand_in(bin_dir: Path, tool: str, output: Path, exit_code: int = 0) -> None:
    """A stand-in for ``tool`` that prints a recorded real output (less its ``# source`` line)."""
    recorded = bin_dir / f"{tool}.recorded"
    recorded.write_text(output.read_text(encoding="utf-8").split("\n", 1)[1], encoding="utf-8")
    cat = shutil.which("cat")
    assert cat is not None
    script = bin_dir / tool
    script.write_text(f"#!/bin/sh\n{cat} '{recorded}'\nexit {exit_code}\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def run_check(
    check: str,
    script: str,
    path_dirs: list[Path],
    params: dict[str, str],
    tmp: Path,
    extra: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], str]:
    """Run a catalog script in run mode as the runner would: clean environment, parameters as
    ``SIGNAL_PARAM_<NAME>``, a measurements file. (exit code, its JSON line, stderr)."""
    env = {
        "PATH": os.pathsep.join(str(d) for d in path_dirs),
        "HOME": str(tmp),
        "SIGNAL_WORKDIR": str(tmp),
        "SIGNAL_MEASUREMENTS_FILE": str(tmp / "measurements.json"),
        **{f"SIGNAL_PARAM_{name.upper()}": value for name, value in params.items()},
        **(extra or {}),
    }
    done = subprocess.run(
        [str(CHECKS / check / script)], env=env, cwd=tmp, capture_output=True, text=True, timeout=120, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"faults"')]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    return done.returncode, json.loads(lines[-1]), done.stderr
