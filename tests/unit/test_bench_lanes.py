"""bench/lanes.py: the floors' bare client holds at most ``count`` requests in flight, one
connection each, and one request after another reuses one warm connection (so a sequential floor
pays no new TLS handshakes). Against a real HTTP/1.1 server on loopback."""

import asyncio
import ssl
from collections import Counter
from dataclasses import dataclass, field

from bench.lanes import Lanes


@dataclass
class Server:
    """An HTTP/1.1 keep-alive server that counts requests per connection and in flight, holding
    every request until ``release`` is set."""

    hold_until: int
    in_flight: int = 0
    most_in_flight: int = 0
    per_connection: Counter[int] = field(default_factory=Counter)
    full: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = id(writer)
        while line := await reader.readline():
            length = 0
            while (header := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = header.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            self.per_connection[connection] += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            if self.in_flight >= self.hold_until:
                self.full.set()
            await self.release.wait()
            self.in_flight -= 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
            assert line.startswith(b"PATCH ")
        writer.close()


async def lanes_against(server: Server, count: int) -> tuple[Lanes, asyncio.Server]:
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    lanes = Lanes(
        count, base_url=f"http://127.0.0.1:{port}", verify=ssl.create_default_context(), headers={}, timeout=30
    )
    return lanes, listening


async def test_lanes_hold_at_most_their_count_in_flight_one_connection_each() -> None:
    server = Server(hold_until=4)
    lanes, listening = await lanes_against(server, 4)
    async with listening:
        sent = asyncio.gather(*(lanes.request("PATCH", f"/n/{i}", content="{}") for i in range(10)))
        await server.full.wait()
        server.release.set()
        answers = await sent
        await lanes.aclose()
    assert [a.status_code for a in answers] == [200] * 10
    assert server.most_in_flight == 4
    assert len(server.per_connection) == 4
    assert sum(server.per_connection.values()) == 10


async def test_one_request_after_another_reuses_one_connection() -> None:
    server = Server(hold_until=1)
    server.release.set()
    lanes, listening = await lanes_against(server, 8)
    async with listening:
        for i in range(6):
            assert (await lanes.request("PATCH", f"/n/{i}", content="{}")).status_code == 200
        await lanes.aclose()
    assert list(server.per_connection.values()) == [6]
