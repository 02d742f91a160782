"""kubeio's ``Kube.observe`` hook (the controller's ``signal_api_requests_total`` and
``signal_api_request_duration_seconds``, issue 45): called once per request sent, with the
verb as the API server's audit log names it, the HTTP code (``error`` when no answer came) and
the seconds it took; a watch once the server answered it. Read off the real client against a
small HTTP server on loopback made here, and against a port nothing listens on."""

import asyncio
import socket
import ssl

import pytest

from kubeio.client import Kube
from kubeio.errors import NotFound, TransportError
from kubeio.transport import Endpoint

PATH = "/api/v1/namespaces/ns/configmaps"


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """200 for everything except a GET of ``.../missing`` (404); a watch sends one event."""
    try:
        while True:
            line = await reader.readuntil(b"\r\n")
            length = 0
            while (header := await reader.readuntil(b"\r\n")) != b"\r\n":
                name, _, value = header.decode().partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            body = b'{"metadata": {"name": "a", "resourceVersion": "1"}}'
            if b"watch=true" in line:
                event = b'{"type": "ADDED", "object": ' + body + b"}\n"
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
            elif b"/missing " in line:
                status = b'{"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"}'
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(status), status))
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def test_each_request_is_observed_with_its_verb_and_code() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    kube = Kube(Endpoint(f"http://127.0.0.1:{port}", ssl.create_default_context()), field_manager="t", retries=0)
    seen: list[tuple[str, str, float]] = []
    kube.observe = lambda verb, code, seconds: seen.append((verb, code, seconds))
    try:
        await kube.get(PATH)
        await kube.get(f"{PATH}/a")
        await kube.create(PATH, {"metadata": {"name": "a"}})
        await kube.merge_patch(f"{PATH}/a", {"data": {}})
        await kube.request("POST", PATH, body={}, query={"dryRun": "All"})
        with pytest.raises(NotFound):
            await kube.get(f"{PATH}/missing")
        events = [e async for e in kube.watch(PATH, resource_version="1")]
    finally:
        await kube.close()
        server.close()
        await server.wait_closed()
    assert [e["type"] for e in events] == ["ADDED"]
    assert [(verb, code) for verb, code, _ in seen] == [
        ("LIST", "200"),
        ("GET", "200"),
        ("POST", "200"),
        ("PATCH", "200"),
        ("POST-DRYRUN", "200"),
        ("GET", "404"),
        ("WATCH", "200"),
    ]
    assert all(0 <= seconds < 10 for _, _, seconds in seen)


async def test_a_request_that_got_no_answer_is_observed_as_an_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kube = Kube(
        Endpoint(f"http://127.0.0.1:{port}", ssl.create_default_context()), field_manager="t", timeout=2.0, retries=0
    )
    seen: list[tuple[str, str]] = []
    kube.observe = lambda verb, code, _seconds: seen.append((verb, code))
    try:
        with pytest.raises(TransportError):
            await kube.get(PATH)
        with pytest.raises(TransportError):
            async for _ in kube.watch(PATH, resource_version="1"):
                pass
    finally:
        await kube.close()
    assert seen == [("LIST", "error"), ("WATCH", "error")]
