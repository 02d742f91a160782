"""kubeio/informer.py against watch streams that break in ways a real API server does not on
demand (a proxy or a dying server does): the real Kube client and Informer, over loopback, to a
small HTTP server made here that answers every LIST with one object and every WATCH with the
lines a test gives. The informer's waits are recorded instead of slept (``_sleep``): a test
reads what it waited and whether it said unsynced, at each wait, with no clock involved.

A stream answered and then broken at once, or ended at once without an event, must back off
and report the cache unsynced, and after a few such streams list again; a 410 Gone that comes
again at once must back off too. A stream that delivers events is never backed off."""

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kubeio.client import Kube
from kubeio.informer import RELIST_AFTER, Informer
from kubeio.transport import Endpoint

PATH = "/api/v1/namespaces/ns/configmaps"
WAITS = 5
"""Waits a test lets the informer make before it looks."""


def _obj(name: str, version: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(version)}}


def _line(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode() + b"\n"


@dataclass
class Server:
    """Answers LIST with object ``a`` at version 10 and each WATCH with ``watch(n)``'s lines."""

    watch: Callable[[int], list[bytes]]
    lists: int = 0
    watches: int = 0
    server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n")
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                if b"watch=true" in request:
                    self.watches += 1
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                    )
                    for piece in self.watch(self.watches):
                        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    writer.write(b"0\r\n\r\n")
                else:
                    self.lists += 1
                    body = json.dumps({"metadata": {"resourceVersion": "10"}, "items": [_obj("a", 10)]}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@dataclass
class Waits:
    """The informer's ``_sleep``: records each wait and whether the cache said synced then;
    after ``WAITS`` of them it parks the informer and sets ``done``."""

    informer: Informer[Any] | None = None
    delays: list[float] = field(default_factory=list)
    synced: list[bool] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, delay: float) -> None:
        assert self.informer is not None
        self.delays.append(delay)
        self.synced.append(self.informer.is_synced)
        if len(self.delays) >= WAITS:
            self.done.set()
            await asyncio.Event().wait()  # parked until the test stops the informer


@pytest.fixture
async def wire() -> AsyncIterator[Callable[[Callable[[int], list[bytes]]], Any]]:
    made: list[tuple[Server, Kube, Informer[Any]]] = []

    async def start(watch: Callable[[int], list[bytes]]) -> tuple[Server, Informer[Any], Waits]:
        server = Server(watch)
        server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = server.server.sockets[0].getsockname()[1]
        kube = Kube(Endpoint(f"http://127.0.0.1:{port}", ssl.create_default_context()), field_manager="test")
        informer: Informer[Any] = Informer(kube, PATH, lambda o: o)
        informer.max_backoff = 1e6  # uncapped within WAITS waits: each doubles, past any jitter
        waits = Waits(informer)
        informer._sleep = waits
        made.append((server, kube, informer))
        informer.start()
        return server, informer, waits

    yield start
    for server, kube, informer in made:
        await informer.stop()
        await kube.close()
        assert server.server is not None
        server.server.close()


async def _backed_off(server: Server, informer: Informer[Any], waits: Waits) -> None:
    """The informer waited WAITS times, longer each time, unsynced at every wait."""
    try:
        await asyncio.wait_for(waits.done.wait(), timeout=15)
    except TimeoutError:
        pytest.fail(f"no backoff: {server.watches} watches and {server.lists} lists, waits {waits.delays}")
    assert waits.delays == sorted(waits.delays), waits.delays
    assert waits.delays[-1] > waits.delays[0]
    assert not any(waits.synced), "the cache said synced while it could not follow the server"
    assert informer.last_error
    assert server.watches <= 2 * WAITS + 2, f"{server.watches} watches for {WAITS} waits"


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(
            b'{"type":"MODIFIED","object":{"metadata":{"name":"b","namespace":"ns"}}}\n', id="no resourceVersion"
        ),
        pytest.param(b'{"type":"MODIFIED","obj\n', id="a garbled line"),
    ],
)
async def test_a_watch_answered_and_then_broken_backs_off_and_lists_again(wire: Any, broken: bytes) -> None:
    later = _line({"type": "ADDED", "object": _obj("c", 12)})
    server, informer, waits = await wire(lambda n: [broken, later])
    await _backed_off(server, informer, waits)
    assert server.lists >= 1 + (WAITS - 1) // RELIST_AFTER, "it never listed again: it replays what broke it"


async def test_a_watch_that_ends_at_once_without_an_event_backs_off(wire: Any) -> None:
    server, informer, waits = await wire(lambda n: [])
    await _backed_off(server, informer, waits)


async def test_a_gone_that_comes_again_at_once_backs_off(wire: Any) -> None:
    gone = _line({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "old"}})
    server, informer, waits = await wire(lambda n: [gone])
    await _backed_off(server, informer, waits)
    assert server.lists >= WAITS, "each Gone lists again"


async def test_a_watch_that_delivers_events_is_never_backed_off(wire: Any) -> None:
    """The control: each stream delivers one new object and ends; the informer follows them all
    without a wait."""
    wanted = 3 * RELIST_AFTER
    server, informer, waits = await wire(lambda n: [_line({"type": "ADDED", "object": _obj(f"o{n}", 10 + n)})])
    while len(informer.items) < 1 + wanted:
        informer.changed.clear()
        await asyncio.wait_for(informer.changed.wait(), timeout=15)
    assert waits.delays == []
    assert informer.is_synced
    assert server.lists == 1
