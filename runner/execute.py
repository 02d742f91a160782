"""Running one operator script: argv from its shebang, a clean environment, a deadline,
and bounded capture of its output (full sha256 and byte count, bounded tail).

The script is mounted read-only and may lack the execute bit, so the runner reads its
``#!`` line and runs the interpreter itself (as the kernel would); a script without one
runs under ``/bin/sh``. The script runs in its own process group so that a deadline or a
termination reaches everything it started.
"""

import contextlib
import hashlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final, NamedTuple

from runner.document import Stream
from shared.result_wire import MAX_TAIL_CHARS

SAFE_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASS_THROUGH_PREFIXES: Final = ("NVIDIA_", "CUDA_", "NCCL_", "UCX_")
"""Environment set by the node's GPU runtime or the check's workload that scripts may need."""
PASS_THROUGH_KEYS: Final = ("TMPDIR", "LD_LIBRARY_PATH")
"""The container's temporary directory and library path (set by the image or the Pod)."""
MPI_PREFIXES: Final = ("OMPI_", "PMIX_", "OPAL_", "PRTE_")
"""Environment an MPI rank inherits from OpenMPI's launcher; needed for MPI_Init."""
KILL_GRACE_SECONDS: Final = 2.0


class ScriptError(RuntimeError):
    """The script cannot be started (missing, unreadable, bad interpreter line)."""


class Outcome(NamedTuple):
    exit_code: int | None
    signal: int | None
    timed_out: bool
    started: float
    finished: float


def script_argv(script: Path) -> list[str]:
    """The command that runs ``script``: its ``#!`` interpreter (with at most one argument,
    as Linux passes it) or ``/bin/sh``."""
    try:
        with script.open("rb") as handle:
            first = handle.readline(512)
    except OSError as exc:
        raise ScriptError(f"cannot read script {script}: {exc.strerror}") from exc
    if not first.startswith(b"#!"):
        return ["/bin/sh", str(script)]
    line = first[2:].strip().decode("utf-8", errors="replace")
    if not line:
        raise ScriptError(f"script {script} has an empty interpreter line")
    parts = line.split(None, 1)
    return [parts[0], *(parts[1:] and [parts[1].strip()]), str(script)]


def clean_environment(
    inherited: Mapping[str, str], extra: Mapping[str, str], *, home: Path, mpi: bool = False
) -> dict[str, str]:
    """Only what a script should see: a fixed PATH, HOME, LANG, the container's TMPDIR,
    Signal's identity variables (``extra``), GPU-runtime variables and, for MPI ranks,
    OpenMPI's own."""
    prefixes = PASS_THROUGH_PREFIXES + (MPI_PREFIXES if mpi else ())
    env = {k: v for k, v in inherited.items() if k.startswith(prefixes) or k in PASS_THROUGH_KEYS}
    env.update({"PATH": SAFE_PATH, "HOME": str(home), "LANG": "C.UTF-8"})
    env.update(extra)
    return env


def run_script(
    argv: list[str],
    env: Mapping[str, str],
    cwd: Path,
    stdout: Path | None,
    stderr: Path | None,
    deadline_seconds: float,
) -> Outcome:
    """Run ``argv`` until it exits or the deadline passes (then TERM, then KILL the group).
    ``None`` for an output path means the stream is inherited."""
    started = time.time()
    with (
        stdout.open("wb") if stdout else open(os.devnull, "wb") as out,
        stderr.open("wb") if stderr else open(os.devnull, "wb") as err,
    ):
        try:
            process = subprocess.Popen(
                argv,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out if stdout else None,
                stderr=err if stderr else None,
                start_new_session=True,
            )
        except OSError as exc:
            raise ScriptError(f"cannot start {shlex.join(argv)}: {exc.strerror}") from exc
        timed_out = False
        try:
            code = process.wait(timeout=max(deadline_seconds, 0.001))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process.pid, signal.SIGTERM)
            try:
                code = process.wait(timeout=KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid, signal.SIGKILL)
                code = process.wait()
        except BaseException:
            _kill_group(process.pid, signal.SIGKILL)
            process.wait()
            raise
    # Nothing the script started may outlive it.
    _kill_group(process.pid, signal.SIGKILL)
    if code < 0:
        return Outcome(None, -code, timed_out, started, time.time())
    return Outcome(code, None, timed_out, started, time.time())


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def summarise(path: Path, tail_chars: int = MAX_TAIL_CHARS) -> Stream:
    """Full sha256 and size of a captured stream, and its last ``tail_chars`` characters."""
    digest = hashlib.sha256()
    size = 0
    tail = b""
    keep = tail_chars * 4
    if path.exists():
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
                size += len(block)
                tail = (tail + block)[-keep:]
    text = tail.decode("utf-8", errors="replace")[-tail_chars:] if tail_chars else ""
    return Stream(digest="sha256:" + digest.hexdigest(), bytes=size, tail=text)
