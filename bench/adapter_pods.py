"""Benchmark (issue 4): one Pod check with a trivial script over 64 participants on
simulated Nodes, run by the real adapter process as its ServiceAccount.

Prints: time from adapter start to the results (evidence) ConfigMap persisted; time from
then to every workload proven gone (the check-evidence ConfigMap is written right after
that proof); the adapter's API requests by verb; its peak resident memory. Asserts nothing.

Floors in the same run: the Pod fan-out floor on the same Nodes, with its client in a process of
its own that watches its Pods, as the adapter does (bench/fanout_floor.py: the GOAL lines); the
same floor as measured until 2026-12-04, its client in the benchmark's process beside the process
kubelet, polling (bench/floors.py, printed for the record); the same fan-out floor with each Pod
starting the runner's interpreter bare as the runner image starts it (``python -I -S -c pass``,
for the record: the Python start every participant pays, whatever the runner does); the step
floor. Then the whole again at 1/``--factor`` of the participants, for the growth.

Each size is measured ``--repeat`` times (Signal, then its floors, back to back) and the GOAL
lines give the medians: one run's floor alone swings by up to 2.5x here.

    .venv/bin/python bench/adapter_pods.py [--participants 64] [--factor 10] [--repeat 3]
        [--runner-launch OTHER_CHECKOUT/runner/launch.py]
"""

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cpu import CpuWindow, cpu_seconds, processes
from bench.fanout_floor import pod_fanout_floor_apart
from bench.floors import growth, pod_fanout_floor, row
from bench.goals import judged
from localcluster.cluster import LocalCluster
from localcluster.kube import resource_path
from localcluster.podprocess import IMAGE_ENTRYPOINTS, RUNNER_IMAGE
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from tests.adapter_support import AdapterWorld, check

GOAL_RATIO = 1.3
"""Issue 47 goal 5: Signal's 64-Pod check against its fan-out floor, by the median and in every repetition."""
BARE_INTERPRETER = (*IMAGE_ENTRYPOINTS[RUNNER_IMAGE][:-1], "-c", "pass")
"""The runner's interpreter with the runner image's flags (``-I -S``), running nothing."""


async def main(participants: int, factor: int, repeat: int) -> None:
    async with LocalCluster(heartbeat_seconds=300) as cluster:
        smalls, fulls = [], []
        for attempt in range(1, repeat + 1):
            print(f"--- repetition {attempt} of {repeat}")
            smalls.append(await run(cluster, max(1, participants // factor), f"bench-small-{attempt}"))
            print()
            fulls.append(await run(cluster, participants, f"bench-{attempt}"))
            print()
        small, full = medians(smalls), medians(fulls)
        ratios = [f["results"] / f["floor_succeeded"] for f in fulls]
        pairs = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"goal 5 ratio of each repetition (Signal and its floor measured back to back): {pairs}")
        spread = ", ".join(f"{f['floor_before'] / f['floor_succeeded']:.2f}" for f in fulls)
        print(f"the floor against itself in each repetition (before Signal / after Signal): {spread}")
        around = ", ".join(f"{2 * f['results'] / (f['floor_before'] + f['floor_succeeded']):.2f}" for f in fulls)
        print(f"Signal against the mean of the floor before and after it, in each repetition: {around}")
        bare = ", ".join(f"{f['results'] / f['interpreter_succeeded']:.2f}" for f in fulls)
        print(f"Signal against the bare-interpreter fan-out in each repetition: {bare}")
        print(f"the GOAL and GROWTH lines give the median of {repeat} repetitions of each figure")
        median = full["results"] / full["floor_succeeded"]
        line = row(
            f"5 adapter start -> results ({participants} Pods)",
            full["floor_succeeded"],
            full["results"],
            "s",
            "<= 1.3x the Pod fan-out floor (created -> all Succeeded), by the median and in every repetition",
        )
        print(judged(line, median <= GOAL_RATIO and max(ratios) <= GOAL_RATIO))
        print(
            row(
                "5 (vs created -> run -> deleted)",
                full["floor_gone"],
                full["total"],
                "s",
                "adapter start -> exit vs the whole fan-out floor",
            )
        )
        print(
            row(
                "5 (vs the in-process floor)",
                full["in_process_succeeded"],
                full["results"],
                "s",
                "for the record: the floor as measured until 2026-12-04, its client in the kubelet's process",
            )
        )
        print(
            row(
                "5 (vs the interpreter fan-out floor)",
                full["interpreter_succeeded"],
                full["results"],
                "s",
                "for the record: each floor Pod starts the runner's interpreter bare (python -I -S -c pass)",
            )
        )
        print(
            row(
                "5 (bare interpreters vs `true`)",
                full["floor_succeeded"],
                full["interpreter_succeeded"],
                "s",
                "for the record: what a Python start in every Pod costs before any runner code runs",
            )
        )
        print(growth("adapter start -> results", small["results"], full["results"], factor, "s"))
        print(growth("Pod fan-out floor", small["floor_succeeded"], full["floor_succeeded"], factor, "s"))
        print(growth("adapter total", small["total"], full["total"], factor, "s"))


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the repetitions: the floors alone swing by up to 2.5x from
    one run to the next on a shared two-core machine."""
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def process_started(pid: int) -> float:
    """A process's start (``time.time()`` seconds), from /proc: its start in clock ticks after
    boot, against the time since boot now (``btime`` is whole seconds: too coarse)."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.time() - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))


def _children_cpu() -> float:
    """User + system CPU seconds of this process's children that have exited and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _last_cpu(pid: int) -> float:
    """The CPU seconds of ``pid`` last seen while it ran, read every 20 ms until cancelled."""
    seen = 0.0
    try:
        while True:
            seen = max(seen, cpu_seconds(pid))
            await asyncio.sleep(0.02)  # sampling a process's CPU time, not waiting for an event
    except asyncio.CancelledError:
        return seen


def _at(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def run(cluster: LocalCluster, participants: int, namespace: str) -> dict[str, float]:
    workdir = Path(tempfile.mkdtemp(prefix="signal-bench-"))
    await cluster.create_namespace(namespace)
    world = AdapterWorld(cluster, cluster.admin, namespace, workdir)
    await world.setup(participants, {"noop.sh": "#!/bin/sh\nexit 0\n"}, [check("noop", "noop.sh")])
    log = workdir / "requests.tsv"
    plane = cluster.plane
    before, _, _ = await pod_fanout_floor_apart(plane.server, plane.ca_file, plane.admin_token, namespace, world.nodes)
    print(f"{before.describe()} (before Signal, for the floor's own spread)")
    window, children_before = CpuWindow(processes({"bench (process kubelet)": os.getpid()})).begin(), _children_cpu()
    process, outputs = await world.spawn(0, SIGNAL_REQUEST_LOG=str(log))
    started = process_started(process.pid)  # the adapter's own start (goal 7), not its token's request
    adapter_cpu = asyncio.create_task(_last_cpu(process.pid))
    out, _ = await process.communicate()
    finished = time.time()
    window.end()
    adapter_cpu.cancel()
    window.used["adapter"] = await adapter_cpu
    window.used["runners"] = _children_cpu() - children_before - window.used["adapter"]
    values = {p.name: p.read_text() for p in outputs.iterdir()} if outputs.exists() else {}
    if process.returncode != 0 or values.get("verdict") != "Pass":
        print(out.decode(errors="replace"))
        raise SystemExit(f"adapter did not pass: exit {process.returncode}, verdict {values.get('verdict')!r}")
    rows = [line.split("\t") for line in log.read_text().splitlines()]
    posts = [(float(t), path) for t, verb, path in rows if verb == "POST" and path.endswith("/configmaps")]
    results_at, evidence_at = posts[0][0], posts[-1][0]
    verbs = Counter(verb for _, verb, _ in rows)
    print(f"participants: {participants}")
    print(f"adapter start -> results persisted: {results_at - started:.2f}s")
    print(f"results persisted -> every workload gone: {evidence_at - results_at:.2f}s")
    print(f"adapter total (process start to exit): {finished - started:.2f}s")
    pod_posts = [float(t) for t, verb, path in rows if verb == "POST" and path.endswith("/pods")]
    stored = await world.admin.get(resource_path("v1", "configmaps", namespace, values["evidence-config-map"]))
    results = decode_document(stored, CHECK_EVIDENCE_SCHEMA)[0]["results"]
    ran = [(_at(p["startedAt"]), _at(p["finishedAt"])) for p in results["participants"]]
    print(
        "adapter timeline (s after its process started): "
        f"first request {float(rows[0][0]) - started:.3f}, check started {_at(results['startedAt']) - started:.3f}, "
        f"Pods created {pod_posts[0] - started:.3f}-{pod_posts[-1] - started:.3f}, "
        f"runners started {min(a for a, _ in ran) - started:.3f}-{max(a for a, _ in ran) - started:.3f}, "
        f"last runner finished {max(b for _, b in ran) - started:.3f}, "
        f"results collected {_at(results['collectedAt']) - started:.3f}, persisted {results_at - started:.3f}; "
        f"check evidence persisted -> exit {finished - evidence_at:.3f}"
    )
    print("API requests by verb: " + ", ".join(f"{v} {n}" for v, n in sorted(verbs.items())))
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS of the largest child process (adapter or a runner): {children:.1f} MiB")
    print(window.describe(finished - started))
    window, children_before = CpuWindow(processes({"bench (process kubelet)": os.getpid()})).begin(), _children_cpu()
    fanout = await pod_fanout_floor(cluster, world.nodes, namespace)
    window.end()
    window.used["`true` processes"] = _children_cpu() - children_before
    print(fanout.describe())
    print(window.describe(fanout.gone))
    window, children_before = CpuWindow(processes({"bench (process kubelet)": os.getpid()})).begin(), _children_cpu()
    apart, client_window, client_total = await pod_fanout_floor_apart(
        plane.server, plane.ca_file, plane.admin_token, namespace, world.nodes
    )
    window.end()
    window.used["the floor's client (in its window)"] = client_window
    window.used["`true` processes (and the client's exit)"] = _children_cpu() - children_before - client_total
    print(apart.describe())
    print(window.describe(apart.gone))
    window, children_before = CpuWindow(processes({"bench (process kubelet)": os.getpid()})).begin(), _children_cpu()
    interpreter, client_window, client_total = await pod_fanout_floor_apart(
        plane.server, plane.ca_file, plane.admin_token, namespace, world.nodes, command=BARE_INTERPRETER
    )
    window.end()
    window.used["the floor's client (in its window)"] = client_window
    window.used["interpreters (and the client's exit)"] = _children_cpu() - children_before - client_total
    print(interpreter.describe())
    print(window.describe(interpreter.gone))
    await world.cleanup()
    shutil.rmtree(workdir, ignore_errors=True)  # kept when the run fails: its logs are named then
    return {
        "results": results_at - started,
        "total": finished - started,
        "floor_succeeded": apart.succeeded,
        "floor_gone": apart.gone,
        "in_process_succeeded": fanout.succeeded,
        "interpreter_succeeded": interpreter.succeeded,
        "floor_before": before.succeeded,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--participants", type=int, default=64)
    parser.add_argument("--factor", type=int, default=10, help="also run at 1/factor of the participants (growth)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions; the GOAL lines give each figure's median")
    parser.add_argument(
        "--runner-launch",
        type=Path,
        help="another checkout's runner/launch.py for the simulated Nodes to start (an A/B of the runner)",
    )
    args = parser.parse_args()
    if args.runner_launch is not None:
        IMAGE_ENTRYPOINTS[RUNNER_IMAGE][-1] = str(args.runner_launch.resolve(strict=True))
        print(f"runner: {IMAGE_ENTRYPOINTS[RUNNER_IMAGE][-1]}")
    asyncio.run(main(args.participants, args.factor, max(1, args.repeat)))
