"""The fault campaign (issue 14): a seeded scenario on a local cluster of its own with real Argo,
two controller replicas with different identities, simulated GPU Nodes in three zones, two
profiles (Pod checks: MPIJobs run only on real nodes, where the MPIJob fault paths are tested,
tests/integration/test_checks_on_real_nodes.py), requests in waves, scripts that fail or hang on
some Nodes, and faults from a seeded schedule; a recorder writes the history, and the checker judges it at every point.

    python -m tests.chaos.campaign --seeds 1-10 --faults 50      # the long campaign
    python -m tests.chaos.campaign --seeds 7 --faults 50 --keep  # one seed, keep its work dir

The short campaign (one seed, about 50 faults) runs in the test suite (tests/chaos/test_campaign.py).
Exit status: 0 when every seed ran with no violation, 1 otherwise.
"""

import argparse
import asyncio
import bisect
import contextlib
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from localcluster.cluster import LocalCluster
from localcluster.controlplane import ControlPlane
from localcluster.fleet import SimNode
from localcluster.kube import ApiError, KubeClient, Obj, resource_path
from shared import keys
from shared.digests import bundle_digest
from tests.chaos.checker import Rules, Tally, Violation, check
from tests.chaos.faults import NO_TARGET_DELAY, NO_TARGET_RETRIES, TERMINAL, Injector, Planned, schedule
from tests.chaos.recorder import Recorder, sources
from tests.controller_support import REPO, ControllerProcess, World, install_rbac, profile_body

ZONES = ("zone-a", "zone-b", "zone-c")
# Nodes whose name ends in 7 fail the inventory; in 5, it hangs past its deadline.
SCRIPTS = {
    "inventory.sh": '#!/bin/sh\ncase "$SIGNAL_NODE_NAME" in *7) echo "XID 79" >&2; exit 1;; *5) sleep 600;; esac\necho ok\n',
    "nccl.sh": '#!/bin/sh\necho "rank $SIGNAL_RANK of $SIGNAL_WORLD_SIZE"\n',
}
GROUP = 2
"""Every campaign profile's group size (spec.participants.count)."""
BUDGET = {"topologyKey": keys.ZONE_LABEL, "maxNodesUnderTest": 2}


class PatientClient(KubeClient):
    """The campaign's own operator: it waits out the outages it causes (a retryable error, an
    answer of 429 or 5xx, or no answer) for up to a minute before giving up."""

    async def request(self, method: str, path: str, **kw: Any) -> Obj:
        deadline = time.monotonic() + 60
        while True:
            try:
                return await super().request(method, path, **kw)
            except ApiError as exc:
                if not (exc.retryable or exc.status == 429 or exc.status >= 500) or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.5)


async def supervise(replicas: list[ControllerProcess], recorder: Recorder, paused: set[int]) -> None:
    """Restart a replica whose process ended, as a Deployment would (a stopped one is not ended)."""
    while True:
        for replica in replicas:
            process = replica.process
            if process is not None and process.poll() is not None and process.pid not in paused:
                try:
                    await replica.start()  # needs the API server (its token): may fail during an outage
                except Exception as exc:  # any failure: try again at the next tick
                    recorder.fault("replica-restart-failed", identity=replica.identity, error=str(exc)[:200])
                else:
                    recorder.fault("replica-restarted", identity=replica.identity, code=process.returncode)
        await asyncio.sleep(1.0)


class CampaignError(Exception):
    """The harness itself failed (not the system under test): its message names the seed, the
    moment and the cause, so a CI log's one line says which."""


@dataclass
class Report:
    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    runs: Counter[str] = field(default_factory=Counter)
    tally: Tally | None = None
    """What the checker covered (records replayed x invariants, Pass projections verified)."""
    records: int = 0
    relists: int = 0
    violations: list[Violation] = field(default_factory=list)
    wall: float = 0.0

    def lines(self) -> list[str]:
        out = [
            f"seed {self.seed}: {sum(self.faults.values())} faults injected ({sum(self.skipped.values())} found no target), "
            f"{len(self.violations)} violations, {self.wall:.0f}s"
        ]
        if self.tally is not None:
            out.append(
                f"  checked: {self.tally.records} records x {self.tally.invariants} invariants = "
                f"{self.tally.pairs} (records x invariants; not separate evaluations), "
                f"{self.tally.passes_verified} Pass projections verified twice (shared rules and re-derivation)"
            )
        out.append("  faults: " + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())))
        out.append("  runs:   " + ", ".join(f"{k} {v}" for k, v in sorted(self.runs.items())))
        for v in self.violations:
            out.append(f"  VIOLATION of invariant {v.invariant} at t={v.at:.1f}s rv={v.rv}: {v.message}")
            out += [f"      {line}" for line in v.excerpt]
        return out


async def _profiles(world: World) -> list[str]:
    digest = bundle_digest(SCRIPTS, {})
    a = profile_body(
        f"{world.namespace}-a",
        world.namespace,
        GROUP,
        digest=digest,
        budget=BUDGET,
        checks=[
            {
                "name": "inventory",
                "scriptKey": "inventory.sh",
                "backend": "Pod",
                "gpuCount": 1,
                "backendActiveDeadline": "20s",
            },
            {
                "name": "nccl",
                "scriptKey": "nccl.sh",
                "backend": "Pod",
                "gpuCount": 1,
                "backendActiveDeadline": "30s",
            },
        ],
    )
    b = profile_body(
        f"{world.namespace}-b",
        world.namespace,
        GROUP,
        digest=digest,
        budget=BUDGET,
        checks=[
            {
                "name": "inventory",
                "scriptKey": "inventory.sh",
                "backend": "Pod",
                "gpuCount": 1,
                "backendActiveDeadline": "20s",
            }
        ],
    )
    b["spec"]["recurrence"] = {"interval": "60s"}
    for body in (a, b):
        body["spec"]["evidenceReserve"] = "30s"
        await world.add_profile(body)
    return [a["metadata"]["name"], b["metadata"]["name"]]


async def _install_template(admin: KubeClient, namespace: str) -> None:
    template = yaml.safe_load((REPO / "deploy" / "base" / "adapter-workflowtemplate.yaml").read_text())
    template["metadata"]["namespace"] = namespace
    path = resource_path("argoproj.io/v1alpha1", "workflowtemplates", namespace, template["metadata"]["name"])
    await admin.apply(path, template)


async def _nodes(admin: KubeClient, names: list[str]) -> list[Obj]:
    return [await admin.get(resource_path("v1", "nodes", name=n)) for n in names]


async def _request_waves(
    world: World,
    recorder: Recorder,
    rng: random.Random,
    names: list[str],
    profiles: list[str],
    start: float,
    span: float,
) -> None:
    """Six request waves over the span, each at its time whatever the faults are doing."""
    for at in (span * i / 6 for i in range(6)):
        await asyncio.sleep(max(0.0, start + at - time.monotonic()))
        await _request_wave(world, recorder, rng, names, profiles)


async def _request_wave(
    world: World, recorder: Recorder, rng: random.Random, names: list[str], profiles: list[str]
) -> None:
    free = [
        n["metadata"]["name"]
        for n in await _nodes(world.admin, names)
        if not {keys.RESERVED_BY_LABEL, keys.CERTIFY_LABEL} & set(n["metadata"].get("labels") or {})
    ]
    profile = rng.choice(profiles)
    for name in rng.sample(free, min(len(free), 4)):
        patch = {"metadata": {"labels": {keys.CERTIFY_LABEL: profile}}}
        answer = await world.admin.merge_patch(resource_path("v1", "nodes", name=name), patch)
        recorder.operator("request", answer, nodes=[name], profile=profile)


async def _quiesce(world: World, recorder: Recorder, names: list[str], deadline: float) -> None:
    """Release held groups until every Run has ended, nothing waits, and no group is held."""
    runs_path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, world.namespace)
    while time.monotonic() < deadline:
        runs = (await world.admin.get(runs_path))["items"]
        nodes = await _nodes(world.admin, names)
        live = [r for r in runs if (r.get("status") or {}).get("phase") not in TERMINAL]
        waiting = [n for n in nodes if keys.CERTIFY_LABEL in (n["metadata"].get("labels") or {})]
        held = [
            r
            for r in runs
            if (r.get("status") or {}).get("phase") in TERMINAL
            and not r["spec"].get("release")
            and r["status"].get("phase") != "Succeeded"
        ]
        if not live and not waiting:
            return
        if not live and waiting:
            for run in held:  # waiting Nodes may be behind a held group: the operator releases it
                path = f"{runs_path}/{run['metadata']['name']}"
                recorder.operator(
                    "release",
                    await world.admin.merge_patch(path, {"spec": {"release": True}}),
                    run=run["metadata"]["name"],
                )
            if not held:
                await _complete_groups(world, recorder, nodes, waiting)
        await asyncio.sleep(1.0)


async def _complete_groups(world: World, recorder: Recorder, nodes: list[Obj], waiting: list[Obj]) -> None:
    """Nodes left waiting for a profile in fewer than its group size (a wave that requested
    an odd number, a request restored on release) can never be admitted: as an operator would,
    request free Nodes to complete the group, or withdraw the request when none is free."""
    wanted = Counter(n["metadata"]["labels"][keys.CERTIFY_LABEL] for n in waiting)
    free = [
        n["metadata"]["name"]
        for n in nodes
        if not {keys.RESERVED_BY_LABEL, keys.CERTIFY_LABEL} & set(n["metadata"].get("labels") or {})
        and not (n.get("spec") or {}).get("unschedulable")
    ]
    for profile, count in sorted(wanted.items()):
        if count >= GROUP:
            continue  # admissible as they are (one group at a time)
        short = GROUP - count
        if len(free) >= short:
            for name in [free.pop() for _ in range(short)]:
                patch = {"metadata": {"labels": {keys.CERTIFY_LABEL: profile}}}
                answer = await world.admin.merge_patch(resource_path("v1", "nodes", name=name), patch)
                recorder.operator("request", answer, nodes=[name], profile=profile)
            continue
        for node in waiting:
            if node["metadata"]["labels"][keys.CERTIFY_LABEL] == profile:
                name = node["metadata"]["name"]
                patch = {"metadata": {"labels": {keys.CERTIFY_LABEL: None}}}
                answer = await world.admin.merge_patch(resource_path("v1", "nodes", name=name), patch)
                recorder.operator("withdraw", answer, nodes=[name], profile=profile)


async def run_seed(seed: int, faults: int, span: float, workdir: Path) -> Report:
    report = Report(seed)
    began = time.monotonic()
    rng = random.Random(seed)
    cluster = LocalCluster(
        plane=ControlPlane(workdir=workdir / "cluster"), heartbeat_seconds=5.0, workflow_instance_id=f"chaos-{seed}"
    )
    await cluster.start()
    replicas: list[ControllerProcess] = []
    recorder: Recorder | None = None
    injector: Injector | None = None
    supervisor: asyncio.Task[None] | None = None
    waves: asyncio.Task[None] | None = None
    admin = PatientClient(cluster.admin.server, cluster.admin.token, cluster.admin.ca_file)
    try:
        namespace = f"chaos-{seed}"
        await cluster.create_namespace(namespace)
        world = World(cluster, admin, namespace)
        await world.setup(scripts=SCRIPTS)
        await install_rbac(admin, namespace, "adapter-rbac.yaml")
        await _install_template(admin, namespace)
        names = world.node_names(24)
        zones = {name: ZONES[i % 3] for i, name in enumerate(names)}
        await cluster.add_nodes([SimNode(n, zone=zones[n], labels={"pool": "gpu"}) for n in names])
        recorder = Recorder(admin, workdir / "history.jsonl", sources(namespace, f"{namespace}-n"))
        await recorder.start()
        profiles = await _profiles(world)
        for identity in ("r0", "r1"):
            replica = ControllerProcess(
                cluster,
                namespace,
                workdir,
                resync=2.0,
                identity=identity,
                workflow_instance_id=cluster.workflow_instance_id,
            )
            await replica.start()
            replicas.append(replica)
        injector = Injector(cluster, admin, namespace, replicas, recorder, rng, names, zones, profiles)
        supervisor = asyncio.create_task(supervise(replicas, recorder, injector.paused))
        plan = schedule(seed, faults, span)
        start = time.monotonic()
        # The waves keep their own clock: a fault that waits for its target (kill-adapter waits
        # for a check to run) must not hold back the requests that would give it one. Seen: a
        # seed whose only group was canceled and held, three faults each waiting for a check,
        # and no wave for 100 s: too few faults injected.
        waves = asyncio.create_task(
            _request_waves(world, recorder, random.Random(seed * 7919), names, profiles, start, span)
        )
        while plan:
            planned = plan.pop(0)
            await asyncio.sleep(max(0.0, start + planned.at - time.monotonic()))
            last = planned.tries >= NO_TARGET_RETRIES
            if not await injector.inject(planned.kind, last_try=last) and not last:
                again = Planned(planned.at + NO_TARGET_DELAY, planned.kind, planned.tries + 1)
                bisect.insort(plan, again, key=lambda p: p.at)
        await waves
        await injector.settle()
        # Quiet phase: no more faults, no more recurrence; the system must finish what it started.
        await admin.merge_patch(
            resource_path(keys.API_VERSION, keys.PROFILE_PLURAL, name=profiles[1]), {"spec": {"recurrence": None}}
        )
        faults_end = recorder.now()
        recorder.fault("faults-end")
        await _quiesce(world, recorder, names, time.monotonic() + 400)
        report.faults.update(injector.injected)
        report.skipped.update(injector.skipped)
        runs = (await admin.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace)))["items"]
        report.runs.update((r.get("status") or {}).get("phase", "Pending") for r in runs)
    except Exception as exc:
        at = f" at t={recorder.now():.0f}s" if recorder is not None else ""
        raise CampaignError(f"seed {seed}: the campaign itself failed{at}: {type(exc).__name__}: {exc}") from exc
    finally:
        if injector is not None:
            await injector.abort()
        for task in (waves, supervisor):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if recorder is not None:
            await recorder.stop()
        for replica in replicas:
            replica.stop()
        await admin.close()
        await cluster.stop()
    assert recorder is not None
    report.records, report.relists = len(recorder.records), recorder.relists
    rules = Rules(max_nodes_per_domain=BUDGET["maxNodesUnderTest"], faults_end_at=faults_end, end_margin_s=120.0)
    report.violations, report.tally = check(recorder.records, rules)
    report.wall = time.monotonic() - began
    return report


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.campaign", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1", help="seeds, e.g. 1-10 or 3,7")
    parser.add_argument("--faults", type=int, default=50, help="faults per seed")
    parser.add_argument("--span", type=float, default=180.0, help="seconds over which each seed's faults are spread")
    parser.add_argument("--keep", action="store_true", help="keep each seed's work directory (history.jsonl, logs)")
    args = parser.parse_args(argv)
    reports = []
    crashed: list[int] = []
    for seed in _seeds(args.seeds):
        workdir = Path(tempfile.mkdtemp(prefix=f"signal-chaos-{seed}-"))
        print(f"seed {seed}: {args.faults} faults over {args.span:.0f}s; work dir {workdir}", flush=True)
        # The local cluster's own logs go to a file in the work directory, not the report.
        log = (workdir / "local-cluster.log").open("a", encoding="utf-8")
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=log))
        try:
            report = asyncio.run(run_seed(seed, args.faults, args.span, workdir))
        except Exception as exc:  # the harness itself failed: say so, keep the work dir, go on
            print(f"seed {seed}: the campaign itself failed ({type(exc).__name__}: {exc}); see {workdir}", flush=True)
            crashed.append(seed)
            continue
        print("\n".join(report.lines()), flush=True)
        reports.append(report)
        if not args.keep and not report.violations:
            shutil.rmtree(workdir, ignore_errors=True)
    total = sum(sum(r.faults.values()) for r in reports)
    bad = sum(len(r.violations) for r in reports)
    records = sum(r.tally.records for r in reports if r.tally is not None)
    print(
        f"campaign: {len(reports)} seeds, {total} faults injected, {records} records checked against each "
        f"of the invariants, {bad} violations" + (f"; seeds {crashed} did not complete" if crashed else "")
    )
    return 1 if bad or crashed else 0


if __name__ == "__main__":
    sys.exit(main())
