"""hack/buildlanes.py (issue 46, "First run"): make demo's builds in lanes at once. The lanes really run
side by side, a lane keeps its order, the first failure stops the rest and fails the whole with
the failed target's status and its log named, and a bad lane list is refused. The runner is
driven with a stand-in for make (a Python script given the target), as make would run it."""

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from localcluster import images

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "buildlanes.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("buildlanes", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


buildlanes = _load()

# The stand-in for make: `ok-*` appends its name to a record and passes, `fail-N` exits N,
# `slow` runs until a signal stops it, `wait-for-X` passes once target X has run (it
# proves the other lane runs at the same time), `mark-X` records X.
FAKE_MAKE = """
import pathlib, signal, sys, time
record, target = pathlib.Path(sys.argv[1]), sys.argv[2]
def mark(name):
    with record.open("a") as out:
        out.write(name + "\\n")
if target.startswith("fail-"):
    sys.exit(int(target.split("-")[1]))
if target == "slow":
    signal.pause()  # a build that runs until it is stopped
if target.startswith("wait-for-"):
    deadline = time.monotonic() + 20
    while target.removeprefix("wait-for-") not in record.read_text().split():
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.05)
mark(target)
"""


def _run(tmp_path: Path, plan: list[list[str]], grace: float = 5.0) -> tuple[object, list[str], float]:
    record = tmp_path / "record"
    record.write_text("")
    runner = buildlanes.Runner(plan, [sys.executable, "-c", FAKE_MAKE, str(record)], grace=grace)
    started = time.monotonic()
    outcome = runner.run()
    return outcome, record.read_text().split(), time.monotonic() - started


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["a b", "c"], [["a", "b"], ["c"]]),
        ([" python  images ", "argo\tkplane"], [["python", "images"], ["argo", "kplane"]]),
        (["only"], [["only"]]),
    ],
)
def test_each_argument_is_a_lane_of_targets(arguments: list[str], expected: list[list[str]]) -> None:
    assert buildlanes.parse_lanes(arguments) == expected


@pytest.mark.parametrize(
    ("arguments", "words"),
    [([], "no lanes"), (["a", "  "], "an empty lane"), (["a b", "c a"], "target(s) a named in more than one")],
)
def test_a_lane_list_that_cannot_run_is_refused(arguments: list[str], words: str) -> None:
    with pytest.raises(buildlanes.UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        buildlanes.parse_lanes(arguments)


@pytest.mark.parametrize(
    ("statuses", "stopped", "first", "code", "lines"),
    [
        ({"a": 0, "b": 0, "c": 0}, [], None, 0, []),
        (
            {"a": 0, "b": 2},
            ["c"],
            "b",
            2,
            [
                "builds: b FAILED (exit 2); its whole output: LOGS/b.log",
                "builds: stopped c (running beside it; run again to finish)",
            ],
        ),
        (
            {"a": 9},
            [],
            "a",
            9,
            ["builds: a FAILED (exit 9); its whole output: LOGS/a.log", "builds: not started: b, c"],
        ),
        # A target that never ran to the end while nothing failed is never success.
        ({"a": 0, "b": 0}, [], None, 1, ["builds: c did not run to the end; nothing reported a failure"]),
        (
            {"a": 0, "(interrupted)": 130},
            ["c"],
            "(interrupted)",
            130,
            [
                "builds: interrupted",
                "builds: stopped c (running beside it; run again to finish)",
                "builds: not started: b",
            ],
        ),
    ],
)
def test_summary_fails_the_whole_with_the_first_failure_and_names_its_log(
    statuses: dict[str, int], stopped: list[str], first: str | None, code: int, lines: list[str]
) -> None:
    outcome = buildlanes.Outcome(statuses=dict(statuses), stopped=list(stopped), first_failure=first)
    got = buildlanes.summary([["a", "b"], ["c"]], outcome, Path("LOGS"))
    assert got == (code, lines)


def test_lanes_run_side_by_side_each_in_its_order(tmp_path: Path) -> None:
    # wait-for-ok-b passes only if ok-b (the other lane) runs while it waits.
    outcome, record, _ = _run(tmp_path, [["ok-a", "wait-for-ok-b", "ok-c"], ["ok-b", "ok-d"]])
    assert outcome.first_failure is None
    assert outcome.statuses == {"ok-a": 0, "wait-for-ok-b": 0, "ok-c": 0, "ok-b": 0, "ok-d": 0}
    first_lane = [name for name in record if name in ("ok-a", "wait-for-ok-b", "ok-c")]
    assert first_lane == ["ok-a", "wait-for-ok-b", "ok-c"]
    assert record.index("ok-b") < record.index("wait-for-ok-b")
    assert buildlanes.summary([["ok-a", "wait-for-ok-b", "ok-c"], ["ok-b", "ok-d"]], outcome) == (0, [])


def test_the_first_failure_stops_the_other_lane_and_starts_nothing_more(tmp_path: Path) -> None:
    plan = [["ok-a", "fail-7", "ok-never"], ["slow", "ok-after-slow"]]
    outcome, record, elapsed = _run(tmp_path, plan)
    # slow sleeps 60 s unless stopped; ok-never and ok-after-slow never start.
    assert elapsed < 30, elapsed
    assert outcome.first_failure == "fail-7"
    assert outcome.statuses == {"ok-a": 0, "fail-7": 7}
    assert outcome.stopped == ["slow"]
    assert record == ["ok-a"]
    code, lines = buildlanes.summary(plan, outcome)
    assert code == 7
    assert lines[0] == "builds: fail-7 FAILED (exit 7); its whole output: .cache/logs/fail-7.log"
    assert "builds: not started: ok-never, ok-after-slow" in lines


def test_a_failure_in_the_last_target_of_a_lane_fails_the_whole(tmp_path: Path) -> None:
    outcome, _, _ = _run(tmp_path, [["ok-a"], ["ok-b", "fail-4"]])
    assert buildlanes.summary([["ok-a"], ["ok-b", "fail-4"]], outcome)[0] == 4


def test_as_make_runs_it_the_exit_status_is_the_failed_targets(tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.write_text("")
    fake_make = tmp_path / "make"
    fake_make.write_text(f"#!{sys.executable}\nimport sys\nsys.argv = [sys.argv[0], {str(record)!r}, sys.argv[-1]]\n")
    fake_make.write_text(fake_make.read_text() + FAKE_MAKE)
    fake_make.chmod(0o755)
    env = {"MAKE": str(fake_make), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "ok-a fail-5", "ok-b"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 5, done
    assert "builds: fail-5 FAILED (exit 5); its whole output: .cache/logs/fail-5.log" in done.stderr
    refused = subprocess.run(
        [sys.executable, str(SCRIPT)], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "no lanes given" in refused.stderr


def test_the_image_base_needs_only_the_standard_library() -> None:
    # make demo's image-base stage runs `python3 -m localcluster.images --base` with the system
    # Python while the virtual environment is being made: no site-packages (-S) here.
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); import localcluster.images"
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_base_only_makes_the_base_under_the_build_lock(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    class Lock:
        def __enter__(self) -> None:
            calls.append("locked")

        def __exit__(self, *_: object) -> None:
            calls.append("unlocked")

    class FakeBuilder:
        def locked(self) -> Lock:
            return Lock()

        def ensure_base(self) -> str:
            calls.append("base")
            return "sha256:" + "a" * 64

        def build(self, names: list[str]) -> None:
            raise AssertionError(f"--base built images {names}")

    monkeypatch.setattr(images, "Builder", FakeBuilder)
    assert images.main(["--base"]) == 0
    assert calls == ["locked", "base", "unlocked"]
    assert capsys.readouterr().out == f"{images.BASE_REFERENCE}@sha256:{'a' * 64}\n"
