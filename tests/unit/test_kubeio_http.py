"""kubeio/http.py against loopback servers of the test's own, each answering with the exact
bytes under test: bodies by length, in chunks, to the close and gzip'd; keep-alive and the
server's close of an idle connection; malformed and oversized answers; deadlines; proxies."""

import asyncio
import gzip
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from kubeio.http import MAX_HEADER_BYTES, HttpError, Pool, proxy_for

pytestmark = pytest.mark.timeout(30)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A loopback server running ``handler`` per connection; yields its URL and the request
    heads it read (one per request, by the handler's ``read_request``)."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", []
    finally:
        server.close()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length)


def answering(*answers: bytes, close: bool = False, heads: list[bytes] | None = None) -> Handler:
    """A handler that answers each request on a connection with the next of ``answers``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for answer in answers:
                head, _ = await read_request(reader)
                if heads is not None:
                    heads.append(head)
                writer.write(answer)
                await writer.drain()
            if not close:
                await reader.read()  # keep the connection until the client closes it
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return handler


def ok(body: bytes, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def get(pool: Pool, target: str = "/api/v1/nodes", seconds: float = 5.0) -> tuple[int, bytes]:
    deadline = time.monotonic() + seconds
    response = await pool.request("GET", target, {}, None, deadline=deadline, connect_timeout=seconds)
    try:
        return response.status, await response.read(deadline)
    finally:
        response.release()


async def test_bodies_by_length_in_chunks_and_to_the_close() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: 1\r\n\r\n"
    to_close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"
    heads: list[bytes] = []
    async with serve(answering(ok(b"{}"), chunked, to_close, close=True, heads=heads)) as (url, _):
        pool = Pool(url, None, environ={})
        assert await get(pool) == (200, b"{}")
        assert await get(pool) == (200, b"hello world")
        assert await get(pool, "/x?y=1") == (200, b"until the end")
        await pool.close()
    # One connection served all three: kept alive while each answer was read to its end.
    assert [h.split(b"\r\n")[0] for h in heads] == [
        b"GET /api/v1/nodes HTTP/1.1",
        b"GET /api/v1/nodes HTTP/1.1",
        b"GET /x?y=1 HTTP/1.1",
    ]
    assert b"Accept-Encoding: gzip" in heads[0]
    assert b"Host: 127.0.0.1:" in heads[0]


async def test_an_http_1_0_answer_closes_its_connection() -> None:
    connections = 0

    def counted(handler: Handler) -> Handler:
        async def wrapper(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            await handler(reader, writer)

        return wrapper

    old = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    async with serve(counted(answering(old))) as (url, _):
        pool = Pool(url, None, environ={})
        assert await get(pool) == (200, b"{}")
        assert await get(pool) == (200, b"{}")
        await pool.close()
    assert connections == 2


async def test_a_gzip_body_is_undone_and_a_corrupt_one_refused() -> None:
    packed = gzip.compress(b'{"kind":"NodeList"}' * 1000)
    corrupt = packed[:20] + b"\x00" * 40 + packed[60:]
    async with serve(answering(ok(packed, "Content-Encoding: gzip"), ok(corrupt, "Content-Encoding: gzip"))) as (
        url,
        _,
    ):
        pool = Pool(url, None, environ={})
        assert await get(pool) == (200, b'{"kind":"NodeList"}' * 1000)
        with pytest.raises(HttpError, match="gzip"):
            await get(pool)
        await pool.close()


async def test_a_connection_the_server_closed_while_idle_is_not_used_again() -> None:
    connections = 0

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(ok(b"one"))
        await writer.drain()
        writer.close()  # a keep-alive answer, then the server closes the idle connection

    async with serve(once) as (url, _):
        pool = Pool(url, None, environ={})
        assert await get(pool) == (200, b"one")
        assert await get(pool) == (200, b"one")
        await pool.close()
    assert connections == 2


@pytest.mark.parametrize(("method", "resent"), [("GET", True), ("POST", False), ("PATCH", False)])
async def test_a_request_the_server_drops_unanswered_on_a_kept_connection(method: str, resent: bool) -> None:
    # The server's close races the request: the request finds the kept connection still open,
    # is written, and sees the close before any byte of an answer. A read is sent again on a
    # new connection; a write, which the server may have received, is not.
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head, _ = await read_request(reader)
            seen.append(head.split(b" ")[0])
            if len(seen) == 1:
                writer.write(ok(b"first"))
                await writer.drain()
                head, _ = await read_request(reader)  # the second request: dropped unanswered
                seen.append(head.split(b" ")[0])
            else:
                writer.write(ok(b"again"))
                await writer.drain()
        finally:
            writer.close()

    async with serve(handler) as (url, _):
        pool = Pool(url, None, environ={})
        assert await get(pool) == (200, b"first")
        deadline = time.monotonic() + 5
        body = None if method == "GET" else b"{}"
        if resent:
            response = await pool.request(method, "/p", {}, body, deadline=deadline, connect_timeout=5)
            assert (response.status, await response.read(deadline)) == (200, b"again")
        else:
            with pytest.raises(HttpError, match="closed the connection without answering"):
                await pool.request(method, "/p", {}, body, deadline=deadline, connect_timeout=5)
        await pool.close()
    assert seen == [b"GET", method.encode(), *([method.encode()] if resent else [])]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "malformed status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "malformed Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n", "malformed chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX", "chunk does not end with CRLF"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "bytes of the body to come"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_HEADER_BYTES + b"\r\n\r\n", "headers exceed"),
        (b"HTTP/1.1 2", "ended in its status line"),
    ],
)
async def test_a_malformed_answer_is_an_http_error(answer: bytes, message: str) -> None:
    async with serve(answering(answer, close=True)) as (url, _):
        pool = Pool(url, None, environ={})
        with pytest.raises(HttpError, match=message):
            await get(pool)
        await pool.close()


async def test_no_answer_within_the_deadline_is_an_http_error() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    async with serve(silent) as (url, _):
        pool = Pool(url, None, environ={})
        began = time.monotonic()
        with pytest.raises(HttpError, match=r"no answer within 0\.3s"):
            await get(pool, seconds=0.3)
        assert time.monotonic() - began < 3
        await pool.close()


async def test_nothing_listening_is_an_http_error() -> None:
    server = await asyncio.start_server(answering(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(HttpError, match=f"cannot connect to http://127.0.0.1:{port}"):
        await get(Pool(f"http://127.0.0.1:{port}", None, environ={}))


async def test_a_streamed_body_comes_as_lines_and_a_silent_stream_fails() -> None:
    event = b'{"type":"ADDED","object":{"big":"' + b"x" * 300_000 + b'"}}\n'
    chunks = [event[:7], event[7:200_000], event[200_000:] + b'{"type":"BOOKMARK"}\n']
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)

    async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
        await writer.drain()
        await reader.read()  # then silence, the connection held open
        writer.close()

    async with serve(stream) as (url, _):
        pool = Pool(url, None, environ={})
        response = await pool.request("GET", "/w", {}, None, deadline=None, connect_timeout=5, read_timeout=5)
        lines: list[bytes] = []

        async def follow() -> None:
            async for line in response.lines(0.3):
                lines.append(line)

        with pytest.raises(HttpError, match=r"no answer within 0\.3s"):
            await follow()
        response.release()
        assert lines == [event[:-1], b'{"type":"BOOKMARK"}']
        await pool.close()


async def test_a_header_value_with_a_line_break_is_refused_unsent() -> None:
    heads: list[bytes] = []
    async with serve(answering(ok(b""), heads=heads)) as (url, _):
        pool = Pool(url, None, environ={})
        deadline = time.monotonic() + 5
        with pytest.raises(HttpError, match="line break"):
            await pool.request(
                "GET", "/", {"Authorization": "Bearer t\r\nX: y"}, None, deadline=deadline, connect_timeout=5
            )
        await pool.close()
    assert heads == []


async def test_https_goes_through_the_proxy_by_connect() -> None:
    asked: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        asked.append(head)
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async with serve(proxy) as (proxy_url, _):
        environ = {"HTTPS_PROXY": proxy_url.replace("http://", "http://user:p%40ss@")}
        pool = Pool("https://api.example.test:6443", None, environ=environ)
        with pytest.raises(HttpError, match=r"the proxy refused CONNECT api\.example\.test:6443: HTTP 403"):
            await get(pool)
    assert asked[0].startswith(b"CONNECT api.example.test:6443 HTTP/1.1\r\n")
    assert b"Proxy-Authorization: Basic dXNlcjpwQHNz" in asked[0]


@pytest.mark.parametrize(
    ("no_proxy", "host", "bypassed"),
    [
        ("", "api.example.com", False),
        ("*", "api.example.com", True),
        ("example.com", "api.example.com", True),
        (".example.com", "api.example.com", True),
        ("*.example.com", "example.com", True),
        ("ample.com", "api.example.com", False),
        ("api.example.com:6443", "api.example.com", True),
        ("api.example.com:443", "api.example.com", False),
        ("10.96.0.0/12", "10.96.0.1", True),
        ("10.96.0.0/12", "10.200.0.1", False),
        ("10.96.0.0/12", "api.example.com", False),
        ("localhost, 10.0.0.1", "10.0.0.1", True),
    ],
)
def test_no_proxy(no_proxy: str, host: str, bypassed: bool) -> None:
    environ = {"https_proxy": "http://proxy.internal:3128", "NO_PROXY": no_proxy}
    found = proxy_for("https", host, 6443, environ)
    assert (found is None) == bypassed
    if not bypassed:
        assert found == ("proxy.internal", 3128, "")


def test_a_proxy_of_another_scheme_is_refused() -> None:
    with pytest.raises(HttpError, match="unsupported proxy"):
        proxy_for("https", "api", 443, {"HTTPS_PROXY": "socks5://proxy:1080"})
    assert proxy_for("https", "api", 443, {"HTTP_PROXY": "http://proxy:1"}) is None


async def test_closing_the_pool_ends_a_stream_in_use() -> None:
    async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{}\n\r\n")
        await writer.drain()
        await reader.read()
        writer.close()

    async with serve(stream) as (url, _):
        pool = Pool(url, None, environ={})
        response = await pool.request("GET", "/w", {}, None, deadline=None, connect_timeout=5, read_timeout=5)
        lines = response.lines(20)
        assert await anext(lines) == b"{}"
        began = time.monotonic()
        await pool.close()
        with pytest.raises(HttpError):
            await anext(lines)
        assert time.monotonic() - began < 5
        response.release()
