"""The wire of kubeio/http.py that is not a connection: its error, an answer's status line and
headers, and the proxy to go through (from the environment, ``CONNECT`` for https). Pure apart
from the stream reads and writes of ``read_head`` and ``connect_tunnel``.
"""

import asyncio
import base64
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

MAX_HEADER_BYTES = 64 * 1024
"""The status line and headers of one answer, at most."""


class HttpError(Exception):
    """No complete answer: the connection failed, closed, timed out, or the answer is malformed."""


async def read_head(reader: asyncio.StreamReader, status_line: bytes) -> tuple[str, int, dict[str, str]]:
    """The version, status and headers (names in lower case) of an answer."""
    parts = status_line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpError(f"malformed status line {status_line[:80]!r}")
    fields: dict[str, str] = {}
    size = len(status_line)
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        size += len(line)
        if size > MAX_HEADER_BYTES:
            raise HttpError(f"the answer's headers exceed {MAX_HEADER_BYTES} bytes")
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise HttpError(f"malformed header line {line[:80]!r}")
        fields[name.strip().lower()] = value.strip()
    return parts[0], int(parts[1]), fields


async def connect_tunnel(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str, authorization: str
) -> None:
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if authorization:
        lines.append(f"Proxy-Authorization: {authorization}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    await writer.drain()
    _, status, _ = await read_head(reader, await reader.readuntil(b"\r\n"))
    if status != 200:
        raise HttpError(f"the proxy refused CONNECT {authority}: HTTP {status}")


def proxy_for(scheme: str, host: str, port: int, environ: Mapping[str, str]) -> tuple[str, int, str] | None:
    """The proxy (host, port, Proxy-Authorization) for ``scheme://host:port`` as the usual
    variables name it (lower case first), or None: none set, or ``NO_PROXY`` names the host."""

    def variable(name: str) -> str:
        return environ.get(name.lower()) or environ.get(name.upper()) or ""

    url = variable(f"{scheme}_proxy")
    if not url:
        return None
    if any(bypassed(entry.strip().lower(), host.lower(), port) for entry in variable("no_proxy").split(",")):
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname:
        raise HttpError(f"unsupported proxy {url!r} for {scheme}: expected http://host:port")
    authorization = ""
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode()
    return parts.hostname, parts.port or 80, authorization


def bypassed(entry: str, host: str, port: int) -> bool:
    """Whether one ``NO_PROXY`` entry names ``host:port``: ``*``, a name and its subdomains
    (``example.com``, ``.example.com``, ``*.example.com``), optionally with ``:port``, an address,
    or a network (``10.96.0.0/12``)."""
    if entry == "*":
        return True
    if "/" in entry:
        import ipaddress  # noqa: PLC0415 - only for a network in NO_PROXY

        try:
            return ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False
    name, _, only = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
    if only and only != str(port):
        return False
    name = name.strip("[]").lstrip("*").lstrip(".")
    return bool(name) and (host == name or host.endswith("." + name))


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
