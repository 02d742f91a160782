"""Runs a command in a network namespace of its own that can reach one TCP service of the
host, and nothing else.

Some components open listeners we cannot configure (the Kubeflow MPI operator serves its
health check on ``:8080``, on every interface, and exits if that port is taken), which on a
shared machine would collide with anything else on 8080. Run under ``unshare --net``, this
module brings the namespace's loopback up, listens on ``127.0.0.1:<port>`` there and relays
each connection to a unix socket (``--unix``) that the caller's :class:`HostRelay` serves on
the host, relaying it to the real service (bytes only: TLS stays end to end, so the API
server's certificate for 127.0.0.1 still verifies). Then it runs the command, forwards
SIGTERM/SIGINT to it, and exits with its status; the namespace dies with it.

    unshare --net -- python -m localcluster.nsbridge --unix SOCK --port 6443 -- CMD ARGS...
"""

import argparse
import asyncio
import contextlib
import ctypes
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
_CHUNK = 1 << 16


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def relay(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    connect: "asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]",
) -> None:
    """Copy bytes both ways between a client and the connection ``connect`` opens."""
    try:
        upstream_reader, upstream_writer = await connect
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(_pipe(client_reader, upstream_writer), _pipe(upstream_reader, client_writer))


class HostRelay:
    """The host's end: a unix socket whose connections are relayed to ``host:port``."""

    def __init__(self, socket_path: Path, host: str, port: int) -> None:
        self.socket_path, self.host, self.port = socket_path, host, port
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.socket_path.unlink(missing_ok=True)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await relay(reader, writer, asyncio.ensure_future(asyncio.open_connection(self.host, self.port)))

        self.server = await asyncio.start_unix_server(serve, path=str(self.socket_path))
        self.socket_path.chmod(0o600)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)
        self.socket_path.unlink(missing_ok=True)


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


async def _main(unix: str, port: int, argv: list[str]) -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await relay(reader, writer, asyncio.ensure_future(asyncio.open_unix_connection(unix)))

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    child = await asyncio.create_subprocess_exec(*argv, preexec_fn=_die_with_parent)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, child.send_signal, signum)
    code = await child.wait()
    server.close()
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.nsbridge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--unix", required=True, help="the host relay's unix socket")
    parser.add_argument("--port", type=int, required=True, help="port to serve on 127.0.0.1 in this namespace")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    _die_with_parent()
    return asyncio.run(_main(args.unix, args.port, command))


if __name__ == "__main__":
    sys.exit(main())
