"""Benchmark (issue 47, goal 2): the seed's Run size, a ``--participants`` x ``--checks`` Run
(64 x 15 by default), each participant printing 1 KiB on each stream (``OUTPUT``). The
window is the Run's end: from the moment its last check's evidence is reported (the Workflow's
status written Succeeded, each check step with its evidence digest, as Argo ends it) to the
controller's last write of the Run's end (the check evidence read and verified, the decision,
the Run evidence stored, 64 projections, the release). Prints figures; asserts nothing.

The real controller runs as its ServiceAccount on simulated Nodes, its Workflow held by an Argo
instanceID no Argo serves; the bench does the adapter's part (every check's results and evidence
ConfigMaps, as ``signal-adapter``) and Argo's (tests/integration/test_evidence_at_scale.py's
helpers, the same documents that test bounds). The window is cut in the controller's request
log (bench/requestlog.py): its start the Workflow status PATCH sent, its end the send time of
the controller's last write before the Run was seen released. Its floor (bench/replay_floor.py)
is every request of the window made again by a bare client, one after the other (the goal's
floor) and 8 at once (for the record). Every stored object's size is printed.

    .venv/bin/python bench/run_end.py [--participants 64] [--checks 15] [--repeat 1]
"""

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.floors import judged, row
from bench.polling import wait_for
from bench.replay_floor import replay_floor, replayable
from bench.requestlog import WRITES, RequestLog
from bench.window_floor import write_kind
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from tests import evidence_builders as eb
from tests.controller_support import ControllerProcess, World, install_rbac, profile_body, reserved_by
from tests.integration import test_evidence_at_scale as scale
from tests.integration.test_evidence_at_scale import _adapter_part, _argo_part, _output, _sizes

API = keys.API_VERSION
OUTPUT = 1024
"""Bytes each participant prints on each stream (the issue: 1 KiB per participant and stream)."""


def documents(run: Obj, index: int) -> tuple[Obj, Obj]:
    """(results, evidence) of check ``index`` as the adapter writes them: every participant
    passed with ``OUTPUT`` distinct bytes on stdout and on stderr, and measurements (the
    integration test's documents, whose stderr is 256 B)."""
    evidence = eb.check_evidence(run, index)
    for participant in evidence["results"]["participants"]:
        participant["stdout"] = _output(OUTPUT)
        participant["stderr"] = _output(OUTPUT)
        participant["measurements"] = {"gpus": 8, "busBandwidthGBps": 187.5 + participant["index"] / 10}
        participant["startedAt"] = participant["finishedAt"] = eb.STAMP
    evidence = eb.seal(evidence)
    return evidence["results"], evidence


async def one_run(
    cluster: LocalCluster, world: World, workdir: Path, tag: str, participants: int, checks: int
) -> tuple[float, list, Obj, list[str]]:  # type: ignore[type-arg]
    """One Run admitted, its checks' evidence stored, its end measured: (seconds, the window's
    requests, the ended Run, its Nodes)."""
    admin, ns = cluster.admin, world.namespace
    profile = f"bench-end-{tag}"
    names = [f"end-{tag}-{i:02d}" for i in range(participants)]
    await world.add_nodes(names, requested_for=profile)
    suite = [
        {"name": f"check-{i:02d}", "scriptKey": "inventory.sh", "backend": "Pod", "backendActiveDeadline": "5m"}
        for i in range(checks)
    ]
    where = workdir / tag
    where.mkdir()
    log = RequestLog(where / "requests.tsv")
    controller = ControllerProcess(
        cluster, ns, where, resync=300, policies=tag == "0", workflow_instance_id="bench-held"
    )
    await world.add_profile(profile_body(profile, ns, participants, checks=suite))
    await controller.start(SIGNAL_REQUEST_LOG=str(log.path))
    try:
        run: Obj = {}

        async def running() -> bool:
            nonlocal run
            mine = [r for r in await world.runs() if r["spec"]["profile"]["name"] == profile]
            run = mine[0] if mine else {}
            return bool(mine) and (mine[0].get("status") or {}).get("phase") == "Running"

        await wait_for(f"the Run of {profile} Running", running, timeout=300.0)
        began = time.monotonic()
        scale._documents = documents  # the adapter's part with this bench's output sizes
        digests = await _adapter_part(cluster, run)
        print(f"  {checks} checks' results and evidence stored as signal-adapter in {time.monotonic() - began:.1f}s")
        start = time.time()
        await _argo_part(admin, run, digests)
        path = resource_path(API, keys.RUN_PLURAL, ns, run["metadata"]["name"])
        ended: Obj = {}

        async def released() -> bool:
            nonlocal ended
            ended = await admin.get(path)
            status = ended.get("status") or {}
            conditions = status.get("conditions") or []
            done = any(c.get("type") == "Released" and c.get("status") == "True" for c in conditions)
            if not done or not status.get("completionTime"):
                return False
            nodes = [await admin.get(resource_path("v1", "nodes", name=n)) for n in names]
            return all(reserved_by(n) is None for n in nodes)

        seen = await wait_for("the Run ended and its Nodes released", released, timeout=300.0)
        window = RequestLog.window(log.read(), start, seen)
        last = max((r.at for r in replayable(window) if r.verb in WRITES), default=start)
        return last - start, [r for r in window if r.at <= last], ended, names
    finally:
        controller.stop()


async def every_size(admin: KubeClient, run: Obj, names: list[str]) -> str:
    """Every stored object the Run's end left, and its size as the API server serves it (JSON)."""
    meta = run["metadata"]
    path = resource_path("v1", "configmaps", meta["namespace"])

    def size(obj: Obj) -> int:
        return len(json.dumps(obj, separators=(",", ":")).encode())

    lines = []
    for index in range(len(run["spec"]["checks"])):
        results = await admin.get(f"{path}/{keys.check_results_name(meta['name'], index)}")
        evidence = await admin.get(f"{path}/{keys.check_evidence_name(meta['name'], index)}")
        lines.append(f"check {index}: results {size(results)} B, evidence {size(evidence)} B")
    run_evidence = await admin.get(f"{path}/{keys.run_evidence_name(meta['name'])}")
    lines.append(f"Run evidence {size(run_evidence)} B")
    lines.append(f"Run {size(run)} B")
    nodes = [size(await admin.get(resource_path("v1", "nodes", name=n))) for n in names]
    lines.append(f"{len(nodes)} Nodes {min(nodes)}-{max(nodes)} B (total {sum(nodes)} B)")
    return "; ".join(lines)


async def main(participants: int, checks: int, repeat: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="signal-bench-end-"))
    async with LocalCluster(heartbeat_seconds=24 * 3600) as cluster:
        admin, ns = cluster.admin, "bench"
        await cluster.create_namespace(ns)
        world = World(cluster, admin, ns)
        await world.setup()
        await install_rbac(admin, ns, "adapter-rbac.yaml")
        results = []
        for attempt in range(repeat):
            seconds, window, run, names = await one_run(cluster, world, workdir, str(attempt), participants, checks)
            kinds: dict[str, int] = {}
            for r in replayable(window):
                kinds[write_kind(r)] = kinds.get(write_kind(r), 0) + 1
            print(
                f"  Run {run['metadata']['name']} ended {run['status']['phase']} ({run['status'].get('reason')}): "
                f"window {seconds:.3f}s, {len(window)} requests: {dict(sorted(kinds.items()))}"
            )
            sizes = await _sizes(admin, run, names)
            payload = sizes["run_evidence_cm_object"]
            floor = await replay_floor(cluster, window, payload=payload)
            print(f"  {floor.describe()}")
            print(f"  stored sizes (bytes; raw canonical JSON and gzip where two): {json.dumps(sizes)}")
            print(f"  every stored object (JSON as served): {await every_size(admin, run, names)}")
            results.append((seconds, floor))
        signal = statistics.median(s for s, _ in results)
        floor_seq = statistics.median(f.sequential for _, f in results)
        floor_con = statistics.median(f.concurrent for _, f in results)
        shape = f"{participants}x{checks}"
        print()
        target = "<= 1.5x the same requests by a bare client, one after the other"
        print(judged(f"47.2 Run end {shape} (evidence -> released)", floor_seq, signal, "s", 1.5, target))
        print(row("47.2 (vs the replay floor, 8 at once)", floor_con, signal, "s", "(for the record)"))
    print(f"(work files in {workdir})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--participants", type=int, default=64)
    parser.add_argument("--checks", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=1, help="Runs measured (the figure: their median)")
    args = parser.parse_args()
    asyncio.run(main(args.participants, args.checks, args.repeat))
