"""The process kubelet's stand-in for SSH between Pods: an exec server on a unix socket.

Simulation artifact. On a real cluster the MPI launcher reaches its workers over SSH
(the MPI operator mounts a key pair; historically it also shipped a ``kubectl exec``
rsh agent). Simulated Pods are processes on one machine with no sshd, so the process
kubelet offers an exec facility instead, and every container it runs gets the
environment that stands in for the node's SSH and network (:func:`node_env`):

* ``OMPI_MCA_plm_rsh_agent``: the rsh agent ``<python> -m localcluster.rsh`` (OpenMPI 4.1
  splits the agent on spaces, so an agent with arguments works; it also passes the
  setting, quoted, to the daemons it starts, for tree spawn);
* ``SIGNAL_SIM_EXEC_SOCKET`` and ``SIGNAL_SIM_NAMESPACE``: where the agent connects, and
  the namespace a bare host name is resolved in;
* ``OMPI_ALLOW_RUN_AS_ROOT`` and ``..._CONFIRM``: the simulation runs as root, as containers do;
* ``OMPI_MCA_oob_tcp_if_include=lo`` and ``OMPI_MCA_btl_tcp_if_include=lo``: every
  simulated Pod's IP is 127.0.0.1, so MPI's control and data traffic stay on loopback.

(Each Pod also gets its own ``TMPDIR``, see podprocess: OpenMPI daemons of two "nodes"
sharing one session directory crash in hwloc's shared-memory topology.)

Protocol: the agent sends one message, a 4-byte big-endian length and a JSON request
``{"host", "namespace", "command"}``, with its stdin, stdout and stderr file descriptors
attached (SCM_RIGHTS). The kubelet resolves the host to a Pod it runs, starts
``sh -c <command>`` with those descriptors in the Pod's context (the first container's
environment and working directory, its own process group, tracked as a process of the
Pod so deleting the Pod kills it) and answers one JSON line: ``{"exit": code}`` or
``{"error": text, "retry": bool}``. If the agent goes away first, the command's process
group is killed.
"""

import asyncio
import contextlib
import json
import os
import signal
import socket
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from localcluster.rsh import NAMESPACE_ENV, SOCKET_ENV

log = structlog.get_logger("process-kubelet-exec")
MAX_REQUEST_BYTES = 1 << 20
SERVICE_SUFFIXES = ("svc.cluster.local", "svc")


@dataclass(frozen=True)
class HostRef:
    """Where an rsh host name points: a Pod (and the subdomain it must have, if named)."""

    namespace: str
    pod: str
    subdomain: str | None = None


def parse_host(host: str, caller_namespace: str) -> HostRef:
    """``<pod>.<subdomain>.<ns>.svc[.cluster.local]``, ``<pod>.<subdomain>.<ns>``,
    ``<pod>.<subdomain>`` or ``<pod>`` (a user@ prefix is ignored)."""
    host = host.rsplit("@", 1)[-1].rstrip(".").lower()
    for suffix in SERVICE_SUFFIXES:
        if host.endswith("." + suffix):
            host = host[: -len(suffix) - 1]
            break
    parts = host.split(".")
    if not all(parts) or len(parts) > 3:
        raise ValueError(f"cannot resolve host {host!r} to a Pod")
    if len(parts) == 3:
        return HostRef(parts[2], parts[0], parts[1])
    if len(parts) == 2:
        return HostRef(caller_namespace, parts[0], parts[1])
    return HostRef(caller_namespace, parts[0])


def node_env(socket_path: Path, namespace: str) -> dict[str, str]:
    """The environment every simulated container gets in place of the node's SSH and network."""
    return {
        "OMPI_MCA_plm_rsh_agent": f"{sys.executable} -m localcluster.rsh",
        SOCKET_ENV: str(socket_path),
        NAMESPACE_ENV: namespace,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_oob_tcp_if_include": "lo",
        "OMPI_MCA_btl_tcp_if_include": "lo",
    }


@dataclass
class ExecTarget:
    """A Pod's context for a command: environment, working directory, and the Pod's
    process table (shared with the kubelet, which kills everything in it on deletion)."""

    env: dict[str, str]
    cwd: Path
    processes: dict[str, asyncio.subprocess.Process]


class ExecRefused(Exception):
    """The host cannot take a command now; ``retry`` if it may later (not yet running)."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass
class ExecServer:
    """Serves exec requests on ``socket_path`` for the Pods ``resolve`` knows."""

    socket_path: Path
    resolve: Callable[[HostRef], ExecTarget]
    _listener: socket.socket | None = None
    _accepter: asyncio.Task[None] | None = None
    _counter: int = 0
    _connections: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket_path))
        self._listener.listen(64)
        self._listener.setblocking(False)
        self._accepter = asyncio.create_task(self._accept_forever(self._listener), name="process-kubelet-exec")

    async def stop(self) -> None:
        for task in [*([self._accepter] if self._accepter else []), *self._connections]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._listener:
            self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def _accept_forever(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _address = await loop.sock_accept(listener)
            conn.setblocking(False)
            task = asyncio.create_task(self._serve(conn), name="process-kubelet-exec-request")
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        with conn:
            try:
                answer = await self._handle(conn)
            except ExecRefused as exc:
                answer = {"error": str(exc), "retry": exc.retry}
            except (OSError, ValueError, KeyError) as exc:
                answer = {"error": f"exec failed: {exc}", "retry": False}
            with contextlib.suppress(OSError):
                await loop.sock_sendall(conn, json.dumps(answer).encode() + b"\n")

    async def _handle(self, conn: socket.socket) -> dict[str, object]:
        loop = asyncio.get_running_loop()
        request, fds = await _receive(conn)
        try:
            ref = parse_host(request["host"], request["namespace"])
            target = self.resolve(ref)
            self._counter += 1
            key = f"exec:{self._counter}"
            process = await asyncio.create_subprocess_exec(
                "sh",
                "-c",
                request["command"],
                stdin=fds[0],
                stdout=fds[1],
                stderr=fds[2],
                env=target.env,
                cwd=target.cwd,
                start_new_session=True,
            )
        finally:
            for fd in fds:
                os.close(fd)
        target.processes[key] = process
        log.debug("exec", host=request["host"], pid=process.pid)
        gone = asyncio.ensure_future(loop.sock_recv(conn, 1))
        waited = asyncio.ensure_future(process.wait())
        try:
            await asyncio.wait({gone, waited}, return_when=asyncio.FIRST_COMPLETED)
            if not waited.done():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            code = await waited
        finally:
            gone.cancel()
            target.processes.pop(key, None)
        return {"exit": code if code >= 0 else 128 - code}


async def _readable(conn: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(conn.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(conn.fileno())


async def _read_exactly(conn: socket.socket, data: bytes, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    while len(data) < size:
        chunk = await loop.sock_recv(conn, size - len(data))
        if not chunk:
            raise ValueError("truncated request")
        data += chunk
    return data


async def _receive(conn: socket.socket) -> tuple[dict[str, str], list[int]]:
    """The request and its three descriptors (they come with the first bytes)."""
    await _readable(conn)
    data, fds, _flags, _address = socket.recv_fds(conn, 65536, 3)
    try:
        if len(fds) != 3:
            raise ValueError("expected stdin, stdout and stderr descriptors")
        data = await _read_exactly(conn, data, 4)
        (length,) = struct.unpack(">I", data[:4])
        if length > MAX_REQUEST_BYTES:
            raise ValueError("request too large")
        request = json.loads(await _read_exactly(conn, data[4:], length))
        if not all(isinstance(request.get(k), str) for k in ("host", "namespace", "command")):
            raise ValueError("malformed request")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, fds
