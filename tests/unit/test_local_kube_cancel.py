"""The local cluster's raw-JSON client (localcluster/kube.py, the chaos campaign's recorder,
injector and simulated kubelet) closes its socket when a request is cancelled during the TLS
handshake.

The short chaos campaign used to ignore a ResourceWarning "unclosed transport" found by the
garbage collector: httpcore closes a new connection's TCP stream when its TLS handshake raises
an Exception, not when the task is cancelled (a CancelledError is a BaseException). In the
campaign a task is cancelled mid-handshake whenever a fault has the API server restarting or
slow to answer (a deleted Pod's kubelet task, the recorder's watches at the end). The server
here is a real listening socket that accepts and never completes the handshake: what is under
test is the client's own cleanup, which no API server enforces.
"""

import asyncio
import gc
import ssl
import warnings
from pathlib import Path

import certifi

from localcluster.kube import KubeClient


async def _cancel_mid_handshake() -> bytes:
    """What the server read from a connection whose client cancelled its TLS handshake, up to
    the client's close (which must come without the garbage collector's help)."""
    accepted: asyncio.Queue[asyncio.StreamReader] = asyncio.Queue()
    writers: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await accepted.put(reader)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = KubeClient(f"https://127.0.0.1:{port}", "token", Path(certifi.where()))
    try:
        request = asyncio.create_task(client.get("/api"))
        reader = await asyncio.wait_for(accepted.get(), 30)
        hello = await asyncio.wait_for(reader.readexactly(5), 30)  # the ClientHello's record header
        assert hello[0] == 0x16, hello  # a TLS handshake record: the client is in its handshake
        request.cancel()
        done, _ = await asyncio.wait([request], timeout=30)
        assert done, "the cancelled request did not end"
        assert request.cancelled()
        gc.disable()  # the close must be the client's own, not the collector's
        try:
            async with asyncio.timeout(10):
                return hello + await reader.read()  # to EOF: the client closed its socket
        except TimeoutError:
            raise AssertionError(
                "the client's socket was still open 10 s after its request was cancelled mid-handshake "
                "(left to the garbage collector: 'unclosed transport')"
            ) from None
        finally:
            gc.enable()
    finally:
        await client.close()
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_request_cancelled_during_the_tls_handshake_closes_its_socket() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        sent = await _cancel_mid_handshake()
        gc.collect()
    assert sent[:1] == b"\x16"
    leaks = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
    assert leaks == []


def test_the_client_still_verifies_the_server_with_its_ca() -> None:
    """The transport built for the closing backend keeps the client's TLS context."""
    client = KubeClient("https://127.0.0.1:1", "token", Path(certifi.where()))
    pool = client._http._transport._pool  # type: ignore[attr-defined]
    assert pool._ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert pool._ssl_context.check_hostname
    assert pool._max_connections == 64
