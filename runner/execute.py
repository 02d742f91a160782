"""Running one operator script: argv from its shebang, a clean environment, a deadline,
and bounded capture of its output (full sha256 and byte count, bounded tail).

The script is mounted read-only and may lack the execute bit, so the runner reads its
``#!`` line and runs the interpreter itself (as the kernel would); a script without one
runs under ``/bin/sh``. The script runs in its own process group so that a deadline or a
termination reaches everything it started.
"""

from __future__ import annotations

import math
import os
import select
import stat
import time

from runner.document import Stream
from shared.limits import PARAMETER_ENV_PREFIX as PARAMETER_PREFIX
from shared.result_wire import MAX_TAIL_CHARS

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    import signal
    from collections.abc import Mapping
    from typing import Any, Final, NamedTuple
else:
    from shared.lighttuple import NamedTuple

    try:  # The signals' numbers from the C module: signal.py builds enumerations of them
        # (importing enum, functools and operator), a tenth of every runner's start.
        import _signal as signal
    except ImportError:  # pragma: no cover - CPython has it
        import signal

try:  # The interpreter's own SHA-256 (3.11: _sha256; 3.12+: _sha2): hashlib loads OpenSSL's
    # libcrypto first, a few milliseconds of every runner's start. The same digest either way.
    from _sha256 import sha256  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - the interpreter of the image or of the test decides
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]
    except ImportError:
        from hashlib import sha256

SAFE_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASS_THROUGH_PREFIXES: Final = ("NVIDIA_", "CUDA_", "NCCL_", "UCX_")
"""Environment set by the node's GPU runtime or the check's workload that scripts may need."""
PASS_THROUGH_KEYS: Final = ("TMPDIR", "LD_LIBRARY_PATH")
"""The container's temporary directory and library path (set by the image or the Pod)."""
MPI_PREFIXES: Final = ("OMPI_", "PMIX_", "OPAL_", "PRTE_")
"""Environment an MPI rank inherits from OpenMPI's launcher; needed for MPI_Init."""
KILL_GRACE_SECONDS: Final = 2.0
StrPath = str | os.PathLike[str]
"""A file's path: the runner's own are strings (``pathlib`` was an eighth of its start), a
caller's may be ``Path``s."""


class ScriptError(RuntimeError):
    """The script cannot be started (missing, unreadable, bad interpreter line)."""


class Outcome(NamedTuple):
    exit_code: int | None
    signal: int | None
    timed_out: bool
    started: float
    finished: float


def script_argv(script: StrPath) -> list[str]:
    """The command that runs ``script``: its ``#!`` interpreter (with at most one argument,
    as Linux passes it) or ``/bin/sh``."""
    script = os.fspath(script)
    try:
        with open(script, "rb") as handle:
            first = handle.readline(512)
    except OSError as exc:
        raise ScriptError(f"cannot read script {script}: {exc.strerror}") from exc
    if not first.startswith(b"#!"):
        return ["/bin/sh", script]
    line = first[2:].strip().decode("utf-8", errors="replace")
    if not line:
        raise ScriptError(f"script {script} has an empty interpreter line")
    parts = line.split(None, 1)
    return [parts[0], *(parts[1:] and [parts[1].strip()]), script]


def script_digest(script: StrPath) -> str:
    """``sha256:<hex>`` of the script's bytes, the file the runner is about to execute (an
    immutable ConfigMap mounted read-only): the adapter and acceptance compare it with the
    Run's snapshot (shared/snapshot.py). The interpreter's own SHA-256, as for the streams."""
    digest = sha256()
    try:
        with open(os.fspath(script), "rb") as handle:
            while chunk := handle.read(1 << 16):
                digest.update(chunk)
    except OSError as exc:
        raise ScriptError(f"cannot read script {os.fspath(script)}: {exc.strerror}") from exc
    hexdigest: str = digest.hexdigest()
    return "sha256:" + hexdigest


def clean_environment(
    inherited: Mapping[str, str], extra: Mapping[str, str], *, home: StrPath, mpi: bool = False
) -> dict[str, str]:
    """Only what a script should see: a fixed PATH, HOME, LANG, the container's TMPDIR,
    Signal's identity variables (``extra``), the check's parameters (``SIGNAL_PARAM_*``),
    GPU-runtime variables and, for MPI ranks, OpenMPI's own."""
    prefixes = PASS_THROUGH_PREFIXES + (PARAMETER_PREFIX,) + (MPI_PREFIXES if mpi else ())
    env = {k: v for k, v in inherited.items() if k.startswith(prefixes) or k in PASS_THROUGH_KEYS}
    env.update({"PATH": SAFE_PATH, "HOME": os.fspath(home), "LANG": "C.UTF-8"})
    env.update(extra)
    return env


def run_script(
    argv: list[str],
    env: Mapping[str, str],
    cwd: StrPath,
    stdout: StrPath | None,
    stderr: StrPath | None,
    deadline_seconds: float,
) -> Outcome:
    """Run ``argv`` until it exits or the deadline passes (then TERM, then KILL the group).
    ``None`` for an output path means the stream is inherited.

    Started with ``os.posix_spawn`` in a session of its own, with stdin from /dev/null and the
    signals Python ignores (SIGPIPE, SIGXFSZ) back to their defaults, as ``subprocess`` would
    start it: the runner starts once per participant and per rank, and ``subprocess`` (with
    threading, selectors and locale) costs a third of the runner's own start. The script
    inherits only 0, 1 and 2: what the runner opens is close-on-exec (PEP 446), and what it
    was given beyond those is closed in the child (``close_fds``)."""
    started = time.time()
    with (
        open(stdout or os.devnull, "wb") as out,
        open(stderr or os.devnull, "wb") as err,
    ):
        actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
        ]
        actions += [
            (os.POSIX_SPAWN_DUP2, f.fileno(), fd) for fd, f, path in ((1, out, stdout), (2, err, stderr)) if path
        ]
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited()]
        pid = _spawn(argv, env, cwd, actions)
    timed_out = False
    try:
        status = _wait(pid, max(deadline_seconds, 0.001))
        if status is None:
            timed_out = True
            _kill_group(pid, signal.SIGTERM)
            status = _wait(pid, KILL_GRACE_SECONDS)
            if status is None:
                _kill_group(pid, signal.SIGKILL)
                status = os.waitpid(pid, 0)[1]
    except BaseException:
        _kill_group(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    # Nothing the script started may outlive it.
    _kill_group(pid, signal.SIGKILL)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return Outcome(None, -code, timed_out, started, time.time())
    return Outcome(code, None, timed_out, started, time.time())


def _spawn(argv: list[str], env: Mapping[str, str], cwd: StrPath, actions: list[Any]) -> int:
    """Start ``argv`` (a bare name searched on ``env``'s PATH, as ``subprocess`` does) in
    ``cwd``, which the runner enters for the spawn and leaves again (it has one thread)."""
    program = argv[0] if "/" in argv[0] else _on_path(argv[0], env.get("PATH", SAFE_PATH))
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.chdir(cwd)
        return os.posix_spawn(
            program,
            argv,
            dict(env),
            file_actions=actions,
            setsid=True,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    except OSError as exc:
        raise ScriptError(f"cannot start {' '.join(argv)}: {exc.strerror}") from exc
    finally:
        os.fchdir(here)
        os.close(here)


def _inherited() -> list[int]:
    """The runner's descriptors above 2 that an exec would pass on (opened inheritable by
    whoever started the runner): the script gets none of them, as with ``close_fds``."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                found.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return found


def _on_path(name: str, search: str) -> str:
    """The first executable ``name`` in the directories of ``search`` (else ``name`` itself,
    whose spawn then fails with the usual error)."""
    for directory in search.split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return name


def _wait(pid: int, seconds: float) -> int | None:
    """``pid``'s wait status once it exits, or None if it outlives ``seconds``: a poll of its
    pidfd (Linux 5.3+), else (older kernels) a poll of ``waitpid`` with a growing pause."""
    deadline = time.monotonic() + seconds
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        handle = -1
    if handle >= 0:
        try:
            poller = select.poll()
            poller.register(handle, select.POLLIN)
            while not poller.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000))):
                if time.monotonic() >= deadline:
                    return None
        finally:
            os.close(handle)
        return os.waitpid(pid, 0)[1]
    pause = 0.0005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.05)


def _kill_group(pgid: int, sig: int) -> None:
    try:  # noqa: SIM105 - contextlib (with collections and functools) is not loaded at start
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


MAX_STREAM_BYTES = 256 * 1024 * 1024
"""The largest captured stream summarised (hashed whole): a script may inflate its own output
files (a sparse file of terabytes costs no disk), and the result must be written in seconds."""


class StreamError(Exception):
    """A captured stream the runner will not summarise (the script replaced or inflated it)."""


def open_regular(path: StrPath, what: str) -> int | None:
    """A descriptor of ``path`` if it is a regular file, None if there is none. The script owns
    its workdir and may have put anything there after it exited: a symlink is not followed, a
    FIFO or a device is not waited on (raise StreamError)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StreamError(f"cannot open the script's {what}: {exc.strerror} (a symlink is not followed)") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StreamError(f"the script's {what} is not a regular file (the script replaced it)")
    return fd


def summarise(path: StrPath, tail_chars: int = MAX_TAIL_CHARS) -> Stream:
    """Full sha256 and size of a captured stream, and its last ``tail_chars`` characters;
    StreamError if it is not a regular file or larger than MAX_STREAM_BYTES."""
    digest = sha256()
    size = 0
    tail = b""
    keep = tail_chars * 4
    fd = open_regular(path, os.path.basename(path))
    if fd is not None:
        with open(fd, "rb") as handle:
            length = os.fstat(fd).st_size
            if length > MAX_STREAM_BYTES:
                raise StreamError(
                    f"the script's {os.path.basename(path)} is {length} bytes, more than the "
                    f"{MAX_STREAM_BYTES} summarised; write less, or to a file of your own"
                )
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
                size += len(block)
                tail = (tail + block)[-keep:]
                if size > MAX_STREAM_BYTES:  # grown since: a process the script left behind
                    raise StreamError(
                        f"the script's {os.path.basename(path)} kept growing past {MAX_STREAM_BYTES} bytes"
                    )
    text = tail.decode("utf-8", errors="replace")[-tail_chars:] if tail_chars else ""
    return Stream(digest="sha256:" + digest.hexdigest(), bytes=size, tail=text)
