"""The MPI worker's sshd in the runner image, as the runner user (uid 65532) under Pod
Security ``restricted``: no root, no capability, a read-only root filesystem.

``runner/ssh/sshd_config`` (installed as ``SSHD_CONFIG``) listens on ``SSHD_PORT`` (above
1024), reads the host key and writes its PID file under ``STATE_DIR`` on the Pod's writable
scratch volume, and authorizes the MPI operator's per-job key mounted at the runner user's
``~/.ssh`` (the MPIJob's ``sshAuthMountPath``). The host key is made here, at start, so no
private key ships in the image and every worker has its own.

A session sshd starts has none of the container's environment (``PermitUserEnvironment no``),
so the worker records the Signal variables its Pod was given (the downward API's node and
Pod names, the Run and check) in ``IDENTITY_FILE`` before it becomes sshd; a rank that the
launcher's ssh session started takes what it lacks from there (``signal-runner rank``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from shared import keys

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from typing import Final, NoReturn

SSHD_CONFIG: Final = "/etc/ssh/signal/sshd_config"
SSH_CLIENT_CONFIG: Final = "/etc/ssh/ssh_config.d/signal.conf"
SSHD_PORT: Final = keys.SSHD_PORT
RUNNER_SSH_DIR: Final = keys.RUNNER_SSH_DIR
WORKDIR: Final = "/signal/work"
STATE_DIR: Final = f"{WORKDIR}/sshd"
HOST_KEY_NAME: Final = "ssh_host_ed25519_key"
IDENTITY_FILE: Final = f"{STATE_DIR}/environment.json"
SSH_KEYGEN: Final = "/usr/bin/ssh-keygen"


class SshdError(Exception):
    """The worker's sshd cannot start (no writable state directory, no ssh-keygen)."""


def prepare_host_key(state_dir: Path, keygen: str = SSH_KEYGEN) -> Path:
    """A private directory (0700) holding this worker's ed25519 host key (0600); made once,
    kept if it exists (a restarted container reuses it)."""
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        state_dir.chmod(0o700)
    except OSError as exc:
        raise SshdError(
            f"cannot make sshd's state directory {state_dir}: {exc}; mount a writable volume there"
        ) from exc
    key = state_dir / HOST_KEY_NAME
    if key.exists():
        return key
    import subprocess  # noqa: PLC0415 - the worker's alone: every rank imports this module, and starts without it

    try:
        done = subprocess.run(
            [keygen, "-q", "-t", "ed25519", "-N", "", "-C", "signal-runner-worker", "-f", str(key)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SshdError(f"cannot run {keygen} for the host key {key}: {exc}") from exc
    if done.returncode != 0:
        raise SshdError(f"{keygen} failed ({done.returncode}) making the host key {key}: {done.stderr.strip()}")
    return key


def sshd_argv(sshd: str, config: str = SSHD_CONFIG) -> list[str]:
    """sshd in the foreground, logging to stderr (the container's log), on our configuration."""
    return [sshd, "-D", "-e", "-f", config]


def record_environment(env: Mapping[str, str], path: Path = Path(IDENTITY_FILE)) -> None:
    """Write ``env`` (the worker's Signal variables) for the ranks of ssh sessions: owner-only."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(descriptor, "w") as out:
        json.dump(dict(env), out)


def recorded_environment(names: Iterable[str], path: Path | None = None) -> dict[str, str]:
    """The recorded variables among ``names`` (none when there is no readable record)."""
    try:
        recorded = json.loads((path or Path(IDENTITY_FILE)).read_text())
    except (OSError, ValueError, RecursionError):  # the worker wrote it; a script as its user may rewrite it
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {k: v for k in names if isinstance(v := recorded.get(k), str)}


def recorded_with_prefix(prefix: str, path: Path | None = None) -> dict[str, str]:
    """The recorded variables whose names start with ``prefix`` (the check's parameters)."""
    try:
        recorded = json.loads((path or Path(IDENTITY_FILE)).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {k: v for k, v in recorded.items() if isinstance(k, str) and k.startswith(prefix) and isinstance(v, str)}


def exec_sshd(
    sshd: str,
    environment: Mapping[str, str],
    config: str = SSHD_CONFIG,
    state_dir: Path = Path(STATE_DIR),
) -> NoReturn:
    """Make the host key and record ``environment``, then become sshd (sshd needs its
    absolute path to re-exec)."""
    try:
        prepare_host_key(state_dir)
        record_environment(environment, state_dir / Path(IDENTITY_FILE).name)
    except OSError as exc:
        print(f"signal-runner worker: cannot record the environment for ssh sessions: {exc}", file=sys.stderr)
        sys.exit(1)
    except SshdError as exc:
        print(f"signal-runner worker: {exc}", file=sys.stderr)
        sys.exit(1)
    os.execv(sshd, sshd_argv(sshd, config))
