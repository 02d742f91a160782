"""What real nodes leave on the host outside the work directory, recorded and removed.

A cluster with real nodes changes the host in exactly these ways: a bridge ``signal-br<slot>``
(with its addresses, routes and the host ends of the nodes' veths), an nftables table
``inet signal_br<slot>`` guarding it, a cgroup subtree
``signal-realnodes-<slot>`` in every cgroup hierarchy (every node process, containerd's shims
and every container live in it), and a record of both in :func:`state_dir`. Everything else a
node touches (``/run/containerd``, ``/run/netns/cni-*``, ``/var/lib/cni``, the kubelet's,
kube-proxy's and CNI's iptables chains, ``ip_forward``, the kubelet's mounts) happens inside the
node's private mount and network namespaces, which the kernel removes with the node's last
process.

:func:`clean` kills every process in the subtree (until none is left), removes the cgroups, the
bridge and the record. It runs at a clean stop, from the *janitor* (``python -m
localcluster.realnode.hoststate <record>``, started per cluster in a session of its own: when its
stdin reaches end-of-file without ``stop``, its owner died, and it cleans at once), and at every
start for records whose owner and janitor are both gone (:func:`sweep`). Standard library only.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PREFIX = "signal-realnodes-"
LOCK_NAME = "\0signal-localcluster-realnodes"


def state_dir() -> Path:
    """Where records live: ``$SIGNAL_REALNODE_STATE_DIR``, default ``/run/signal-localcluster``."""
    return Path(os.environ.get("SIGNAL_REALNODE_STATE_DIR") or "/run/signal-localcluster")


def start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of ``pid``, or None if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = text[text.rindex(b")") + 2 :].split()
    return None if fields[0] == b"Z" else int(fields[19])


def alive(entry: list[int] | None) -> bool:
    """Whether ``[pid, start time]`` is still that same process."""
    return bool(entry) and start_time(int(entry[0])) == entry[1]  # type: ignore[index]


def hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, named ones and the unified v2 tree)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] in ("cgroup", "cgroup2"):
            found.append(Path(left.split()[4]))
    return sorted(set(found))


def cgroup_dirs(name: str) -> list[Path]:
    """``name`` (a relative cgroup path) in every hierarchy."""
    return [h / name for h in hierarchies()]


@contextlib.contextmanager
def locked(timeout: float = 120.0) -> Iterator[Path]:
    """Hold the machine-wide lock of real-node host state (slot choice, records, sweeping) and
    yield the state directory. The lock is an abstract Unix socket name: it leaves no file
    behind and is released when its holder dies."""
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                lock.bind(LOCK_NAME)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the real-node host-state lock is held for over {timeout}s") from None
                time.sleep(0.05)
        directory = state_dir()
        directory.mkdir(parents=True, exist_ok=True)
        yield directory
    finally:
        lock.close()


def write_record(path: Path, body: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)  # a sweep may just have removed it
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(body, indent=1))
    temporary.replace(path)


def _pids_in(subtree: str) -> set[int]:
    pids: set[int] = set()
    for top in cgroup_dirs(subtree):
        if not top.is_dir():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    pids.discard(os.getpid())
    return pids


def kill_subtree(subtree: str, timeout: float = 30.0) -> int:
    """SIGKILL every process in cgroup ``subtree`` (any hierarchy) until none is left; returns
    how many were signalled. Freezes nothing: repeats while processes remain (new forks too)."""
    signalled = 0
    deadline = time.monotonic() + timeout
    while pids := _pids_in(subtree):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                signalled += 1
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {sorted(pids)} of cgroup {subtree} survive SIGKILL after {timeout}s")
        time.sleep(0.05)
    return signalled


def remove_cgroups(subtree: str, timeout: float = 10.0) -> None:
    """Remove cgroup ``subtree`` in every hierarchy, deepest first (a cgroup whose last process
    just died may be busy for a moment: retried until ``timeout``)."""
    deadline = time.monotonic() + timeout
    for top in cgroup_dirs(subtree):
        if not top.is_dir():
            continue
        for directory in [*sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), top]:
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError as exc:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"cannot remove cgroup {directory}: {exc}") from exc
                    time.sleep(0.05)


def clean(record_path: Path) -> None:
    """Remove everything a record names: processes, cgroups, nftables table, bridge; then the
    record."""
    try:
        record = json.loads(record_path.read_text())
    except FileNotFoundError:
        return
    subtree = str(record["cgroup"])
    kill_subtree(subtree)
    remove_cgroups(subtree)
    table = str(record.get("nftTable", ""))
    if (
        table
        and subprocess.run(["nft", "list", "table", "inet", table], capture_output=True, check=False).returncode == 0
    ):
        subprocess.run(["nft", "delete", "table", "inet", table], check=True, capture_output=True)
    bridge = str(record["bridge"])
    if Path("/sys/class/net", bridge).exists():
        subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)
    if Path("/sys/class/net", bridge).exists():
        raise RuntimeError(f"bridge {bridge} could not be removed: remove it with `ip link del {bridge}`")
    if record.get("removeWorkdir") and record.get("workdir"):  # the nodes' files, unless kept
        shutil.rmtree(str(record["workdir"]), ignore_errors=True)
    record_path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # the last cluster gone: leave no empty directory behind
        record_path.parent.rmdir()


def sweep() -> list[str]:
    """Clean every record whose owner and janitor are both gone; returns their bridges.
    Call with :func:`locked` held."""
    cleaned: list[str] = []
    directory = state_dir()
    if not directory.is_dir():
        return cleaned
    for path in sorted(directory.glob("slot-*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if alive(record.get("owner")) or alive(record.get("janitor")):
            continue
        clean(path)
        cleaned.append(str(record["bridge"]))
    return cleaned


def janitor(record_path: Path) -> int:
    """Note this process in the record, then wait for ``stop`` or end-of-file on stdin; on
    end-of-file alone (the owner died), clean."""
    with locked():
        if not record_path.exists():  # the cluster already stopped
            return 0
        record = json.loads(record_path.read_text())
        record["janitor"] = [os.getpid(), start_time(os.getpid())]
        write_record(record_path, record)
    received = b""
    while chunk := os.read(0, 64):
        received += chunk
    if b"stop" in received:
        return 0
    with locked():
        clean(record_path)
    return 0


if __name__ == "__main__":
    sys.exit(janitor(Path(sys.argv[1])))
