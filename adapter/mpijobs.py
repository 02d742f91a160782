"""The MPIJob backend of one check, both shapes: create (or adopt) its MPIJobs, wait for
their launchers, bind every rank result to a participant, and quiesce the MPIJobs' whole
ownership trees. Thin I/O; the decisions are in ``collect`` and ``workloads``.

* ``crossNode``: one MPIJob, one world across every participant; its launcher runs on a Node
  that is not under test, and its report counts only if it did (``collect.launcher_placement``).
* ``perNode``: one MPIJob per participant (a launcher and a worker on its Node, a local
  world of ``slotsPerWorker`` ranks); each participant's verdict comes from its own
  launcher, and only from ranks that ran on its own worker.

``observe_only`` (an interrupted check: SIGTERM, a cancelled Run) creates nothing and waits
for nothing: it takes what exists now, so that the evidence of what ran is persisted before
the workloads are removed.
"""

import asyncio
from typing import Any

from adapter import backend, collect, workloads
from adapter.backend import TreeCheck
from adapter.inputs import Inputs
from kubeio.client import Kube, resource_path
from shared.evidence import ParticipantResult, Workload
from shared.result import RunnerResult
from shared.run import Participant

Obj = dict[str, Any]
MPIJOBS = (workloads.MPI_API, "mpijobs")


async def _existing_jobs(kube: Kube, inputs: Inputs) -> dict[str, Obj]:
    listing = await kube.get(
        resource_path(*MPIJOBS, inputs.run_namespace), labelSelector=workloads.check_selector(inputs)
    )
    return {j["metadata"]["name"]: j for j in listing.get("items", []) if backend.owned_by(j, inputs.run_uid)}


async def _jobs(kube: Kube, inputs: Inputs, image: str, sshd: str, observe_only: bool) -> list[tuple[Obj, int | None]]:
    """(MPIJob, participant index or None) of the check, created or adopted."""
    path = resource_path(*MPIJOBS, inputs.run_namespace)
    if observe_only:
        existing = await _existing_jobs(kube, inputs)
        return [(existing[name], index) for name, index in workloads.mpijob_names(inputs) if name in existing]
    bodies = workloads.mpijobs(inputs, image, sshd=sshd)
    made = await backend.fan_out(lambda b: backend.create_or_adopt(kube, path, b, inputs, inputs.run_uid), bodies)
    return list(zip(made, [index for _, index in workloads.mpijob_names(inputs)], strict=True))


def _job_selector(inputs: Inputs, job: Obj) -> str:
    return f"{workloads.check_selector(inputs)},{workloads.MPI_JOB_LABEL}={job['metadata']['name']}"


async def _launcher_job(kube: Kube, inputs: Inputs, job: Obj) -> Workload | None:
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    launcher_job = await kube.get_or_none(resource_path("batch/v1", "jobs", inputs.run_namespace, f"{name}-launcher"))
    if launcher_job is None or not backend.owned_by(launcher_job, uid):
        return None
    return Workload(kind="Job", name=launcher_job["metadata"]["name"], uid=launcher_job["metadata"]["uid"], role="job")


async def _one(
    kube: Kube, inputs: Inputs, job: Obj, index: int | None, image: str, bound: float
) -> tuple[list[ParticipantResult], list[Workload], RunnerResult | None]:
    """Wait for one MPIJob's launcher and collect its participants' results."""
    selector = _job_selector(inputs, job)
    participants: tuple[Participant, ...] = (
        inputs.participants if index is None else tuple(p for p in inputs.participants if p.index == index)
    )
    launchers = f"{selector},{workloads.MPI_ROLE_LABEL}=launcher"
    launcher_pods = await backend.wait_pods(
        kube, inputs.run_namespace, launchers, lambda pods: any(collect.terminal(p) for p in pods), bound
    )
    workers, _ = await backend.list_pods(kube, inputs.run_namespace, f"{selector},{workloads.MPI_ROLE_LABEL}=worker")
    job_uid = job["metadata"]["uid"]
    workers = [w for w in workers if backend.owned_by(w, job_uid) and backend.runs_runner(w, image)]
    launcher_pods = [p for p in launcher_pods if backend.runs_runner(p, image)]
    results, launcher, _ = collect.collect_mpi(
        participants,
        workers,
        launcher_pods,
        inputs.check.slots_per_worker,
        scope="crossNode" if index is None else "perNode",
    )
    if index is not None:
        results = [collect.with_launcher_output(r, launcher) for r in results]
    found = [Workload(kind="MPIJob", name=job["metadata"]["name"], uid=job_uid, participant_index=index, role="mpijob")]
    launcher_job = await _launcher_job(kube, inputs, job)
    if launcher_job is not None:
        found.append(launcher_job)
    node_index = {p.node_name: p.index for p in participants}
    for pod in launcher_pods:
        node = pod.get("spec", {}).get("nodeName")
        found.append(
            Workload(
                kind="Pod",
                name=pod["metadata"]["name"],
                uid=pod["metadata"]["uid"],
                node_name=node,
                participant_index=index if index is not None and node_index.get(node or "") == index else None,
                role="launcher",
            )
        )
    for worker in sorted(workers, key=lambda w: w["metadata"]["name"]):
        node = worker.get("spec", {}).get("nodeName")
        found.append(
            Workload(
                kind="Pod",
                name=worker["metadata"]["name"],
                uid=worker["metadata"]["uid"],
                node_name=node,
                participant_index=node_index.get(node or ""),
                role="worker",
            )
        )
    return results, found, launcher


async def run(
    kube: Kube, inputs: Inputs, *, image: str, sshd: str, bound: float, observe_only: bool = False
) -> tuple[list[ParticipantResult], list[Workload], RunnerResult | None]:
    """Results per participant, every workload found, and (crossNode) the launcher's result."""
    jobs = await _jobs(kube, inputs, image, sshd, observe_only)
    outcomes = await asyncio.gather(*(_one(kube, inputs, job, index, image, bound) for job, index in jobs))
    by_index: dict[int, ParticipantResult] = {}
    found: list[Workload] = []
    launcher: RunnerResult | None = None
    for results, workloads_found, own_launcher in outcomes:
        by_index.update({r.index: r for r in results})
        found += workloads_found
        if inputs.check.mpi_scope == "crossNode":
            launcher = own_launcher
    missing = [p for p in inputs.participants if p.index not in by_index]
    results = [by_index[i] for i in sorted(by_index)]
    if missing:
        # An interrupted perNode check may not have created every participant's MPIJob.
        results = sorted([*results, *collect.collect_mpi(tuple(missing), [], [])[0]], key=lambda r: r.index)
    return results, found, launcher


async def quiesce(
    kube: Kube, inputs: Inputs, job_workloads: list[Workload], image: str, tree: TreeCheck
) -> list[Workload]:
    """Delete the workers of every MPIJob of the check (uid preconditions; gone only once
    stopped: ``backend.delete_pod``), then foreground-delete the MPIJobs, and add their trees
    to ``tree``; the deleted."""
    deleted: list[Workload] = []
    selector = workloads.check_selector(inputs)
    jobs = [w for w in job_workloads if w.kind == "MPIJob"]
    # An MPIJob created after the results were taken (an interrupted create) is found by label.
    known = {w.uid for w in jobs}
    for name, obj in (await _existing_jobs(kube, inputs)).items():
        if obj["metadata"]["uid"] not in known:
            jobs.append(Workload(kind="MPIJob", name=name, uid=obj["metadata"]["uid"], role="mpijob"))
    for job in jobs:
        tree.uids.add(job.uid)
        tree.named += [
            (workloads.MPI_API, "mpijobs", job.name),
            ("batch/v1", "jobs", f"{job.name}-launcher"),
            ("v1", "services", job.name),
            ("v1", "configmaps", f"{job.name}-config"),
            # The ssh Secret is not readable by the adapter (no Secrets access); the
            # foreground deletion of the MPIJob completes only once it is gone.
        ]
    pods, _ = await backend.list_pods(kube, inputs.run_namespace, f"{selector},{workloads.MPI_ROLE_LABEL}=worker")
    job_uids = {j.uid for j in jobs}
    workers = [p for p in pods if any(backend.owned_by(p, uid) for uid in job_uids) and backend.runs_runner(p, image)]
    tree.uids |= {p["metadata"]["uid"] for p in workers}
    gone = await backend.fan_out(lambda p: backend.delete_pod(kube, p), workers)
    recorded = {w.uid: w for w in job_workloads if w.role == "worker"}
    for pod, ok in zip(workers, gone, strict=True):
        if ok:
            deleted.append(
                recorded.get(pod["metadata"]["uid"])
                or Workload(
                    kind="Pod",
                    name=pod["metadata"]["name"],
                    uid=pod["metadata"]["uid"],
                    node_name=pod.get("spec", {}).get("nodeName"),
                    role="worker",
                )
            )
    for job in jobs:
        await backend.foreground_delete(kube, workloads.MPI_API, "mpijobs", inputs.run_namespace, job.name, job.uid)
        deleted.append(job)
    return deleted
