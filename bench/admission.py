"""Benchmark (issue 15, goals 1-4 and 7-8): admission by the real controller process running as
its ServiceAccount on the local control plane, against floors measured in the same run.

One local cluster; the fleet is first 1/``factor`` of ``--nodes``, then grown to ``--nodes``.
At each size, with a fresh controller and a profile of its own:

* cold start (goal 3): controller process start -> its caches synced (its own log line), and
  its resident memory;
* latency (goal 1): request (labelling ``--group`` Nodes at once) -> the Run's status PATCH to
  Running (after every Node PATCH and the Workflow's create), read from the controller's
  request log (time, verb, path per request) and cut there (goal 7: nothing the Run does once
  Running is counted); the median of ``LATENCY_REPEATS`` groups requested one after the other
  (one alone swung 0.46-1.00 s between runs of the same code); the first one's requests by verb;
* throughput (goal 2, ``--groups``): that many groups requested at once -> every one of their
  Runs Running; writes per group, LIST calls, writes per second; the CPU seconds of the
  controller, kube-apiserver, etcd and the bench's requester in that window (bench/cpu.py);
  and the same window's writes by a bare client (bench/throughput_floor.py). By default
  (``--requester backlog``) the groups' Nodes are all requested before their profile exists and
  the window is the profile's create -> the last Run's Running PATCH: Signal's work alone;
  ``--requester concurrent`` labels them while the controller admits (the window then holds the
  requester's label writes, and the bare client's floor of that window is measured too);
* pure selection (goal 4): ``--group`` of every Node requested, median of 20;
* goal 3 as the issue words it (bench/history.py): the namespace's Runs topped up to ``--runs``
  with finished ones and their evidence ConfigMaps, then a fresh controller started with a group
  requested: start -> caches synced, start -> that group's Run Running, its RSS then.

The API write floor (bench/floors.py) makes the same number of conditional Node PATCHes and the
same number of other writes as the latency window held; the request-window floor
(bench/window_floor.py) adds the requester's label PATCHes in front of them, as the window
holds them. Each window's writes are printed by kind; the leader's Lease renewals in them are
time-based (one every few seconds, whatever the work), shown apart. Growth (goal 8) compares
both sizes.

    .venv/bin/python bench/admission.py [--nodes 2000] [--group 64] [--groups 4] [--factor 10]
    (the issue's full sizes: --nodes 10000 --groups 100; the small run requests
    max(1, groups/factor) groups at once)
"""

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.admission_report import Figures, goals, issue47, report
from bench.cpu import CpuWindow, processes
from bench.floors import Bare, api_write_floor, rss_mib
from bench.history import add_history, cold_start
from bench.polling import runs_of, wait_for
from bench.requestlog import (
    Request,
    RequestLog,
    RequestTail,
    admission_phases,
    new_runs_status_cut,
    running_cut,
    writes,
)
from bench.throughput_floor import throughput_window_floor
from bench.window_floor import request_window_floor, write_kinds
from controller.rules.nodes import node_view
from controller.rules.requested import RequestIndex
from controller.rules.selection import select_participants
from kubeio.client import MERGE_PATCH
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import Obj, resource_path
from shared import keys
from shared.profile import CertificationProfile
from tests.controller_support import ControllerProcess, World, profile_body

REQUESTER_CONCURRENCY = 64
"""Request label PATCHes the bench's requester has in flight at once: a whole group of 64 at
once; 100 groups (6,400 PATCHes) left unbounded stall the requester's own HTTP pool. The requester
is a bare client of that many lanes (bench/lanes.py): the test suite's admin client, one pooled
httpx client, spent 0.2-0.27 s of CPU on 64 label PATCHes at once, inside goal 1's window."""
LATENCY_REPEATS = 3
"""Goal 1's groups, requested one after the other; its figure is their median."""


def spread(names: list[str], count: int, offset: int = 0) -> list[str]:
    step = max(1, len(names) // count)
    return [names[(offset + i * step) % len(names)] for i in range(count)]


async def request_all(requester: Bare, profile: str, names: list[str]) -> None:
    """Label every one of ``names`` for ``profile`` (unconditional merge patches, as an operator's
    ``kubectl label``), as many at a time as ``requester`` has lanes."""
    label = {"metadata": {"labels": {keys.CERTIFY_LABEL: profile}}}
    paths = [resource_path("v1", "nodes", name=n) for n in names]
    await asyncio.gather(*(requester.call("PATCH", p, label, MERGE_PATCH) for p in paths))


async def measure(
    cluster: LocalCluster,
    world: World,
    workdir: Path,
    names: list[str],
    group: int,
    groups: int,
    tag: str,
    backlog: bool,
    repeats: int = LATENCY_REPEATS,
) -> Figures:
    namespace = world.namespace
    profile = f"bench-{tag}"
    await world.add_profile(lasting_profile(profile, namespace, group))
    workdir = workdir / tag
    workdir.mkdir()
    log = RequestLog(workdir / "requests.tsv")
    # The same identity each time (a restarted replica takes its own Lease back at once).
    # Workflows carry an Argo instanceID no Argo serves: the Runs stay Running, so nothing a
    # Run does after its admission (steps, acceptance, projection) reaches the windows.
    controller = ControllerProcess(
        cluster, namespace, workdir, resync=300, policies=tag == "small", workflow_instance_id="bench-held"
    )
    began = time.time()
    await controller.start(SIGNAL_REQUEST_LOG=str(log.path))
    try:
        async with Bare(cluster, connections=REQUESTER_CONCURRENCY) as requester:
            return await _measure(
                cluster, world, requester, controller, log, began, names, group, groups, profile, backlog, repeats
            )
    finally:
        controller.stop()


async def _measure(
    cluster: LocalCluster,
    world: World,
    requester: Bare,
    controller: ControllerProcess,
    log: RequestLog,
    began: float,
    names: list[str],
    group: int,
    groups: int,
    profile: str,
    backlog: bool,
    repeats: int,
) -> Figures:
    admin, namespace = cluster.admin, world.namespace

    async def synced() -> bool:
        return "caches synced" in controller.logs()

    synced_at = await wait_for("the controller's caches", synced)
    assert controller.process is not None
    pid = controller.process.pid

    async def ready() -> bool:
        body = await admin.get(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profile))
        return any(
            c["type"] == "Ready" and c["status"] == "True" for c in (body.get("status") or {}).get("conditions") or []
        )

    await wait_for(f"profile {profile} Ready", ready)
    rss_synced = rss_mib(pid)
    # Latency: ``repeats`` groups, one after the other (each Run stays Running); the figures are
    # the median latency's, the window's writes the first group's.
    attempts = []
    for attempt in range(repeats):
        chosen = spread(names, group, offset=attempt)
        t0 = time.time()
        await request_all(requester, profile, chosen)
        requested_at = time.time()

        async def running(count: int = attempt + 1) -> bool:
            phases = [(r.get("status") or {}).get("phase") for r in await runs_of(admin, namespace, profile)]
            return phases.count("Running") >= count

        observed = await wait_for("the Run Running", running) - t0
        requests = log.read()
        cut = running_cut(requests, t0)
        if cut is None:
            raise SystemExit(f"no Running status PATCH in the controller's request log {log.path}")
        phases = admission_phases(requests, t0, requested_at, cut)
        attempts.append((cut - t0, cut - requested_at, observed, RequestLog.window(requests, t0, cut), chosen, phases))
    latency, after_request, observed, _, _, phases = sorted(attempts, key=lambda a: a[0])[len(attempts) // 2]
    window = attempts[0][3]
    verbs = RequestLog.verbs(window)
    node_patches = sum(1 for r in window if r.verb == "PATCH" and r.path.startswith("/api/v1/nodes/"))
    figures = Figures(
        nodes=len(names),
        cold_start=synced_at - began,
        rss_synced=rss_synced,
        latency=latency,
        after_request=after_request,
        observed=observed,
        window_verbs=dict(sorted(verbs.items())),
        window_writes=writes(window),
        node_patches=node_patches,
        other_writes=writes(window) - node_patches,
        rss_after=rss_mib(pid),
        requested=tuple(n for a in attempts for n in a[4]),
        window_kinds=dict(sorted(write_kinds(window).items())),
        latencies=tuple(a[0] for a in attempts),
        phases=phases,
    )
    # Throughput: ``groups`` groups at once, on Nodes not yet requested.
    if groups:
        free = [n for n in names if n not in set(figures.requested)]
        wanted = spread(free, group * groups, offset=1)
        if backlog:
            await _backlog(world, requester, log, pid, profile, wanted, group, groups, figures)
        else:
            await _concurrent(world, requester, log, pid, profile, wanted, groups, figures)
        figures.requested += tuple(wanted)
    figures.rss_after = rss_mib(pid)
    return figures


@dataclass
class NewRuns:
    """The Runs a throughput window's groups create: those not there at its start, found in the
    controller's request log read as it grows (no LIST of Runs competing with the controller)."""

    existing: set[str]
    tail: RequestTail

    @classmethod
    async def start(cls, world: World, log: RequestLog) -> "NewRuns":
        tail = RequestTail(log)
        tail.read()  # what the controller sent so far is before the window
        return cls({r["metadata"]["name"] for r in await world.runs()}, tail)

    async def running(self, since: float, groups: int, what: str) -> tuple[float, float]:
        """Wait until ``groups`` new Runs' Running PATCHes were sent after ``since``: when polling
        saw it, and the time of the last of them (the window's end)."""

        async def all_running() -> bool:
            return new_runs_status_cut(self.tail.read(), since, groups, self.existing) is not None

        polled = await wait_for(what, all_running, timeout=60.0 + 5.0 * groups)
        done = new_runs_status_cut(self.tail.seen, since, groups, self.existing)
        assert done is not None
        return polled, done


async def _concurrent(
    world: World,
    requester: Bare,
    log: RequestLog,
    pid: int,
    profile: str,
    wanted: list[str],
    groups: int,
    figures: Figures,
) -> None:
    """The window from the first of the groups' request writes to their last Run's Running PATCH,
    the requester labelling them as the controller admits them."""
    # The groups' Runs are the new ones: the latency's Runs of the same profile stay Running
    # (LATENCY_REPEATS of them), so counting the profile's Running Runs ended the window before
    # the last groups were admitted (1 group of 64: 3 writes in the window).
    runs = await NewRuns.start(world, log)
    cpu = CpuWindow(processes({"controller": pid, "bench (requester)": os.getpid()})).begin()
    t1 = time.time()
    await request_all(requester, profile, wanted)
    requested_at_all = time.time()
    polled, done = await runs.running(t1, groups, f"{groups} more Runs of {profile} Running")
    cpu.end()
    requests = runs.tail.seen
    after = RequestLog.window(requests, requested_at_all, done)
    figures.after_request_seconds = done - requested_at_all
    figures.after_request_writes = writes(after)
    _throughput(figures, RequestLog.window(requests, t1, done), groups, done - t1, cpu.describe(polled - t1))


async def _backlog(
    world: World,
    requester: Bare,
    log: RequestLog,
    pid: int,
    profile: str,
    wanted: list[str],
    group: int,
    groups: int,
    figures: Figures,
) -> None:
    """The groups requested at once as the issue words it: every one of their Nodes labelled for a
    profile that does not exist yet (the controller has nothing to admit them to), then the
    profile created; the window is that create -> the last of their Runs' Running PATCH, so it
    holds Signal's work alone (verifying the profile, admitting every group), none of the
    requester's label writes. Its end is found in the controller's request log, read as it grows
    (no LIST of Runs competing with the controller in the window)."""
    many = f"{profile}-backlog"
    began = time.monotonic()
    await request_all(requester, many, wanted)
    print(f"  backlog: {len(wanted)} Nodes requested for {many} (not yet created) in {time.monotonic() - began:.1f}s")
    runs = await NewRuns.start(world, log)
    cpu = CpuWindow(processes({"controller": pid, "bench (requester)": os.getpid()})).begin()
    t1 = time.time()
    await world.add_profile(lasting_profile(many, world.namespace, group))
    polled, done = await runs.running(t1, groups, f"{groups} Runs of {many} Running")
    cpu.end()

    async def stored_running() -> bool:  # after the window: the PATCHes' outcome as stored
        phases = [(r.get("status") or {}).get("phase") for r in await runs_of(world.admin, world.namespace, many)]
        return phases.count("Running") >= groups

    await wait_for(f"{groups} Runs of {many} stored Running", stored_running, timeout=60.0)
    _throughput(figures, RequestLog.window(runs.tail.seen, t1, done), groups, done - t1, cpu.describe(polled - t1))
    figures.backlog = True


def _throughput(figures: Figures, window: list[Request], groups: int, seconds: float, cpu: str) -> None:
    figures.groups = groups
    figures.throughput_seconds = seconds
    figures.throughput_writes = writes(window)
    figures.throughput_lists = RequestLog.verbs(window)["LIST"]
    figures.throughput_kinds = dict(sorted(write_kinds(window).items()))
    figures.throughput_cpu = cpu


def lasting_profile(name: str, namespace: str, group: int) -> Obj:
    """The bench's profile, whose Runs outlive the whole bench: their Workflows are never run
    (an Argo instanceID no Argo serves), so each Run stays Running until its suite deadline, and
    at 100,000 Nodes the small size's Runs would reach theirs (17 minutes with the tests'
    deadlines) in the full size's throughput window, ending, projecting and releasing there."""
    body = profile_body(name, namespace, group)
    for check in body["spec"]["checks"]:
        check["backendActiveDeadline"] = "12h"
    return body


async def selection_ms(admin, group: int) -> tuple[float, float, int]:  # type: ignore[no-untyped-def]
    """Median ms to choose ``group`` of every Node requested: with every Node free (goal 4's
    case), then with the reservations the bench's Runs hold (for the record), and how many."""
    listing = await admin.get(resource_path("v1", "nodes"))
    body = profile_body("bench-select", "bench", group)
    body["metadata"]["uid"] = "x"
    model = CertificationProfile.model_validate(body)

    def requested(node: Obj, *, free: bool) -> Obj:
        labels = {**node["metadata"].get("labels", {}), keys.CERTIFY_LABEL: "bench-select"}
        spec = node.get("spec") or {}
        if free:  # as a Node no Run holds: no reservation label and no reservation taint
            labels.pop(keys.RESERVED_BY_LABEL, None)
            taints = [t for t in spec.get("taints") or [] if t.get("key") != keys.RESERVED_TAINT_KEY]
            spec = {**spec, "taints": taints}
        return {**node, "metadata": {**node["metadata"], "labels": labels}, "spec": spec}

    def median_ms(views: list) -> float:  # type: ignore[type-arg]
        # As the controller selects: its cache keyed by Node, the requested Nodes kept in order
        # from the cache's events (controller/rules/requested.py: that upkeep is per event, not here).
        cache = {f"/{v.name}": v for v in views}
        index = RequestIndex()
        for key, view in cache.items():
            index.on_node(key, None, view)
        timings = []
        for _ in range(20):
            t = time.perf_counter()
            select_participants(cache.values(), model, set(), [], in_order=index.in_order("bench-select", cache))
            timings.append(time.perf_counter() - t)
        return statistics.median(timings) * 1000

    free = [node_view(requested(n, free=True)) for n in listing["items"]]
    held = [node_view(requested(n, free=False)) for n in listing["items"]]
    return median_ms(free), median_ms(held), sum(1 for v in held if v.reservation is not None)


async def main(total: int, group: int, groups: int, factor: int, runs: int, requester: str) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="signal-bench-"))
    small_groups = max(1, groups // factor) if groups else 0
    small = max(group * (small_groups + 2), total // factor)
    # No heartbeat within a run (this local cluster runs no node lifecycle controller, so Nodes
    # stay Ready): at 10,000 Nodes a heartbeat patching every Node mid-floor made the floor's
    # conditional PATCHes conflict.
    async with LocalCluster(heartbeat_seconds=24 * 3600) as cluster:
        admin = cluster.admin
        namespace = "bench"
        await cluster.create_namespace(namespace)
        world = World(cluster, admin, namespace)
        await world.setup()
        fleet = [SimNode(f"gpu-{i:05d}", zone=f"zone-{i % 4}", labels={"pool": "gpu"}) for i in range(total)]
        results = []
        for size, tag in ((small, "small"), (total, "full")):
            have = len(results[-1][1]) if results else 0
            began = time.monotonic()
            await cluster.add_nodes(fleet[have:size], concurrency=64)
            print(f"fleet: {size} Nodes ({size - have} created in {time.monotonic() - began:.1f}s)")
            planes = {n: rss_mib(p) for n, p in cluster.plane.pids().items() if n in ("kube-apiserver", "etcd")}
            print("  RSS at this size: " + ", ".join(f"{n} {mib:.0f} MiB" for n, mib in sorted(planes.items())))
            names = [n.name for n in fleet[have:size]]  # Nodes no earlier measurement requested
            at_once = small_groups if tag == "small" else groups
            # As many latency groups as the size holds beside the throughput groups (1/10 of 2,000
            # Nodes holds two).
            repeats = max(1, min(LATENCY_REPEATS, len(names) // group - at_once))
            figures = await measure(
                cluster, world, workdir, names, group, at_once, tag, requester == "backlog", repeats
            )
            figures.nodes = size
            figures.selection_ms, figures.selection_reserved_ms, figures.reserved = await selection_ms(admin, group)
            results.append((figures, [n.name for n in fleet[:size]]))
            report(figures, group)
        full, names = results[-1]
        small_figures = results[0][0]
        taken = {n for figures, _ in results for n in figures.requested}
        never = [n for n in names if n not in taken]  # never requested: no Run holds them
        idle = never[: full.node_patches]
        every = (await admin.get(resource_path("v1", "nodes")))["items"]
        total_runs, live = await add_history(cluster, world, every, runs, group)
        cold = await cold_start(cluster, world, workdir / "cold", "bench-full", never[-group:], total_runs, live)
        print(cold.describe())
        floor = await api_write_floor(cluster, idle, full.other_writes, namespace)
        print(floor.describe())
        whole = await request_window_floor(cluster, idle, full.other_writes, namespace)
        print(whole.describe())
        throughput = None
        if full.groups and not full.backlog:
            wanted = list(full.requested[group:])  # the throughput window's Nodes, in request order
            chunks = [wanted[i : i + group] for i in range(0, len(wanted), group)]
            others = round((full.throughput_writes - full.throughput_renewals) / full.groups) - group
            throughput = await throughput_window_floor(
                cluster, chunks, others, namespace, requester_concurrency=REQUESTER_CONCURRENCY
            )
            print(throughput.describe())
        goals(full, small_figures, floor, whole, cold, group, throughput)
        issue47(full, floor, cold, group)
    shutil.rmtree(workdir, ignore_errors=True)  # kept when the run fails: its logs are named then


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--group", type=int, default=64)
    parser.add_argument("--groups", type=int, default=4, help="groups requested at once (throughput; 0: skip)")
    parser.add_argument("--factor", type=int, default=10, help="the small run is 1/factor of --nodes")
    parser.add_argument("--runs", type=int, default=500, help="Runs (with evidence) present at goal 3's cold start")
    parser.add_argument(
        "--requester",
        choices=("backlog", "concurrent"),
        default="backlog",
        help="goal 2's groups: every Node requested before their profile exists, then the profile created "
        "(backlog: Signal's work alone), or requested while the controller admits them (concurrent)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.group, args.groups, args.factor, args.runs, args.requester))
