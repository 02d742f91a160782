"""Benchmark (issue 47): the admission ledger's part of one admission, with ``--groups`` groups
already under test, on the real local API server.

An admission reads the ledger (its decision), adds its group with a compare-and-swap, and reads
it again (the re-read before any Node is written): that is what is timed here, through the
controller's own context (controller/reconcile/state.py), head and segments.

In the same run, interleaved round by round:
* **floor:** a bare GET, PUT (conditioned on the resourceVersion) and GET of a ConfigMap of a
  few bytes, by the same client: what any compare-and-swap point costs here;
* **one ConfigMap (before):** the ledger as it was until 2026-12-07, every group's profile and
  Node names inline in one ConfigMap, read and parsed, rewritten whole and read again.

Prints, per layout: the time per admission (median and p90), the bytes the head (or the one
ConfigMap) holds, and how many groups of this size the 1 MiB of a ConfigMap would hold. Asserts
nothing timed.

    .venv/bin/python bench/ledger.py [--groups 1000] [--group-size 64] [--name-length 9] [--admissions 40]
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.floors import row
from controller.reconcile.state import Context
from controller.rules.ledger import LEDGER_NAME, Group, parse_head
from kubeio.client import Kube, Obj, resource_path
from localcluster.cluster import LocalCluster

CONFIGMAP_LIMIT = 1024 * 1024
ROUNDS = 4


def node_name(i: int, length: int) -> str:
    return f"n-{i:0{max(1, length - 2)}d}"


def groups(count: int, size: int, length: int, first: int = 0) -> dict[str, Group]:
    return {
        f"gpu-basic-{g:010x}-1": Group("gpu-basic", tuple(node_name(g * size + k, length) for k in range(size)))
        for g in range(first, first + count)
    }


class Layout:
    """One way of keeping the ledger, timed by the same admissions."""

    name = ""

    async def prepare(self, live: dict[str, Group]) -> None: ...

    async def admit(self, run: str, group: Group) -> None: ...

    async def held_bytes(self) -> int: ...


class Segments(Layout):
    name = "segments (now)"

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.ctx = Context(kube, namespace, "bench-ledger")

    async def prepare(self, live: dict[str, Group]) -> None:
        await self.ctx.take_fence()
        ledger = await self.ctx.read_ledger()
        for run, group in live.items():  # one segment per write, as admission makes them
            ledger = ledger.with_group(run, group)
        await self.ctx.write_ledger(ledger)

    async def admit(self, run: str, group: Group) -> None:
        ledger = await self.ctx.read_ledger()
        await self.ctx.write_ledger(ledger.with_group(run, group))
        await self.ctx.read_ledger()

    async def held_bytes(self) -> int:
        head = await self.ctx.kube.get(self.ctx.ledger_path())
        return sum(len(v) for v in (head.get("data") or {}).values())


class OneConfigMap(Layout):
    """The layout before segments: ``groups`` inline, parsed and written whole."""

    name = "one ConfigMap (before)"

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.path = resource_path("v1", "configmaps", namespace, LEDGER_NAME)

    def _body(self, live: dict[str, Group], version: str | None) -> Obj:
        text = json.dumps({r: live[r].to_json() for r in sorted(live)}, sort_keys=True, separators=(",", ":"))
        metadata = {"name": LEDGER_NAME, **({"resourceVersion": version} if version else {})}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"fence": "1", "groups": text}}

    async def prepare(self, live: dict[str, Group]) -> None:
        await self.kube.create(resource_path("v1", "configmaps", self.namespace), self._body(live, None))

    async def _read(self) -> tuple[dict[str, Group], str]:
        head = parse_head(await self.kube.get(self.path))
        return dict(head.inline), head.resource_version

    async def admit(self, run: str, group: Group) -> None:
        live, version = await self._read()
        await self.kube.replace(self.path, self._body({**live, run: group}, version))
        await self._read()

    async def held_bytes(self) -> int:
        cm = await self.kube.get(self.path)
        return sum(len(v) for v in (cm.get("data") or {}).values())


class Floor(Layout):
    name = "floor"

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.path = resource_path("v1", "configmaps", namespace, "floor")

    async def prepare(self, live: dict[str, Group]) -> None:
        body = {"metadata": {"name": "floor"}, "data": {"n": "0"}}
        await self.kube.create(resource_path("v1", "configmaps", self.namespace), body)

    async def admit(self, run: str, group: Group) -> None:
        cm = await self.kube.get(self.path)
        await self.kube.replace(self.path, {**cm, "data": {"n": run}})
        await self.kube.get(self.path)

    async def held_bytes(self) -> int:
        return 0


async def timed(admit: Callable[[str, Group], Awaitable[None]], batch: dict[str, Group]) -> list[float]:
    seconds = []
    for run, group in batch.items():
        began = time.perf_counter()
        await admit(run, group)
        seconds.append(time.perf_counter() - began)
    return seconds


async def main(args: argparse.Namespace) -> int:
    live = groups(args.groups, args.group_size, args.name_length)
    async with LocalCluster(heartbeat_seconds=24 * 3600) as cluster:
        kube = await Kube.connect(kubeconfig=str(cluster.plane.admin_kubeconfig), field_manager="bench-ledger")
        try:
            layouts: list[Layout] = []
            for kind, namespace in ((Floor, "ledger-floor"), (Segments, "ledger-now"), (OneConfigMap, "ledger-before")):
                await cluster.create_namespace(namespace)
                layout = kind(kube, namespace)
                began = time.monotonic()
                await layout.prepare(live)
                print(f"{layout.name}: {len(live)} live groups written in {time.monotonic() - began:.1f}s")
                layouts.append(layout)
            times: dict[str, list[float]] = {layout.name: [] for layout in layouts}
            per_round = max(1, args.admissions // ROUNDS)
            first = args.groups
            for _ in range(ROUNDS):
                for layout in layouts:  # each round: every layout, the same number of new groups
                    batch = groups(per_round, args.group_size, args.name_length, first=first)
                    times[layout.name] += await timed(layout.admit, batch)
                first += per_round
            floor = statistics.median(times["floor"]) * 1000
            held_groups = first  # live before, and every group admitted since
            for layout in layouts:
                ms = sorted(t * 1000 for t in times[layout.name])
                held = await layout.held_bytes()
                ceiling = f" for {held_groups} groups: {CONFIGMAP_LIMIT * held_groups // held} per MiB" if held else ""
                p90 = ms[int(len(ms) * 0.9) - 1]
                print(f"{layout.name}: median {statistics.median(ms):.1f} ms, p90 {p90:.1f} ms; {held} bytes{ceiling}")
            for layout in layouts[1:]:
                figure = statistics.median(times[layout.name]) * 1000
                print(row(f"ledger per admission, {layout.name}", floor, figure, "ms", "(as small as the floor)"))
        finally:
            await kube.close()
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000, help="live groups before the admissions")
    parser.add_argument("--group-size", type=int, default=64)
    parser.add_argument("--name-length", type=int, default=9, help="characters of each Node name")
    parser.add_argument("--admissions", type=int, default=40, help="admissions timed per layout")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
