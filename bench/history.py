"""Goal 3 as the issue words it (used by bench/admission.py at the full size): a controller
started over 10,000 Nodes, 500 Runs and 500 evidence ConfigMaps; start -> caches synced, and
start -> the first admission after it (a group requested at the start, Running); its RSS then,
with the bench's live Runs (about 100 at the issue's size) still Running.

To the Runs the bench's own windows left (live, about 100 at the issue's size) it adds ``runs``
finished ones (so at least the issue's 500 Runs and exactly its 500 evidence ConfigMaps) of a
profile of their own that keeps them all (``keepTerminalRuns``): each as the controller leaves a
Run once done (Succeeded, Released, ResourcesCleaned) over a group of real Nodes, with its Run
evidence ConfigMap as the controller writes it (labels, owner, gzip'd canonical JSON holding the
decision and the check's evidence for 64 participants), written as the controller."""

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from bench.floors import rss_mib
from bench.polling import wait_for
from bench.requestlog import RequestLog, running_cut
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from tests.attack_support import forged, run_evidence_document
from tests.controller_support import ControllerProcess, World, profile_body
from tests.evidence_builders import check_evidence
from tests.run_builders import run_body

HISTORY_PROFILE = "bench-history"
KEEP_MOST = 1000
"""The most terminal Runs one profile keeps (the CRD's ``keepTerminalRuns`` maximum): more
history is spread over profiles ``bench-history-<k>`` of up to this many Runs each."""
CONCURRENCY = 32
STAMP = "2026-12-01T00:00:00Z"


@dataclass
class ColdStart:
    runs: int
    live: int
    config_maps: int
    synced: float
    rss_synced: float
    first_admission: float
    rss_admitted: float
    first_request: float
    lists: int

    def describe(self) -> str:
        return (
            f"  cold start over {self.runs} Runs ({self.live} live) and {self.config_maps} evidence ConfigMaps: "
            f"caches synced {self.synced:.2f}s (RSS {self.rss_synced:.1f} MiB), first admission "
            f"Running {self.first_admission:.2f}s after start (RSS {self.rss_admitted:.1f} MiB; the controller's "
            f"first request {self.first_request:.2f}s after start, {self.lists} LISTs (pages) to sync; Running "
            "is the time of its status PATCH in the controller's request log)"
        )


def _condition(type_: str, reason: str) -> Obj:
    return {"type": type_, "status": "True", "reason": reason, "message": reason, "lastTransitionTime": STAMP}


async def _finished_run(admin: KubeClient, writer: KubeClient, namespace: str, nodes: list[Obj], profile: str) -> None:
    body = run_body(namespace, nodes, profile)
    created = await admin.create(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace), body)
    name = created["metadata"]["name"]
    status = {
        "phase": "Succeeded",
        "startTime": STAMP,
        "completionTime": STAMP,
        "conditions": [
            _condition("Admitted", "Reserved"),
            _condition("Released", "NodesReleased"),
            _condition("ResourcesCleaned", "WorkflowAndSnapshotDeleted"),
        ],
    }
    path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, name, "status")
    await admin.merge_patch(path, {"status": status})
    nodes_passed = {n["metadata"]["name"]: "Pass" for n in nodes}
    document = run_evidence_document(created, check_evidence(created), nodes_passed, "Succeeded")
    evidence = forged(created, keys.run_evidence_name(name), document, controller=True)
    await writer.create(resource_path("v1", "configmaps", namespace), evidence)


async def add_history(cluster: LocalCluster, world: World, nodes: list[Obj], runs: int, group: int) -> tuple[int, int]:
    """Add ``runs`` finished Runs, each with its evidence; (Runs now, live Runs). The
    evidence is written as the controller's ServiceAccount: Signal's admission policy lets only
    the adapter and the controller create evidence, not even the cluster's admin."""
    admin, namespace = cluster.admin, world.namespace
    profiles = [f"{HISTORY_PROFILE}-{k}" for k in range(max(1, -(-runs // KEEP_MOST)))]
    for name in profiles:
        body = profile_body(name, namespace, group)
        body["spec"]["retention"] = {"keepTerminalRuns": KEEP_MOST}
        await world.add_profile(body)
    existing = (await admin.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace)))["items"]
    live = sum(1 for r in existing if (r.get("status") or {}).get("phase") == "Running")
    missing = runs  # each with its evidence: ``runs`` evidence ConfigMaps, the live Runs on top
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int, writer: KubeClient) -> None:
        async with limit:
            start = (i * group) % max(1, len(nodes) - group)
            await _finished_run(admin, writer, namespace, nodes[start : start + group], profiles[i // KEEP_MOST])

    began = time.monotonic()
    writer_identity = await identities.service_account(cluster.plane, namespace, "signal-controller", create=False)
    async with writer_identity.client() as writer:
        await asyncio.gather(*(one(i, writer) for i in range(missing)))
    print(f"history: {missing} finished Runs and their evidence created in {time.monotonic() - began:.1f}s")
    return len(existing) + missing, live


async def cold_start(
    cluster: LocalCluster, world: World, workdir: Path, profile: str, names: list[str], runs: int, live: int
) -> ColdStart:
    """A fresh controller (the same identity) over what is there; ``names`` (a group of free
    Nodes) requested for ``profile`` as it starts."""
    admin, namespace = cluster.admin, world.namespace
    workdir.mkdir(exist_ok=True)
    listed = (await admin.get(resource_path("v1", "configmaps", namespace)))["items"]
    config_maps = sum(1 for cm in listed if cm["metadata"]["name"].endswith("-evidence"))
    controller = ControllerProcess(cluster, namespace, workdir, resync=300, workflow_instance_id="bench-held")
    controller.policies = False  # installed by the first controller of the namespace
    log = RequestLog(workdir / "requests.tsv")
    began = time.time()
    await controller.start(SIGNAL_REQUEST_LOG=str(log.path))
    try:
        await asyncio.gather(*(world.request(profile, [n]) for n in names))

        async def synced() -> bool:
            return "caches synced" in controller.logs()

        synced_at = await wait_for("the controller's caches", synced)
        assert controller.process is not None
        pid = controller.process.pid
        rss_synced = rss_mib(pid)

        # The first admission as the controller made it: its Run status PATCH to Running after the
        # Workflow's create, from its own request log (read from the file, so the probe adds no
        # load to the API server the controller is starting against).
        async def admitted() -> bool:
            return running_cut(log.read(), began) is not None

        await wait_for("the first admission Running", admitted)
        rss_admitted = rss_mib(pid)
        requests = log.read()
        admitted_at = running_cut(requests, began)
        assert admitted_at is not None
        started = requests[0].at if requests else began
        lists = sum(1 for r in requests if r.at <= synced_at and r.verb == "LIST")
        return ColdStart(
            runs=runs + 1,
            live=live + 1,
            config_maps=config_maps,
            synced=synced_at - began,
            rss_synced=rss_synced,
            first_admission=admitted_at - began,
            rss_admitted=rss_admitted,
            first_request=started - began,
            lists=lists,
        )
    finally:
        controller.stop()
