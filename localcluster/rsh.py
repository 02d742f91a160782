"""The rsh agent of simulated Pods: ``python -m localcluster.rsh [ssh options] <host> <command...>``.

Simulation artifact of the process kubelet (see ``localcluster.podexec``): simulated
Pods have no sshd, so OpenMPI's ``plm_rsh_agent`` points here instead of at ``ssh``
(the MPI operator once shipped a ``kubectl exec``-based rsh agent on the same idea). It
accepts ssh's command line as OpenMPI writes it, asks the process kubelet over its unix
socket to run the command with ``sh -c`` inside the Pod the host names, passes its own
stdin, stdout and stderr to that command, and exits with the command's exit status
(255 when the host cannot be reached, as ssh does). ``-o ConnectionAttempts=N`` is
honoured: a Pod that is not running yet is retried once a second, N times in all.
"""

import contextlib
import json
import os
import socket
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

SOCKET_ENV = "SIGNAL_SIM_EXEC_SOCKET"
NAMESPACE_ENV = "SIGNAL_SIM_NAMESPACE"
UNREACHABLE = 255
# ssh(1) options that take an argument, and those that do not.
_WITH_ARGUMENT = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
_FLAGS = frozenset("46AaCfGgKkMNnqsTtVvXxYy")


class UsageError(ValueError):
    """The command line is not one this agent can serve."""


@dataclass(frozen=True)
class Invocation:
    host: str
    command: str
    connection_attempts: int = 1
    no_stdin: bool = False


def _option(value: str) -> tuple[str, str]:
    """``Key=Value`` or ``Key Value`` of ``-o``; keys are case-insensitive."""
    key, _, rest = value.replace("=", " ", 1).partition(" ")
    return key.strip().lower(), rest.strip()


def parse_args(argv: Sequence[str]) -> Invocation:
    """Parse ssh-style arguments: options (grouped flags, ``-oKey=V`` or ``-o Key=V``), a
    host (``user@`` ignored by the server), then the command, joined with spaces as ssh does."""
    attempts, no_stdin, index = 1, False, 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            index += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        position = 1
        while position < len(arg):
            letter = arg[position]
            if letter in _WITH_ARGUMENT:
                value = arg[position + 1 :]
                if not value:
                    index += 1
                    if index >= len(argv):
                        raise UsageError(f"option -{letter} needs an argument")
                    value = argv[index]
                if letter == "o":
                    key, setting = _option(value)
                    if key == "connectionattempts":
                        try:
                            attempts = max(1, int(setting))
                        except ValueError as exc:
                            raise UsageError(f"bad ConnectionAttempts {setting!r}") from exc
                break
            if letter not in _FLAGS:
                raise UsageError(f"unknown option -{letter}")
            no_stdin = no_stdin or letter == "n"
            position += 1
        index += 1
    if index >= len(argv):
        raise UsageError("no host given")
    command = " ".join(argv[index + 1 :])
    if not command.strip():
        raise UsageError("interactive logins are not simulated: give a command")
    return Invocation(argv[index], command, attempts, no_stdin)


def _usable(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _exec_once(socket_path: str, namespace: str, invocation: Invocation, fds: list[int]) -> dict[str, object]:
    body = json.dumps({"host": invocation.host, "namespace": namespace, "command": invocation.command}).encode()
    payload = struct.pack(">I", len(body)) + body
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(socket_path)
        except OSError as exc:
            return {"error": f"cannot reach the process kubelet at {socket_path}: {exc}", "retry": True}
        reply = b""
        try:
            sent = socket.send_fds(conn, [payload], fds)
            if sent < len(payload):
                conn.sendall(payload[sent:])
            while chunk := conn.recv(4096):
                reply += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass  # the kubelet answered (a refusal) and closed before we finished: read what came
        with contextlib.suppress(OSError):
            while chunk := conn.recv(4096):
                reply += chunk
    try:
        answer: dict[str, object] = json.loads(reply.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "the process kubelet closed the connection", "retry": False}
    return answer


def main(argv: Sequence[str] | None = None) -> int:
    try:
        invocation = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(f"localcluster.rsh: {exc}", file=sys.stderr)
        return UNREACHABLE
    socket_path = os.environ.get(SOCKET_ENV)
    if not socket_path:
        print(f"localcluster.rsh: {SOCKET_ENV} is not set (only simulated Pods can use this agent)", file=sys.stderr)
        return UNREACHABLE
    namespace = os.environ.get(NAMESPACE_ENV, "default")
    devnull = os.open(os.devnull, os.O_RDWR)
    fds = [fd if _usable(fd) else devnull for fd in (0, 1, 2)]
    if invocation.no_stdin:
        fds[0] = devnull
    answer: dict[str, object] = {}
    for attempt in range(invocation.connection_attempts):
        if attempt:
            time.sleep(1.0)
        answer = _exec_once(socket_path, namespace, invocation, fds)
        if "exit" in answer:
            return int(str(answer["exit"]))
        if not answer.get("retry"):
            break
    print(f"localcluster.rsh: {invocation.host}: {answer.get('error')}", file=sys.stderr)
    return UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
