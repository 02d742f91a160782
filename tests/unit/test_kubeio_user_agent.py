"""Every request kubeio sends names its component and Signal's version in ``User-Agent``
(issue 45 §4): reads, writes and watches of the real client, read off the wire by a small
HTTP server on loopback made here. The services' entry points name themselves."""

import asyncio
import re
import ssl
import tomllib
from pathlib import Path

import pytest

from kubeio.client import Kube, user_agent
from kubeio.transport import Endpoint
from shared.version import VERSION

REPO = Path(__file__).resolve().parents[2]
PATH = "/api/v1/namespaces/ns/configmaps"


async def heads_of(component: str) -> list[dict[str, str]]:
    """The request heads a Kube of ``component`` sends for a GET, a POST, a merge PATCH, a
    DELETE and a WATCH."""
    heads: list[dict[str, str]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readuntil(b"\r\n")
                fields = {"": line.decode().strip()}
                while (header := await reader.readuntil(b"\r\n")) != b"\r\n":
                    name, _, value = header.decode().partition(":")
                    fields[name.strip().lower()] = value.strip()
                await reader.readexactly(int(fields.get("content-length", "0")))
                heads.append(fields)
                body = b'{"metadata": {"name": "a", "resourceVersion": "1"}}'
                if b"watch=true" in line:
                    event = b'{"type": "ADDED", "object": ' + body + b"}\n"
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    kube = Kube(Endpoint(f"http://127.0.0.1:{port}", ssl.create_default_context()), field_manager=component)
    try:
        await kube.get(f"{PATH}/a")
        await kube.create(PATH, {"metadata": {"name": "a"}})
        await kube.merge_patch(f"{PATH}/a", {"data": {"k": "v"}})
        await kube.delete(f"{PATH}/a")
        async for _ in kube.watch(PATH, resource_version="1"):
            break
    finally:
        await kube.close()
        server.close()
        await server.wait_closed()
    return heads


@pytest.mark.parametrize("component", ["signal-controller", "signal-adapter", "signal-portal", "signalctl"])
async def test_every_request_carries_the_components_user_agent(component: str) -> None:
    heads = await heads_of(component)
    assert [h[""].split()[0] for h in heads] == ["GET", "POST", "PATCH", "DELETE", "GET"]
    assert "watch=true" in heads[-1][""]
    expected = f"{component}/{VERSION} (kubeio; python/3.11)"
    assert user_agent(component) == expected
    assert [h.get("user-agent") for h in heads] == [expected] * len(heads)


@pytest.mark.parametrize(
    ("entry", "component"),
    [
        ("controller/process/main.py", "signal-controller"),
        ("adapter/main.py", "signal-adapter"),
        ("portal/main.py", "signal-portal"),
        ("signalctl/kubectx.py", "signalctl"),
    ],
)
def test_each_component_connects_under_its_own_name(entry: str, component: str) -> None:
    text = (REPO / entry).read_text()
    names = set(re.findall(r'field_manager="([^"]+)"', text)) | set(re.findall(r'FIELD_MANAGER = "([^"]+)"', text))
    assert names == {component}


def test_the_version_is_the_distributions() -> None:
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] == VERSION
