"""The process kubelet's API, as the API server reaches it for ``pods/exec``: only the one
command Argo's workflow-controller sends to stop a step's containers, signalling the
container's first process (``<...>/argoexec kill <signal> 1`` or ``/bin/sh -c "kill -<signal>
1"``). The signal is delivered and the upgrade refused (there is no stream to attach); any
other request is refused."""

import asyncio
import contextlib
import re
import ssl
from collections.abc import Callable
from urllib.parse import parse_qs, unquote, urlsplit

import structlog

log = structlog.get_logger("process-kubelet")
_SHELL_KILL = re.compile(r"kill -(\d+) 1")
SignalContainer = Callable[[str, str, str, int], tuple[str, str]]
"""(namespace, Pod, container, signal) -> (HTTP status line, message)."""


def kill_signal(command: list[str]) -> int | None:
    """The signal of ``<...>/argoexec kill <n> 1`` or ``/bin/sh -c "kill -<n> 1"``, else None."""
    argoexec = len(command) == 4 and command[0].rsplit("/", 1)[-1] == "argoexec" and command[1] == "kill"
    if argoexec and command[2].isdigit() and command[3] == "1":
        return int(command[2])
    if len(command) == 3 and command[:2] == ["/bin/sh", "-c"]:
        match = _SHELL_KILL.fullmatch(command[2].strip())
        if match:
            return int(match.group(1))
    return None


def handle(method: str, target: str, signal_container: SignalContainer) -> tuple[str, str]:
    """``/exec/<namespace>/<pod>[/<uid>]/<container>?command=...``: (status, message)."""
    url = urlsplit(target)
    parts = [unquote(p) for p in url.path.strip("/").split("/")]
    if method not in {"GET", "POST"} or len(parts) not in {4, 5} or parts[0] != "exec":
        return "404 Not Found", f"process kubelet: no {method} {url.path}"
    command = parse_qs(url.query).get("command", [])
    number = kill_signal(command)
    if number is None:
        return "403 Forbidden", f"process kubelet: exec only simulates signalling PID 1, not {command}"
    return signal_container(parts[1], parts[2], parts[-1], number)


async def serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, signal_container: SignalContainer
) -> None:
    """One HTTP/1.1 request, one answer, close."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
        method, target, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        status, message = handle(method, target, signal_container)
        body = message.encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
    except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        log.info("kubelet API request dropped", error=str(exc))
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
