"""Benchmark (issue 6): the portal's result listing with 100,000 results (10,000 Nodes x 10
checks), through the real HTTP handler (aiohttp, loopback), without an API server: the index
is built directly from synthetic envelopes (classified, as the portal builds them).

Prints: time to build the index; p50 and p99 latency of a first page and of a last page of
100 results (an opaque continuation token pointing just before the last 100), and of one
filtered query; the fleet view the dashboard polls (/api/v1/fleet, 200 rows per check): its
first answer from a new index snapshot, then cached, then the first answer for a second
caller's sight (results only, no Node health: a slice of what the snapshot precomputed, in a
worker thread); the resident memory of the process before and after the index. Asserts nothing.

Also runs at 1/``--factor`` of the Nodes first and prints the growth; the fleet view answers
gzip-compressed (the wire size is printed beside the JSON's).

    .venv/bin/python bench/portal.py [--nodes 10000] [--checks 10] [--requests 300] [--factor 10]
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
from aiohttp import web

from bench.floors import growth, row
from portal.api import make_app
from portal.auth import Caller, OpenAccess
from portal.index import Entry, Index, RegisteredCheck, entry_of
from portal.pagination import encode_token
from portal.sight import EVERYTHING, Sight
from shared.classify import classified
from shared.envelope import (
    ENVELOPE_SCHEMA,
    CheckType,
    CheckVersion,
    CleanupState,
    EvidenceDigests,
    RunRef,
    Scope,
    State,
    TargetNode,
    ValidationResult,
    Verification,
    VerificationResult,
    result_id,
)
from shared.run import Phase, Verdict

NOW = datetime.now(UTC)
DIGEST = "sha256:" + "ab" * 32


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def synthetic(nodes: int, checks: int) -> list[Entry]:
    """One envelope per (Node, check): mostly verified passes, some failures, old and broken ones."""
    entries: list[Entry] = []
    details = {"schema": "projectsignal.dev/check-evidence/v1", "note": "shared per check in the real portal"}
    versions = CheckVersion.model_construct(profile_generation=3, source_digest=DIGEST)
    scope = Scope.model_construct(cluster="bench", workspace="signal-system")
    verified = VerificationResult.model_construct(state=Verification.VERIFIED, message="")
    missing = VerificationResult.model_construct(state=Verification.MISSING, message="no evidence ConfigMap")
    for n in range(nodes):
        node = f"gpu-{n:05d}"
        run_uid = f"{n // 2:08d}-run"
        run = RunRef.model_construct(
            namespace="signal-system",
            name=f"fleet-{n // 2}",
            uid=run_uid,
            attempt=1,
            phase=Phase.FAILED if n % 50 == 0 else Phase.SUCCEEDED,
            created=NOW - timedelta(hours=2),
        )
        for c in range(checks):
            finished = NOW - (timedelta(days=9) if n % 97 == 0 else timedelta(hours=1))
            result = ValidationResult.model_construct(
                schema_=ENVELOPE_SCHEMA,
                id=result_id("signal-system", node, "fleet", f"check-{c:02d}", run_uid),
                check=CheckType.model_construct(profile="fleet", name=f"check-{c:02d}", index=c),
                version=versions,
                run=run,
                scope=scope,
                target=TargetNode.model_construct(name=node, uid=f"uid-{n}", index=n % 2),
                started_at=finished - timedelta(minutes=5),
                finished_at=finished,
                observed_at=NOW,
                state=State.UNKNOWN,
                reason="Unclassified",
                message="",
                verdict=Verdict.FAIL if n % 50 == 0 and c == 3 else Verdict.PASS,
                verification=missing if n % 211 == 0 else verified,
                cleanup=CleanupState.COMPLETE,
                evidence=EvidenceDigests.model_construct(
                    config_map=f"fleet-{n // 2}-evidence", run_digest=DIGEST, check_digest=DIGEST
                ),
                details_schema="projectsignal.dev/check-evidence/v1",
                details=details,
            )
            final = classified(result, current_node_uid=f"uid-{n}", now=NOW, window=timedelta(days=7))
            entries.append(entry_of(final))
    return entries


class TwoCallers(OpenAccess):
    """``Bearer results``: results only (no Nodes, no profiles); anyone else: everything."""

    async def caller(self, authorization: str | None, remote: str = "") -> Caller:
        return Caller((authorization or "").removeprefix("Bearer "))

    async def sight(self, caller: Caller, workspaces: object) -> Sight:
        return Sight(frozenset({"signal-system"})) if caller.user == "results" else EVERYTHING


class Fixed:
    def __init__(self, index: Index) -> None:
        self.index = index

    def ready(self) -> bool:
        return True


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(session: aiohttp.ClientSession, url: str, requests: int) -> tuple[float, float, int]:
    samples = []
    items = 0
    for _ in range(requests):
        began = time.perf_counter()
        async with session.get(url) as response:
            raw = await response.read()  # the answer, decompressed; parsing it is the client's cost, not timed
            assert response.status == 200
        samples.append((time.perf_counter() - began) * 1000)
        items = len(json.loads(raw)["items"])
    return statistics.median(samples), percentile(samples, 0.99), items


async def main(nodes: int, checks: int, requests: int, factor: int) -> None:
    small = await run(max(1, nodes // factor), checks, requests)
    print()
    full = await run(nodes, checks, requests)
    print()
    results = nodes * checks
    print(row(f"6 fleet view fresh ({results:,} results)", None, full["fresh"], "ms", "<= 100 ms"))
    print(row("6 fleet view cached p99", None, full["cached_p99"], "ms", "<= 50 ms"))
    print(row("6 fleet view on the wire (gzip)", None, full["wire_kib"], "KiB", "well under 1024 KiB"))
    print(growth("index build", small["build"], full["build"], factor, "s"))
    print(growth("index memory", small["memory"], full["memory"], factor, "MiB"))
    print(growth("fleet view fresh", small["fresh"], full["fresh"], factor, "ms"))
    print(growth("fleet view cached p99", small["cached_p99"], full["cached_p99"], factor, "ms"))


async def run(nodes: int, checks: int, requests: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    before = rss_mib()
    began = time.perf_counter()
    entries = synthetic(nodes, checks)
    check_list = [RegisteredCheck("fleet", f"check-{c:02d}", c, "Pod", 3, DIGEST, 604800) for c in range(checks)]
    index = Index(entries, checks=check_list, node_uids={f"gpu-{n:05d}": f"uid-{n}" for n in range(nodes)})
    del entries
    built = time.perf_counter() - began
    after = rss_mib()
    counts = index.counts()
    runner = web.AppRunner(make_app(Fixed(index), TwoCallers()), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    base = f"http://127.0.0.1:{port}/api/v1/results?limit=100"
    last_token = encode_token(index.entries[len(index) - 101].key)
    print(f"results: {len(index):,} ({nodes:,} Nodes x {checks} checks); states: {counts}")
    print(f"index build (derive-free: classify + serialise + sort): {built:.1f} s")
    print(f"resident memory: {before:.0f} MiB before, {after:.0f} MiB with the index (+{after - before:.0f} MiB)")
    async with aiohttp.ClientSession() as session:
        for label, url in (
            ("first page of 100", base),
            ("last page of 100", f"{base}&continue={last_token}"),
            ("filtered: state=Failed", f"{base}&state=Failed"),
            ("one Node's results", f"{base}&node=gpu-05000"),
        ):
            await measure(session, url, 5)  # warm up
            p50, p99, items = await measure(session, url, requests)
            print(f"{label:<26} p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   ({items} items, {requests} requests)")
        fleet = f"http://127.0.0.1:{port}/api/v1/fleet?rows=200"
        began = time.perf_counter()
        async with session.get(fleet) as response:  # aiohttp's client accepts gzip
            size = len(await response.read())
            wire = int(response.headers.get("Content-Length", size))
            encoding = response.headers.get("Content-Encoding", "identity")
            assert response.status == 200
        cold = (time.perf_counter() - began) * 1000
        print(
            f"{'fleet view, first answer':<26} {cold:6.1f} ms ({size / 1024:.0f} KiB of JSON, "
            f"{wire / 1024:.0f} KiB on the wire ({encoding}), {checks} checks x 200 rows)"
        )
        p50, p99, items = await measure(session, fleet, requests)
        print(f"{'fleet view, cached':<26} p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   ({items} checks, {requests} calls)")
        figures.update(fresh=cold, cached_p99=p99, wire_kib=wire / 1024)
        began = time.perf_counter()
        async with session.get(fleet, headers={"Authorization": "Bearer results"}) as response:
            size = len(await response.read())
            assert response.status == 200
        other = (time.perf_counter() - began) * 1000
        print(f"{'fleet view, 2nd sight':<26} {other:6.1f} ms ({size / 1024:.0f} KiB, first answer for that sight)")
    print(f"resident memory after serving: {rss_mib():.0f} MiB")
    await runner.cleanup()
    figures.update(build=built, memory=max(0.1, after - before))
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--checks", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--factor", type=int, default=10, help="also run at 1/factor of --nodes (growth)")
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.checks, args.requests, args.factor))
