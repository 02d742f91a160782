"""How the runner starts a script (runner/execute.py: ``os.posix_spawn`` and a pidfd, not
``subprocess``) and reads its own command line (runner/argv.py, not argparse): the script sees
what ``subprocess`` gave it, and the runner's start loads neither module."""

import hashlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from localcluster import podprocess
from runner import execute, main
from runner.execute import SAFE_PATH, ScriptError, run_script, script_argv
from shared.result import RunnerResult, parse_result
from shared.verdict import Verdict

pytestmark = pytest.mark.timeout(60)
IDENTITY = {
    "SIGNAL_NODE_NAME": "gpu-000",
    "SIGNAL_POD_NAME": "pod-0",
    "SIGNAL_POD_UID": "uid-0",
    "SIGNAL_PARTICIPANT_INDEX": "0",
}
HEAVY = ("argparse", "subprocess", "hashlib", "shutil", "base64", "gettext", "threading", "typing")
"""What a Pod check's runner imported before, and imports no more (typing: its modules import it
for the type checker alone, shared/lighttuple.py)."""


def write(tmp_path: Path, body: str, name: str = "check.sh") -> Path:
    path = tmp_path / name
    path.write_text(body)
    path.chmod(0o444)
    return path


def run(tmp_path: Path, body: str, deadline: float = 20.0) -> execute.Outcome:
    argv = script_argv(write(tmp_path, body))
    return run_script(argv, {"PATH": SAFE_PATH}, tmp_path, tmp_path / "out", tmp_path / "err", deadline)


def test_the_script_ignores_neither_sigpipe_nor_sigxfsz(tmp_path: Path) -> None:
    # Python ignores SIGPIPE and SIGXFSZ; an ignored signal stays ignored across exec, so a
    # script spawned without resetting them would see writes to a closed pipe fail instead of
    # ending it (``yes | head -1`` would run on), as subprocess's restore_signals prevents.
    outcome = run(tmp_path, "#!/bin/sh\ngrep SigIgn /proc/self/status\n")
    assert outcome.exit_code == 0
    ignored = int((tmp_path / "out").read_text().split()[1], 16)
    assert ignored & (1 << (signal.SIGPIPE - 1)) == 0
    assert ignored & (1 << (signal.SIGXFSZ - 1)) == 0


def test_the_script_runs_in_a_session_of_its_own_with_only_the_standard_streams(tmp_path: Path) -> None:
    body = "#!/bin/sh\ncut -d' ' -f6 /proc/$$/stat > sid\nls /proc/self/fd > fds\n"
    leaked = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leaked, True)  # as a descriptor the runner was started with
    try:
        outcome = run(tmp_path, body)
    finally:
        os.close(leaked)
    assert outcome.exit_code == 0
    assert int((tmp_path / "sid").read_text()) != os.getsid(0)
    # ls's own 0, 1, 2 and the directory it lists (3): nothing of the runner's.
    assert (tmp_path / "fds").read_text().split() == ["0", "1", "2", "3"]


def test_the_runner_keeps_its_own_directory(tmp_path: Path) -> None:
    here = os.getcwd()
    outcome = run(tmp_path, '#!/bin/sh\npwd > "$PWD/where"\n')
    assert os.getcwd() == here
    assert (outcome.exit_code, (tmp_path / "where").read_text()) == (0, f"{tmp_path}\n")


def test_a_bare_interpreter_name_is_found_on_the_scripts_path(tmp_path: Path) -> None:
    # As subprocess did: a bare program name (mpirun, an interpreter line of ``#!sh``) is
    # looked up on the PATH the script is given, not the runner's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "signal-test-tool"
    tool.write_text('#!/bin/sh\necho found "$@"\n')
    tool.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'absent'}:{bin_dir}"}
    outcome = run_script(["signal-test-tool", "x"], env, tmp_path, tmp_path / "out", None, 10)
    assert (outcome.exit_code, (tmp_path / "out").read_text()) == (0, "found x\n")
    with pytest.raises(ScriptError, match="cannot start signal-test-tool x: No such file"):
        run_script(["signal-test-tool", "x"], {"PATH": SAFE_PATH}, tmp_path, None, None, 10)


def test_an_unexecutable_program_is_a_script_error(tmp_path: Path) -> None:
    plain = write(tmp_path, "not a program\n", "plain")
    with pytest.raises(ScriptError, match="Permission denied"):
        run_script([str(plain)], {"PATH": SAFE_PATH}, tmp_path, None, None, 10)


def test_without_pidfds_the_deadline_still_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A kernel before 5.3 has no pidfd_open: the runner polls waitpid instead.
    def absent(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", absent)
    outcome = run(tmp_path, "#!/bin/sh\nsleep 30\n", deadline=0.3)
    assert (outcome.timed_out, outcome.signal) == (True, 15)
    outcome = run(tmp_path, "#!/bin/sh\nexit 5\n")
    assert (outcome.timed_out, outcome.exit_code) == (False, 5)


# ---------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the role is required"),
        (["serve"], "unknown role 'serve'"),
        (["run", "--deadline-seconds", "1"], "the following arguments are required: --script"),
        (["run", "--script", "s", "--deadline-seconds"], "--deadline-seconds needs a value"),
        (["run", "--script", "s", "--deadline-seconds", "soon"], "invalid value 'soon'"),
        (["run", "--script", "s", "--deadline-seconds", "1", "--hostfile", "h"], "unknown argument '--hostfile'"),
        (["launcher", "--script", "s", "--deadline-seconds", "1", "--slots", "9"], "'9' is not one of"),
        (["worker", "extra"], "unknown argument 'extra'"),
    ],
)
def test_a_wrong_command_line_exits_2_naming_what_is_wrong(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main.parser().parse_args(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_the_command_line_takes_both_spellings_and_keeps_the_defaults() -> None:
    args = main.parser().parse_args(["launcher", "--script=s", "--deadline-seconds", "2.5", "--slots=4"])
    assert (args.role, args.script, args.deadline_seconds, args.slots) == ("launcher", "s", 2.5, 4)
    assert (args.workdir, args.hostfile) == ("/signal/work", "/etc/mpi/hostfile")
    assert args.handler is main.cmd_launcher
    assert main.parser().parse_args(["worker"]).sshd is None


def test_help_names_every_role_and_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main.parser().parse_args(["run", "--help"])
    assert stopped.value.code == 0
    text = capsys.readouterr().out
    for word in ("signal-runner run", "signal-runner worker", "--termination-log", "--slots {1,2,3,4,5,6,7,8}"):
        assert word in text


# ---------------------------------------------------------------- what the runner's start loads


def imports(stderr: str) -> set[str]:
    """The modules ``-X importtime`` reported."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def run_role(tmp_path: Path, body: str) -> tuple[RunnerResult, set[str]]:
    """``signal-runner run`` of a script ``body`` started as in the image: its result (it must
    exit 0) and the modules it imported."""
    script = write(tmp_path, body)
    python, *flags = podprocess.IMAGE_ENTRYPOINTS["projectsignal.dev/runner"]
    argv = [python, "-X", "importtime", *flags, "run", "--script", str(script), "--deadline-seconds", "20"]
    argv += ["--workdir", str(tmp_path / "work"), "--termination-log", str(tmp_path / "result")]
    done = subprocess.run(
        argv, env={"PATH": SAFE_PATH, **IDENTITY}, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return parse_result((tmp_path / "result").read_bytes()), imports(done.stderr)


def test_a_pod_checks_runner_starts_without_the_heavy_modules(tmp_path: Path) -> None:
    # Before: argparse (with gettext and shutil), subprocess (with threading and selectors)
    # and, through shared.digests, hashlib (OpenSSL) and base64 were all loaded.
    result, loaded = run_role(tmp_path, '#!/bin/sh\necho \'{"gbps": 7}\' > "$SIGNAL_MEASUREMENTS_FILE"\n')
    assert (result.verdict, result.measurements) == (Verdict.PASS, {"gbps": 7})
    assert {"runner.main", "runner.execute", "json"} <= loaded
    assert loaded.isdisjoint(HEAVY + PURE_PYTHON_TWINS), sorted(loaded & set(HEAVY + PURE_PYTHON_TWINS))
    # Paths are strings in the run role: pathlib (with fnmatch, urllib.parse and ipaddress) was
    # an eighth of its start; the MPI roles import it when they run.
    assert loaded.isdisjoint(("pathlib", "urllib.parse", "fnmatch")), sorted(loaded)
    # The digest of the captured output is the one hashlib gives.
    assert result.stdout is not None
    assert result.stdout.digest == "sha256:" + hashlib.sha256().hexdigest()


PARSING = ("json", "re", "enum", "functools", "contextlib", "collections", "types")
"""What a Pod check's runner imported until 2026-12-05 whatever its script wrote: ``json`` (and
``re``, whose import loads ``enum`` and ``functools``) for its result's canonical bytes, ``enum``
for the verdict and the signals' numbers, ``contextlib`` for two ``suppress``; now only to read
measurements, when a script wrote some (a third of the runner's CPU at start: 35-37 ms to 20-23).
And ``collections``, for ``collections.namedtuple`` (shared/lighttuple.py) and the annotations'
``collections.abc``, and ``types`` for ``SimpleNamespace``, until 2026-12-05 (afternoon)."""

PURE_PYTHON_TWINS = ("datetime",)
"""``datetime.py`` defines every class in Python before replacing them with ``_datetime``'s: a
sixth of the runner's start until 2026-12-05; the runner takes the C classes themselves
(shared/timestamps.py), whatever its script wrote."""


def test_a_runner_whose_script_writes_no_measurements_parses_no_json(tmp_path: Path) -> None:
    result, loaded = run_role(tmp_path, "#!/bin/sh\necho hello\n")
    assert (result.verdict, result.measurements, result.stdout and result.stdout.tail) == (Verdict.PASS, {}, "hello\n")
    assert "runner.main" in loaded
    refused = HEAVY + PARSING + PURE_PYTHON_TWINS
    assert loaded.isdisjoint(refused), sorted(loaded & set(refused))


def test_an_mpi_rank_starts_without_subprocess(tmp_path: Path) -> None:
    code = "import sys; import runner.main, runner.mpi; print(sorted(m for m in sys.modules if m in sys.argv[1:]))"
    python, *flags = podprocess.IMAGE_ENTRYPOINTS["projectsignal.dev/runner"]
    package_root = str(Path(flags[-1]).parents[1])
    done = subprocess.run(
        [python, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {package_root!r}); {code}", *HEAVY],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # hashlib stays: the rank signs its report with hmac.
    assert done.stdout.strip() == "['hashlib']", done.stdout + done.stderr
