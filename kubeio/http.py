"""HTTP/1.1 for the Kubernetes API over asyncio streams: a pool of keep-alive connections to
one server, bodies read whole (``Content-Length``, chunked, or to the close; gzip undone) or as
a stream of lines (watches).

Signal's services talk raw JSON to one API server, so they need little of a general client:
this module replaced aiohttp for them, whose import (with its default TLS contexts, which load
the system's CA store) was the largest part of the adapter's start, paid at every check. What
a production client is expected to do, it does: TLS with the endpoint's context and server
name, ``Accept-Encoding: gzip``, the proxy from ``HTTPS_PROXY``/``HTTP_PROXY`` (``CONNECT``
for https) unless ``NO_PROXY`` names the host, a bounded number of connections, a deadline on
every step, and no reuse of a connection the server closed or whose answer was not read to
its end. Every failure without a complete answer is an ``HttpError``.
"""

import asyncio
import os
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit

from kubeio.httpwire import MAX_HEADER_BYTES, HttpError, connect_tunnel, describe, proxy_for, read_head

MAX_LINE_BYTES = 16 * 1024 * 1024
"""One line of a streamed body (a watch event: an object of up to etcd's 1.5 MiB), at most."""
IDLE_SECONDS = 60.0
"""A connection idle this long is closed rather than reused."""
STREAM_LIMIT = 2**21
CHUNK = 2**16
REPLAYABLE = frozenset({"GET", "HEAD"})
"""Requests sent again when a kept connection turns out closed before any answer."""
T = TypeVar("T")


@dataclass
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self) -> bool:
        """Open at both ends (the server's close of an idle connection is seen here)."""
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


@dataclass
class Response:
    """One answer: its status and headers (names in lower case); the body read by ``read`` or
    ``lines``, after which (or on ``release``) the connection goes back to the pool if the
    answer was read to its end and the server keeps it open, and is closed otherwise."""

    status: int
    headers: dict[str, str]
    _pool: "Pool"
    _connection: Connection | None
    _chunked: bool
    _remaining: int | None
    """Body bytes still to come when ``Content-Length`` gave them; None: chunked or to the close."""
    _keep: bool
    _gunzip: "zlib._Decompress | None" = None
    _done: bool = False
    _chunk_left: int = 0

    async def read(self, deadline: float | None = None) -> bytes:
        parts = [part async for part in self._body(deadline, None)]
        return b"".join(parts)

    async def lines(self, read_timeout: float) -> AsyncIterator[bytes]:
        """The body's lines, each read within ``read_timeout`` of the previous bytes."""
        pending = b""
        async for part in self._body(None, read_timeout):
            pending += part
            if b"\n" not in part:
                if len(pending) > MAX_LINE_BYTES:
                    raise HttpError(f"a line of the answer exceeds {MAX_LINE_BYTES} bytes")
                continue
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line
            if len(pending) > MAX_LINE_BYTES:
                raise HttpError(f"a line of the answer exceeds {MAX_LINE_BYTES} bytes")
        if pending:
            yield pending

    def release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool.give_back(connection, reuse=self._done and self._keep)

    async def _body(self, deadline: float | None, read_timeout: float | None) -> AsyncIterator[bytes]:
        if self._connection is None:
            raise HttpError("the answer was released before its body was read")
        reader = self._connection.reader
        while not self._done:
            try:
                raw = await _timed(self._next(reader), deadline, read_timeout)
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                raise HttpError(f"reading the body: {describe(exc)}") from exc
            if raw and self._gunzip is not None:
                try:
                    raw = self._gunzip.decompress(raw)
                except zlib.error as exc:
                    raise HttpError(f"the answer's gzip body is corrupt: {exc}") from exc
            if raw:
                yield raw
        if self._gunzip is not None:
            tail = self._gunzip.flush()
            if not self._gunzip.eof:
                raise HttpError("the answer's gzip body is truncated")
            if tail:
                yield tail
        self.release()

    async def _next(self, reader: asyncio.StreamReader) -> bytes:
        """The next piece of the body (b"" at its end, which sets ``_done``)."""
        if self._chunked:
            if self._chunk_left == 0:
                size_line = await reader.readuntil(b"\r\n")
                try:
                    self._chunk_left = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError as exc:
                    raise HttpError(f"malformed chunk size {size_line[:40]!r}") from exc
                if self._chunk_left < 0:
                    raise HttpError(f"malformed chunk size {size_line[:40]!r}")
                if self._chunk_left == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                        pass
                    self._done = True
                    return b""
            data = await reader.read(min(self._chunk_left, CHUNK))
            if not data:
                raise HttpError("the connection closed inside a chunk")
            self._chunk_left -= len(data)
            if self._chunk_left == 0 and await reader.readexactly(2) != b"\r\n":
                raise HttpError("a chunk does not end with CRLF")
            return data
        if self._remaining is not None:
            if self._remaining == 0:
                self._done = True
                return b""
            data = await reader.read(min(self._remaining, CHUNK))
            if not data:
                raise HttpError(f"the connection closed with {self._remaining} bytes of the body to come")
            self._remaining -= len(data)
            return data
        data = await reader.read(CHUNK)
        if not data:
            self._done = True
        return data


@dataclass
class Pool:
    """Connections to the server of ``base`` (``https://host:port``), at most ``limit`` at once."""

    base: str
    context: ssl.SSLContext | None
    server_hostname: str | None = None
    limit: int = 100
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    _idle: list[Connection] = field(default_factory=list)
    _open_connections: dict[int, Connection] = field(default_factory=dict)
    _slots: asyncio.Semaphore | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"unsupported server URL {self.base!r}: expected https://host[:port]")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.authority = parts.netloc
        self.prefix = parts.path.rstrip("/")
        self.proxy = proxy_for(parts.scheme, self.host, self.port, self.environ)

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        deadline: float | None,
        connect_timeout: float,
        read_timeout: float | None = None,
        before_send: Callable[[], None] | None = None,
    ) -> Response:
        """Send one request (``target``: path and query) and read its status and headers: all
        by ``deadline`` (``time.monotonic()``), connecting within ``connect_timeout`` and the
        answer's head within ``read_timeout``. ``before_send`` is called once a connection is
        in hand, with no wait between it and the first byte sent; what it raises ends the
        request unsent (the write guard, checked again after the waits for a slot and a
        connection)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        await _timed(self._slots.acquire(), deadline, None)
        try:
            while True:
                connection, reused = self._take(), True
                if connection is None:
                    connection, reused = await _timed(self._open(), deadline, connect_timeout), False
                self._open_connections[id(connection)] = connection
                try:
                    if before_send is not None:
                        before_send()
                    exchange = self._exchange(connection, method, target, headers, body)
                    return await _timed(exchange, deadline, read_timeout)
                except _StaleConnection:
                    self._drop(connection)
                    # A connection kept from before, closed by the server as the request went
                    # out: a read is sent again on a new one; a write may have been received,
                    # so it is not (as Go's net/http decides), and goes back to the caller.
                    if not reused or method not in REPLAYABLE:
                        raise HttpError("the server closed the connection without answering") from None
                except BaseException:
                    self._drop(connection)
                    raise
        except BaseException:
            self._slots.release()
            raise

    def give_back(self, connection: Connection, *, reuse: bool) -> None:
        if self._slots is not None:
            self._slots.release()
        if reuse and connection.usable() and len(self._idle) < self.limit:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            self._drop(connection)

    async def close(self) -> None:
        """Close every connection, idle or in use (a watch reading one then fails), at once:
        aborted, without waiting for the server's part of a TLS close, which a process about
        to exit has no use for."""
        every, self._open_connections, self._idle = list(self._open_connections.values()), {}, []
        for connection in every:
            connection.writer.transport.abort()

    def _take(self) -> Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable() and time.monotonic() - connection.idle_since < IDLE_SECONDS:
                return connection
            self._drop(connection)
        return None

    def _drop(self, connection: Connection) -> None:
        self._open_connections.pop(id(connection), None)
        connection.close()

    async def _open(self) -> Connection:
        try:
            if self.proxy is None:
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self._tls(), server_hostname=self._name(), limit=STREAM_LIMIT
                )
                return Connection(reader, writer)
            proxy_host, proxy_port, authorization = self.proxy
            reader, writer = await asyncio.open_connection(proxy_host, proxy_port, limit=STREAM_LIMIT)
            if self.tls:
                try:
                    await connect_tunnel(reader, writer, f"{_bracket(self.host)}:{self.port}", authorization)
                    await writer.start_tls(self._tls(), server_hostname=self._name())  # type: ignore[arg-type]
                except BaseException:
                    writer.close()
                    raise
            return Connection(reader, writer)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise HttpError(f"cannot connect to {self.base}: {describe(exc)}") from exc

    def _tls(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        return self.context or ssl.create_default_context()

    def _name(self) -> str | None:
        return (self.server_hostname or self.host) if self.tls else None

    async def _exchange(
        self, connection: Connection, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> Response:
        via_proxy = self.proxy is not None and not self.tls
        path = f"{self.base}{target}" if via_proxy else f"{self.prefix}{target}"
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.authority}", "Accept-Encoding: gzip"]
        if via_proxy and self.proxy is not None and self.proxy[2]:
            lines.append(f"Proxy-Authorization: {self.proxy[2]}")
        for name, value in headers.items():
            if any(c in value or c in name for c in "\r\n\0"):
                raise HttpError(f"{method} {target}: the header {name} holds a line break")
            lines.append(f"{name}: {value}")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            connection.writer.write(head + (body or b""))
            await connection.writer.drain()
            status_line = await connection.reader.readuntil(b"\r\n")
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
            if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                raise HttpError(f"the answer ended in its status line: {describe(exc)}") from exc
            raise _StaleConnection from exc
        except (OSError, ssl.SSLError, asyncio.LimitOverrunError) as exc:
            raise HttpError(f"{method} {target}: {describe(exc)}") from exc
        try:
            version, status, fields = await read_head(connection.reader, status_line)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise HttpError(f"{method} {target}: reading the answer's headers: {describe(exc)}") from exc
        encoding = fields.get("transfer-encoding", "").lower()
        chunked = "chunked" in encoding
        length = fields.get("content-length")
        remaining = None
        if not chunked and length is not None:
            if not length.strip().isdigit():
                raise HttpError(f"{method} {target}: malformed Content-Length {length[:40]!r}")
            remaining = int(length)
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            remaining = 0
        kept = fields.get("connection", "").lower()
        persistent = kept == "keep-alive" if version == "HTTP/1.0" else kept != "close"
        keep = persistent and (chunked or remaining is not None)
        gzipped = fields.get("content-encoding", "").lower() == "gzip"
        gunzip = zlib.decompressobj(wbits=31) if gzipped else None
        return Response(status, fields, self, connection, chunked, remaining, keep, gunzip)


class _StaleConnection(Exception):
    """A connection that failed before any byte of an answer: the server had closed it."""


async def _timed(step: Awaitable[T], deadline: float | None, timeout: float | None) -> T:
    """``step`` within the earlier of ``deadline`` (``time.monotonic()``) and ``timeout`` seconds."""
    limits = [x for x in (None if deadline is None else deadline - time.monotonic(), timeout) if x is not None]
    if not limits:
        return await step
    seconds = max(0.0, min(limits))
    try:
        async with asyncio.timeout(seconds):
            return await step
    except TimeoutError as exc:
        raise HttpError(f"no answer within {seconds:.1f}s") from exc


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


__all__ = ["MAX_HEADER_BYTES", "MAX_LINE_BYTES", "HttpError", "Pool", "Response", "proxy_for"]
