"""Running one operator script (runner/execute.py) with real tiny /bin/sh scripts, and the
``run`` and ``rank`` roles of ``signal-runner`` end to end in a temporary directory."""

import hashlib
import os
import sys
import time
from pathlib import Path

import pytest

from runner import main as runner_main
from runner import mpi, sshd
from runner.document import Identity
from runner.execute import (
    KILL_GRACE_SECONDS,
    SAFE_PATH,
    Outcome,
    ScriptError,
    clean_environment,
    run_script,
    script_argv,
    summarise,
)
from runner.report import build_result
from shared.result import MAX_TAIL_CHARS, parse_result
from shared.run import Verdict

pytestmark = pytest.mark.timeout(60)


def script(tmp_path: Path, body: str | bytes, name: str = "script.sh") -> Path:
    path = tmp_path / name
    path.write_bytes(body.encode() if isinstance(body, str) else body)
    path.chmod(0o444)  # mounted read-only and possibly without the execute bit
    return path


# ---------------------------------------------------------------- script_argv


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (b"#!/bin/sh\necho hi\n", ["/bin/sh"]),
        (b"#!/bin/bash -e\n", ["/bin/bash", "-e"]),
        (b"#!/usr/bin/env python3\n", ["/usr/bin/env", "python3"]),
        (b"#!/usr/bin/env python3 -u\n", ["/usr/bin/env", "python3 -u"]),  # Linux: one argument
        (b"#!/bin/echo  A  B  \n", ["/bin/echo", "A  B"]),
        (b"#! /bin/sh\n", ["/bin/sh"]),
        (b"#!/bin/sh   \n", ["/bin/sh"]),
        (b"#!/bin/sh\r\n", ["/bin/sh"]),
        (b"#!/bin/sh", ["/bin/sh"]),
        (b"echo no shebang\n", ["/bin/sh"]),
        (b"", ["/bin/sh"]),
        (b" #!/bin/bash\n", ["/bin/sh"]),
        (b"\n#!/bin/bash\n", ["/bin/sh"]),
        (b"# !/bin/bash\n", ["/bin/sh"]),
        (b"\x7fELF\x02\x01\x01", ["/bin/sh"]),
    ],
)
def test_script_argv(tmp_path: Path, first: bytes, expected: list[str]) -> None:
    path = script(tmp_path, first)
    assert script_argv(path) == [*expected, str(path)]


@pytest.mark.parametrize("first", [b"#!\n", b"#!   \n", b"#!\t\r\n", b"#!"])
def test_script_argv_empty_interpreter(tmp_path: Path, first: bytes) -> None:
    with pytest.raises(ScriptError, match="empty interpreter line"):
        script_argv(script(tmp_path, first))


def test_script_argv_long_line_is_bounded(tmp_path: Path) -> None:
    path = script(tmp_path, b"#!/bin/sh " + b"x" * 2000 + b"\n")
    argv = script_argv(path)
    assert argv[0] == "/bin/sh"
    assert len(argv[1]) < 512


def test_script_argv_tab_separates_interpreter_and_argument(tmp_path: Path) -> None:
    path = script(tmp_path, b"#!/bin/sh\t-e\n")
    assert script_argv(path) == ["/bin/sh", "-e", str(path)]


def test_script_argv_missing(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read script"):
        script_argv(tmp_path / "absent.sh")


def test_script_argv_directory(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read script"):
        script_argv(tmp_path)


def test_script_argv_read_error(tmp_path: Path) -> None:
    # Opens fine but reading fails (EIO), whoever runs the test.
    with pytest.raises(ScriptError, match="cannot read script /proc/self/mem"):
        script_argv(Path("/proc/self/mem"))


def test_script_argv_missing_script(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read script"):
        script_argv(tmp_path / "absent.sh")


# ---------------------------------------------------------------- clean_environment

INHERITED = {
    "PATH": "/evil/bin",
    "HOME": "/root",
    "LANG": "fr_FR",
    "LD_PRELOAD": "/evil.so",
    "PYTHONPATH": "/evil",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "SIGNAL_POD_UID": "inherited-not-extra",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "NCCL_DEBUG": "INFO",
    "UCX_TLS": "rc",
    "OMPI_COMM_WORLD_RANK": "1",
    "PMIX_RANK": "1",
    "OPAL_PREFIX": "/opt/ompi",
    "PRTE_MCA_plm": "rsh",
    "nvidia_visible_devices": "lower-case",
    "XNVIDIA_X": "not a prefix",
    "MY_CUDA_HOME": "not a prefix",
    "TMPDIR": "/scratch/tmp",
    "TMP": "/not-passed",
}
GPU = {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "UCX_TLS", "TMPDIR"}
MPI = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "OPAL_PREFIX", "PRTE_MCA_plm"}


@pytest.mark.parametrize(("mpi_rank", "passed"), [(False, GPU), (True, GPU | MPI)])
def test_clean_environment(tmp_path: Path, mpi_rank: bool, passed: set[str]) -> None:
    extra = {"SIGNAL_RUN_NAME": "r", "SIGNAL_POD_UID": "u-1"}
    env = clean_environment(INHERITED, extra, home=tmp_path / "home", mpi=mpi_rank)
    assert set(env) == passed | {"PATH", "HOME", "LANG"} | set(extra)
    assert env["PATH"] == SAFE_PATH
    assert env["HOME"] == str(tmp_path / "home")
    assert env["LANG"] == "C.UTF-8"
    assert env["SIGNAL_POD_UID"] == "u-1"
    for key in passed:
        assert env[key] == INHERITED[key]


def test_clean_environment_default_is_not_mpi(tmp_path: Path) -> None:
    env = clean_environment({"OMPI_X": "1", "CUDA_X": "2"}, {}, home=tmp_path)
    assert "OMPI_X" not in env
    assert env["CUDA_X"] == "2"


def test_clean_environment_does_not_mutate_inputs(tmp_path: Path) -> None:
    inherited = dict(INHERITED)
    extra = {"SIGNAL_CHECK": "c"}
    clean_environment(inherited, extra, home=tmp_path, mpi=True)
    assert inherited == INHERITED
    assert extra == {"SIGNAL_CHECK": "c"}


# ---------------------------------------------------------------- run_script


def run(tmp_path: Path, body: str, deadline: float = 20.0, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    path = script(tmp_path, body)
    return run_script(
        script_argv(path),
        env if env is not None else {"PATH": SAFE_PATH},
        tmp_path,
        tmp_path / "out",
        tmp_path / "err",
        deadline,
    )


@pytest.mark.parametrize("code", [0, 1, 2, 3, 42, 127, 255])
def test_run_script_exit_codes(tmp_path: Path, code: int) -> None:
    outcome = run(tmp_path, f"#!/bin/sh\nexit {code}\n")
    assert outcome.exit_code == code
    assert outcome.signal is None
    assert outcome.timed_out is False
    assert outcome.started <= outcome.finished


def test_run_script_without_shebang_or_execute_bit(tmp_path: Path) -> None:
    outcome = run(tmp_path, "echo plain\nexit 4\n")
    assert outcome.exit_code == 4
    assert (tmp_path / "out").read_text() == "plain\n"


def test_run_script_captures_streams_cwd_env_and_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = (
        "#!/bin/sh\n"
        'echo "out:$GREETING"\n'
        'echo "err:$(pwd)" >&2\n'
        'echo "leak:${AWS_SECRET_ACCESS_KEY:-none}"\n'
        "if read line; then echo stdin:data; else echo stdin:eof; fi\n"
    )
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "parent-secret")  # the script must not see the parent's env
    outcome = run(tmp_path, body, env={"PATH": SAFE_PATH, "GREETING": "hello"})
    assert outcome.exit_code == 0
    assert (tmp_path / "out").read_text() == "out:hello\nleak:none\nstdin:eof\n"
    assert (tmp_path / "err").read_text() == f"err:{tmp_path}\n"


def test_run_script_env_is_exactly_what_was_given(tmp_path: Path) -> None:
    outcome = run(tmp_path, "#!/bin/sh\nenv\n", env={"PATH": SAFE_PATH, "ONLY": "this"})
    assert outcome.exit_code == 0
    names = {line.split("=", 1)[0] for line in (tmp_path / "out").read_text().splitlines() if "=" in line}
    assert {"PATH", "ONLY"} <= names
    assert names - {"PATH", "ONLY", "PWD", "SHLVL", "_", "OLDPWD"} == set()


def test_run_script_killed_by_signal(tmp_path: Path) -> None:
    outcome = run(tmp_path, "#!/bin/sh\nkill -KILL $$\n")
    assert outcome.exit_code is None
    assert outcome.signal == 9
    assert outcome.timed_out is False


def test_run_script_missing_interpreter(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot start"):
        run(tmp_path, "#!/nonexistent/interpreter\n")


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in {"Z", "X"}


def wait_dead(pid: int, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def test_deadline_terminates_the_script(tmp_path: Path) -> None:
    begin = time.monotonic()
    outcome = run(tmp_path, "#!/bin/sh\necho started\nsleep 30\necho never\n", deadline=0.5)
    elapsed = time.monotonic() - begin
    assert outcome.timed_out is True
    assert outcome.exit_code is None
    assert outcome.signal == 15
    assert elapsed < 5
    assert (tmp_path / "out").read_text() == "started\n"


def test_deadline_kills_the_whole_process_group(tmp_path: Path) -> None:
    body = "#!/bin/sh\nsleep 30 &\necho $! > child.pid\nsleep 30 &\necho $! >> child.pid\nwait\n"
    outcome = run(tmp_path, body, deadline=0.5)
    assert outcome.timed_out is True
    pids = [int(p) for p in (tmp_path / "child.pid").read_text().split()]
    assert len(pids) == 2
    for pid in pids:
        assert wait_dead(pid), f"background child {pid} outlived the deadline"


def test_deadline_kills_a_script_that_ignores_term(tmp_path: Path) -> None:
    body = "#!/bin/sh\ntrap '' TERM\necho $$ > self.pid\nwhile :; do sleep 0.1; done\n"
    begin = time.monotonic()
    outcome = run(tmp_path, body, deadline=0.3)
    elapsed = time.monotonic() - begin
    assert outcome.timed_out is True
    assert outcome.signal == 9
    assert KILL_GRACE_SECONDS <= elapsed < KILL_GRACE_SECONDS + 5
    assert wait_dead(int((tmp_path / "self.pid").read_text()))


def test_background_child_does_not_outlive_a_script_that_exits(tmp_path: Path) -> None:
    body = "#!/bin/sh\n(sleep 30 & echo $! > child.pid)\nexit 0\n"
    outcome = run(tmp_path, body)
    assert (outcome.exit_code, outcome.timed_out) == (0, False)
    assert wait_dead(int((tmp_path / "child.pid").read_text()))


def test_zero_deadline_times_out_at_once(tmp_path: Path) -> None:
    outcome = run(tmp_path, "#!/bin/sh\nsleep 30\n", deadline=0)
    assert outcome.timed_out is True
    assert outcome.finished - outcome.started < 5


def test_run_script_inherits_streams_when_no_path(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = script(tmp_path, "#!/bin/sh\necho to-stdout\necho to-stderr >&2\n")
    outcome = run_script(script_argv(path), {"PATH": SAFE_PATH}, tmp_path, None, None, 10)
    assert outcome.exit_code == 0
    captured = capfd.readouterr()
    assert "to-stdout" in captured.out
    assert "to-stderr" in captured.err


# ---------------------------------------------------------------- summarise


def sha(payload: bytes) -> str:
    return "sha256:" + hashlib.sha256(payload).hexdigest()


@pytest.mark.parametrize(
    ("payload", "tail_chars", "tail"),
    [
        (b"", MAX_TAIL_CHARS, ""),
        (b"hello\n", MAX_TAIL_CHARS, "hello\n"),
        (b"0123456789", 4, "6789"),
        (b"0123456789", 0, ""),
        (b"a" * 5000, MAX_TAIL_CHARS, "a" * MAX_TAIL_CHARS),
        ("é".encode() * 3000, MAX_TAIL_CHARS, "é" * MAX_TAIL_CHARS),
        ("\U0001f600".encode() * 2000, 10, "\U0001f600" * 10),
        (b"ok\xff\xfe", 10, "ok\ufffd\ufffd"),
    ],
    ids=["empty", "small", "tail-4", "tail-0", "ascii", "two-byte", "four-byte", "invalid-utf8"],
)
def test_summarise(tmp_path: Path, payload: bytes, tail_chars: int, tail: str) -> None:
    path = tmp_path / "stream"
    path.write_bytes(payload)
    summary = summarise(path, tail_chars)
    assert summary.digest == sha(payload)
    assert summary.bytes == len(payload)
    assert summary.tail == tail


def test_summarise_large_stream_across_blocks(tmp_path: Path) -> None:
    payload = b"".join(f"line {i:06d}\n".encode() for i in range(40000))  # 480 KB, many 64 KiB blocks
    path = tmp_path / "stream"
    path.write_bytes(payload)
    summary = summarise(path)
    assert summary.digest == sha(payload)
    assert summary.bytes == len(payload)
    assert summary.tail == payload.decode()[-MAX_TAIL_CHARS:]
    assert summary.tail.endswith("line 039999\n")


def test_summarise_missing_file(tmp_path: Path) -> None:
    summary = summarise(tmp_path / "absent")
    assert (summary.digest, summary.bytes, summary.tail) == (sha(b""), 0, "")


# ---------------------------------------------------------------- signal-runner run


IDENTITY_ENV = {
    "SIGNAL_NODE_NAME": "gpu-007",
    "SIGNAL_POD_NAME": "run-1-c0-p2",
    "SIGNAL_POD_UID": "0d7c1f9a-2b1e-4e8f-9c3d-6a5b4c3d2e1f",
    "SIGNAL_PARTICIPANT_INDEX": "2",
}


@pytest.fixture
def runner_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in IDENTITY_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SIGNAL_RUN_NAME", "run-1")
    monkeypatch.setenv("SIGNAL_RUN_UID", "run-uid-1")
    monkeypatch.setenv("SIGNAL_CHECK", "inventory")
    monkeypatch.setenv("SIGNAL_NAMESPACE", "signal-system")
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    monkeypatch.setenv("SUPER_SECRET_TOKEN", "do-not-leak")


def run_role(tmp_path: Path, body: str, deadline: str = "20") -> tuple[int, Path]:
    path = script(tmp_path, body, name="check.sh")
    log = tmp_path / "termination-log"
    code = runner_main.main(
        [
            "run",
            "--script",
            str(path),
            "--deadline-seconds",
            deadline,
            "--workdir",
            str(tmp_path / "work"),
            "--termination-log",
            str(log),
        ]
    )
    return code, log


@pytest.mark.usefixtures("runner_env")
@pytest.mark.parametrize(
    ("body", "deadline", "rc", "verdict", "reason", "exit_code", "signal"),
    [
        ("#!/bin/sh\necho ok\n", "20", 0, Verdict.PASS, "Succeeded", 0, None),
        ("echo no shebang\n", "20", 0, Verdict.PASS, "Succeeded", 0, None),
        ("#!/bin/sh\nexit 5\n", "20", 1, Verdict.FAIL, "Failed: the script exited 5", 5, None),
        ("#!/bin/sh\nexit 3\n", "20", 1, Verdict.INCONCLUSIVE, "ScriptInconclusive: the script exited 3", 3, None),
        ("#!/bin/sh\nsleep 30\n", "0.3", 1, Verdict.INCONCLUSIVE, "DeadlineExceeded", None, 15),
        ("#!/bin/sh\nkill -KILL $$\n", "20", 1, Verdict.INCONCLUSIVE, "Signaled", None, 9),
        (
            '#!/bin/sh\necho "{not json" > "$SIGNAL_MEASUREMENTS_FILE"\n',
            "20",
            1,
            Verdict.INCONCLUSIVE,
            "InvalidMeasurements",
            0,
            None,
        ),
        ("#!/nonexistent/sh\n", "20", 1, Verdict.INCONCLUSIVE, "RunnerError: cannot start", None, None),
    ],
    ids=["pass", "no-shebang", "fail", "insufficient", "deadline", "signal", "bad-measurements", "no-interpreter"],
)
def test_run_role_writes_result(
    tmp_path: Path,
    body: str,
    deadline: str,
    rc: int,
    verdict: Verdict,
    reason: str,
    exit_code: int | None,
    signal: int | None,
) -> None:
    code, log = run_role(tmp_path, body, deadline)
    assert code == rc
    result = parse_result(log.read_bytes())
    assert result.verdict == verdict
    assert result.reason.startswith(reason)
    assert result.exit_code == exit_code
    assert result.signal == signal
    identity = result.identity
    assert identity.role == "pod"
    assert identity.participant_index == 2
    assert identity.node_name == IDENTITY_ENV["SIGNAL_NODE_NAME"]
    assert identity.pod_name == IDENTITY_ENV["SIGNAL_POD_NAME"]
    assert identity.pod_uid == IDENTITY_ENV["SIGNAL_POD_UID"]
    assert result.launcher is None


@pytest.mark.usefixtures("runner_env")
@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        pytest.param(
            "rm -f stdout; mkfifo stdout", "UnreadableOutput: the script's stdout is not a regular", id="stdout-fifo"
        ),
        pytest.param(
            "rm -f stderr; ln -s /dev/zero stderr",
            "UnreadableOutput: cannot open the script's stderr",
            id="stderr-to-dev-zero",
        ),
        pytest.param(
            "rm -f stdout; mkdir stdout",
            "UnreadableOutput: the script's stdout is not a regular",
            id="stdout-a-directory",
        ),
        pytest.param(
            "truncate -s 4G stdout", "UnreadableOutput: the script's stdout is 4294967296 bytes", id="stdout-sparse-4g"
        ),
        pytest.param(
            'rm -f "$SIGNAL_MEASUREMENTS_FILE"; mkfifo "$SIGNAL_MEASUREMENTS_FILE"',
            "InvalidMeasurements: the script's measurements file is not",
            id="measurements-fifo",
        ),
        pytest.param(
            'rm -f "$SIGNAL_MEASUREMENTS_FILE"; ln -s /etc/hostname "$SIGNAL_MEASUREMENTS_FILE"',
            "InvalidMeasurements: cannot open the script's measurements",
            id="measurements-symlink",
        ),
    ],
)
def test_a_script_that_tampers_with_its_output_files_gets_a_result_at_once(
    tmp_path: Path, tamper: str, reason: str
) -> None:
    """The script owns its workdir: after it exits, the runner reads what is at those paths.
    Whatever the script put there (a FIFO, a symlink to an endless device or another file, a
    directory, a sparse file of gigabytes) the runner writes its result at once, Inconclusive
    with the reason: never a hang until the Pod's deadline, never a crash without a result."""
    code, log = run_role(
        tmp_path, f'#!/bin/sh\necho "{{\\"bw\\": 1}}" > "$SIGNAL_MEASUREMENTS_FILE"\n{tamper}\nexit 0\n', "20"
    )
    assert code == 1
    result = parse_result(log.read_bytes())
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.reason.startswith(reason), result.reason
    assert result.exit_code == 0


@pytest.mark.usefixtures("runner_env")
def test_run_role_script_environment_and_measurements(tmp_path: Path) -> None:
    body = (
        "#!/bin/sh\n"
        "env | sort\n"
        'printf \'{"bw.gbps": 390.5, "ok": true, "gpu": "H100"}\' > "$SIGNAL_MEASUREMENTS_FILE"\n'
    )
    code, log = run_role(tmp_path, body)
    assert code == 0
    result = parse_result(log.read_bytes())
    assert result.verdict == Verdict.PASS
    assert result.measurements == {"bw.gbps": 390.5, "ok": True, "gpu": "H100"}
    stdout = (tmp_path / "work" / "stdout").read_text()
    env = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
    assert env["SIGNAL_PARTICIPANT_INDEX"] == "2"
    assert env["SIGNAL_NODE_NAME"] == "gpu-007"
    assert env["SIGNAL_RUN_UID"] == "run-uid-1"
    assert env["SIGNAL_CHECK"] == "inventory"
    assert env["SIGNAL_WORKDIR"] == str(tmp_path / "work")
    assert env["SIGNAL_MEASUREMENTS_FILE"] == str(tmp_path / "work" / "measurements.json")
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["PATH"] == SAFE_PATH
    assert env["HOME"] == str(tmp_path / "work" / "home")
    assert "SUPER_SECRET_TOKEN" not in env
    assert result.stdout is not None
    assert result.stdout.bytes == len(stdout.encode())
    assert result.stdout.tail == stdout[-MAX_TAIL_CHARS:]


@pytest.mark.usefixtures("runner_env")
def test_run_role_ignores_a_stale_measurements_file(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "measurements.json").write_text('{"stale": 1}')
    code, log = run_role(tmp_path, "#!/bin/sh\nexit 0\n")
    assert code == 0
    assert parse_result(log.read_bytes()).measurements == {}


@pytest.mark.usefixtures("runner_env")
def test_run_role_relative_script_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script(tmp_path, "#!/bin/sh\nexit 0\n", name="rel.sh")
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "log"
    code = runner_main.main(
        ["run", "--script", "rel.sh", "--deadline-seconds", "10", "--workdir", "w", "--termination-log", str(log)]
    )
    assert code == 0
    assert parse_result(log.read_bytes()).verdict == Verdict.PASS


@pytest.mark.usefixtures("runner_env")
def test_run_role_missing_script(tmp_path: Path) -> None:
    log = tmp_path / "log"
    code = runner_main.main(
        [
            "run",
            "--script",
            str(tmp_path / "absent.sh"),
            "--deadline-seconds",
            "5",
            "--workdir",
            str(tmp_path / "w"),
            "--termination-log",
            str(log),
        ]
    )
    assert code == 1
    result = parse_result(log.read_bytes())
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.reason.startswith("RunnerError: cannot read script")


@pytest.mark.usefixtures("runner_env")
@pytest.mark.parametrize("missing", sorted(IDENTITY_ENV))
def test_run_role_missing_identity_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    monkeypatch.delenv(missing)
    with pytest.raises(SystemExit) as caught:
        run_role(tmp_path, "#!/bin/sh\nexit 0\n")
    assert missing in str(caught.value.code)
    assert not (tmp_path / "termination-log").exists()


@pytest.mark.usefixtures("runner_env")
def test_run_role_empty_identity_counts_as_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNAL_POD_UID", "")
    with pytest.raises(SystemExit, match="SIGNAL_POD_UID"):
        run_role(tmp_path, "#!/bin/sh\nexit 0\n")


@pytest.mark.usefixtures("runner_env")
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SIGNAL_NODE_NAME", "n" * 254),
        ("SIGNAL_POD_NAME", "p" * 254),
        ("SIGNAL_POD_UID", "u" * 65),
        ("SIGNAL_POD_NAME", "pod-\udcff"),  # an undecodable byte in the environment
        ("SIGNAL_PARTICIPANT_INDEX", "64"),
        ("SIGNAL_PARTICIPANT_INDEX", "-1"),
    ],
    ids=["long-node", "long-pod", "long-uid", "undecodable-pod", "index-64", "index-negative"],
)
def test_run_role_identity_out_of_bounds_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    # A result with this identity would be refused by the adapter: the runner says why and
    # writes none, as for a missing variable.
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=f"out of bounds: {name};"):
        run_role(tmp_path, "#!/bin/sh\nexit 0\n")
    assert not (tmp_path / "termination-log").exists()


@pytest.mark.usefixtures("runner_env")
def test_run_role_identity_at_its_bounds_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNAL_NODE_NAME", "n" * 253)
    monkeypatch.setenv("SIGNAL_POD_UID", "u" * 64)
    monkeypatch.setenv("SIGNAL_PARTICIPANT_INDEX", "63")
    code, log = run_role(tmp_path, "#!/bin/sh\nexit 0\n")
    assert code == 0
    identity = parse_result(log.read_bytes()).identity
    assert (identity.node_name, identity.pod_uid, identity.participant_index) == ("n" * 253, "u" * 64, 63)


def test_runner_parser_requires_role_and_script() -> None:
    with pytest.raises(SystemExit):
        runner_main.parser().parse_args([])
    with pytest.raises(SystemExit):
        runner_main.parser().parse_args(["run", "--deadline-seconds", "1"])
    args = runner_main.parser().parse_args(["launcher", "--script", "s", "--deadline-seconds", "1"])
    assert str(args.hostfile) == "/etc/mpi/hostfile"
    assert str(args.termination_log) == "/dev/termination-log"


# ---------------------------------------------------------------- signal-runner rank

RANK_KEY = "r" * 64


def keyed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The key the launcher would forward; the wrapper's prctl is recorded, not applied to the
    test process."""
    monkeypatch.setenv(mpi.REPORT_KEY_ENV, RANK_KEY)
    called: list[bool] = []
    monkeypatch.setattr(mpi, "make_undumpable", lambda: called.append(True))
    return called


@pytest.mark.parametrize(("body", "expected"), [("exit 0", 0), ("exit 5", 5), ("kill -KILL $$", 128 + 9)])
def test_rank_role_reports_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], body: str, expected: int
) -> None:
    path = script(tmp_path, f"#!/bin/sh\necho rank-output\n{body}\n")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("HOSTNAME", "job-worker-1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("SIGNAL_SCRIPT", raising=False)
    undumpable = keyed(monkeypatch)
    code = runner_main.main(["rank", "--script", str(path), "--deadline-seconds", "10"])
    assert code == expected
    assert mpi.REPORT_KEY_ENV not in os.environ
    assert undumpable == [True]
    lines = capfd.readouterr().out.splitlines()
    assert "rank-output" in lines
    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert lines[-2:] == ["", mpi.rank_line(1, 2, "job-worker-1", expected, key=RANK_KEY, script=digest)]
    tagged = [f"[1,1]<stdout>:{ln}" for ln in lines] + [
        "[1,0]<stdout>:" + mpi.rank_line(0, 2, "job-worker-0", 0, key=RANK_KEY)
    ]
    verdict, _, report = mpi.evaluate_launcher(
        ["job-worker-0", "job-worker-1"], mpi.reports_in(tagged, RANK_KEY), 0, False
    )
    assert verdict == (Verdict.PASS if expected == 0 else Verdict.FAIL)
    assert [r.exit_code for r in report.ranks] == [0, expected]


@pytest.mark.parametrize(
    "payload",
    ['"[" * 2000', "'{\"bw\": ' + '9' * 5000 + '}'"],
    ids=["nested-2000-deep", "5000-digit-number"],
)
def test_rank_zero_with_invalid_measurements_still_reports_and_the_check_is_inconclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], payload: str
) -> None:
    """Rank 0's script writes measurements Python's json cannot parse (too deep, too many
    digits): its report still goes out, carrying why, and the launcher's result is
    Inconclusive, never Pass and never missing."""
    writer = tmp_path / "write.py"
    writer.write_text(f"import os\nopen(os.environ['SIGNAL_MEASUREMENTS_FILE'], 'w').write({payload})\n")
    path = script(tmp_path, f"#!/bin/sh\n{sys.executable} {writer}\n")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")
    monkeypatch.setenv("HOSTNAME", "job-worker-0")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("SIGNAL_SCRIPT", raising=False)
    keyed(monkeypatch)
    assert runner_main.main(["rank", "--script", str(path), "--deadline-seconds", "30"]) == 0
    lines = capfd.readouterr().out.splitlines()
    reports = mpi.reports_in([f"[1,0]<stdout>:{ln}" for ln in lines], RANK_KEY)
    assert len(reports) == 1
    assert isinstance(reports[0].body, dict)
    assert str(reports[0].body["measurements"]).startswith("invalid: ")
    measurements = tmp_path / "launcher-measurements.json"
    measurements.write_text(mpi.rank_zero_measurements(reports) or "")
    (tmp_path / "out").write_bytes(b"")
    result = build_result(
        Identity("job-launcher-node", "job-launcher", "uid-l", role="launcher"),
        Outcome(0, None, False, 0, 1),
        measurements_file=measurements,
        stdout_file=tmp_path / "out",
        stderr_file=tmp_path / "out",
    )
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.reason.startswith("InvalidMeasurements: measurements must be a JSON object")


def test_rank_role_prefers_signal_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    real = script(tmp_path, "#!/bin/sh\nexit 6\n", name="real.sh")
    monkeypatch.setenv("SIGNAL_SCRIPT", str(real))
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")
    monkeypatch.setenv("HOSTNAME", "h0")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    keyed(monkeypatch)
    code = runner_main.main(["rank", "--script", str(tmp_path / "absent.sh"), "--deadline-seconds", "10"])
    assert code == 6
    digest = "sha256:" + hashlib.sha256(real.read_bytes()).hexdigest()
    assert capfd.readouterr().out.splitlines()[-1] == mpi.rank_line(0, 1, "h0", 6, key=RANK_KEY, script=digest)


def test_rank_role_unstartable_script_reports_127(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SIGNAL_SCRIPT", raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")
    monkeypatch.setenv("HOSTNAME", "h0")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    keyed(monkeypatch)
    code = runner_main.main(["rank", "--script", str(tmp_path / "absent.sh"), "--deadline-seconds", "10"])
    assert code == 127
    assert capfd.readouterr().out.splitlines()[-1] == mpi.rank_line(0, 1, "h0", 127, key=RANK_KEY)


def test_rank_role_without_a_report_key_reports_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A rank not started by the launcher role has no key: it runs nothing and reports nothing."""
    path = script(tmp_path, "#!/bin/sh\necho ran\n")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")
    monkeypatch.delenv(mpi.REPORT_KEY_ENV, raising=False)
    assert runner_main.main(["rank", "--script", str(path), "--deadline-seconds", "10"]) == 2
    captured = capfd.readouterr()
    assert captured.out == ""
    assert f"{mpi.REPORT_KEY_ENV} is missing" in captured.err


def test_a_rank_of_an_ssh_session_takes_the_workers_recorded_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """An ssh session has none of the worker container's environment: the rank takes its
    node, Pod, Run and check from what the worker recorded before it became sshd; what the
    session does have wins."""
    record = tmp_path / "environment.json"
    sshd.record_environment(
        {"SIGNAL_NODE_NAME": "node-a", "SIGNAL_POD_NAME": "job-worker-1", "SIGNAL_RUN_NAME": "run-1", "X": "y"}, record
    )
    assert record.stat().st_mode & 0o777 == 0o400
    sshd.record_environment({"SIGNAL_NODE_NAME": "node-a", "SIGNAL_POD_NAME": "job-worker-1"}, record)  # restart
    monkeypatch.setattr(sshd, "IDENTITY_FILE", str(record))
    for name in runner_main.WORKER_ENV_KEYS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SIGNAL_CHECK", "nccl")
    seen = tmp_path / "seen"
    path = script(tmp_path, f'#!/bin/sh\necho "$SIGNAL_NODE_NAME $SIGNAL_POD_NAME $SIGNAL_CHECK $X" > {seen}\n')
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    keyed(monkeypatch)
    assert runner_main.main(["rank", "--script", str(path), "--deadline-seconds", "10"]) == 0
    assert seen.read_text() == "node-a job-worker-1 nccl \n"  # X: not a Signal variable
    capfd.readouterr()


@pytest.mark.parametrize(
    "text",
    ["", "not json", "[1]", '{"SIGNAL_NODE_NAME": 3}', "[" * 2000, '{"SIGNAL_NODE_NAME": ' + "9" * 5000 + "}"],
    ids=["empty", "text", "array", "number", "nested-2000-deep", "5000-digit-number"],
)
def test_an_unreadable_record_adds_nothing(tmp_path: Path, text: str) -> None:
    (tmp_path / "r.json").write_text(text)
    assert sshd.recorded_environment(["SIGNAL_NODE_NAME"], tmp_path / "r.json") == {}
    assert sshd.recorded_environment(["SIGNAL_NODE_NAME"], tmp_path / "absent.json") == {}
