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
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from adapter import backend, collect, mpispec, workloads
from adapter.backend import TreeCheck
from adapter.inputs import Inputs
from kubeio.client import Kube, resource_path
from shared import ownership
from shared.evidence import OwnerLink, ParticipantResult, Workload
from shared.result import RunnerResult
from shared.run import Participant

Obj = dict[str, Any]
MPIJOBS = (workloads.MPI_API, "mpijobs")
Role = Literal["launcher", "worker"]


async def _existing_jobs(kube: Kube, inputs: Inputs) -> dict[str, Obj]:
    listing = await kube.get(
        resource_path(*MPIJOBS, inputs.run_namespace), labelSelector=workloads.check_selector(inputs)
    )
    return {j["metadata"]["name"]: j for j in listing.get("items", []) if backend.owned_by(j, inputs.run_uid)}


async def _jobs(
    kube: Kube, inputs: Inputs, image: str, sshd: str, observe_only: bool, trusted: Mapping[str, str]
) -> list[tuple[Obj, int | None]]:
    """(MPIJob, participant index or None) of the check, created or adopted."""
    path = resource_path(*MPIJOBS, inputs.run_namespace)
    if observe_only:
        existing = await _existing_jobs(kube, inputs)
        return [(existing[name], index) for name, index in workloads.mpijob_names(inputs) if name in existing]
    bodies = mpispec.mpijobs(inputs, image, sshd=sshd, trusted=trusted)
    made = await backend.fan_out(lambda b: backend.create_or_adopt(kube, path, b, inputs, inputs.run_uid), bodies)
    return list(zip(made, [index for _, index in workloads.mpijob_names(inputs)], strict=True))


def _job_selector(inputs: Inputs, job: Obj) -> str:
    return f"{workloads.check_selector(inputs)},{workloads.MPI_JOB_LABEL}={job['metadata']['name']}"


async def _launcher_job(kube: Kube, inputs: Inputs, job: Obj) -> Obj | None:
    """The MPIJob's launcher Job, if the MPI operator made it for this MPIJob."""
    name = job["metadata"]["name"]
    launcher_job = await kube.get_or_none(resource_path("batch/v1", "jobs", inputs.run_namespace, f"{name}-launcher"))
    if launcher_job is None or not backend.owned_by(launcher_job, job["metadata"]["uid"]):
        return None
    return launcher_job


def _pod_workload(pod: Obj, role: Role, index: int | None, owners: list[OwnerLink]) -> Workload:
    return Workload(
        kind="Pod",
        name=pod["metadata"]["name"],
        uid=pod["metadata"]["uid"],
        node_name=pod.get("spec", {}).get("nodeName"),
        participant_index=index,
        role=role,
        owners=owners,
    )


def _chained(
    pods: list[Obj], chain: Callable[[Obj], list[OwnerLink] | None], what: str
) -> list[tuple[Obj, list[OwnerLink]]]:
    """The Pods whose controller owner chain leads to this check's MPIJob (``shared.ownership``),
    each with its chain; the others (mirror Pods, another creator's) are ignored and logged."""
    kept = []
    for pod in pods:
        owners = chain(pod)
        if owners is None:
            meta = pod["metadata"]
            backend.log.warning(
                "ignoring a Pod that Signal did not create",
                role=what,
                pod=meta.get("name"),
                uid=meta.get("uid"),
                mirror=ownership.is_mirror(pod),
                node=pod.get("spec", {}).get("nodeName"),
            )
            continue
        kept.append((pod, owners))
    return kept


async def _wait_launcher(
    kube: Kube, inputs: Inputs, job: Obj, job_chain: list[OwnerLink], image: str, bound: float
) -> tuple[list[Obj], Obj | None]:
    """Wait until the MPIJob's own launcher Pod has finished (or the bound passes); the launcher
    Pods seen and the launcher Job. A Pod that only looks like the launcher (labels, a mirror
    Pod, an ownerReference to a Job of the right name but another uid) never ends the wait
    once the Job is known; before it is, such a Pod ends one pass and the Job is read."""
    selector = f"{_job_selector(inputs, job)},{workloads.MPI_ROLE_LABEL}=launcher"
    deadline = time.monotonic() + bound
    launcher_job = await _launcher_job(kube, inputs, job)
    job_name = f"{job['metadata']['name']}-launcher"

    def counts(pod: Obj) -> bool:
        if not collect.terminal(pod) or not backend.runs_runner(pod, image):
            return False
        if launcher_job is not None:
            return ownership.launcher_chain(pod, launcher_job, job, job_chain) is not None
        ref = ownership.controller_ref(pod) or {}
        return not ownership.is_mirror(pod) and ref.get("kind") == ownership.JOB_KIND and ref.get("name") == job_name

    while True:
        pods = await backend.wait_pods(
            kube,
            inputs.run_namespace,
            selector,
            lambda seen: any(counts(p) for p in seen),
            max(0.0, deadline - time.monotonic()),
        )
        if launcher_job is None:
            launcher_job = await _launcher_job(kube, inputs, job)
        if any(counts(p) for p in pods) or time.monotonic() >= deadline:
            return pods, launcher_job
        if launcher_job is None:
            await asyncio.sleep(backend.POLL_SECONDS)  # a look-alike finished before the Job exists


async def _one(
    kube: Kube, inputs: Inputs, job: Obj, index: int | None, image: str, bound: float, script: str | None
) -> tuple[list[ParticipantResult], list[Workload], RunnerResult | None]:
    """Wait for one MPIJob's launcher and collect its participants' results. Only Pods whose
    controller owner chain leads to this MPIJob count (``shared.ownership``): the launcher
    Job's Pod and the MPIJob's workers; a mirror Pod or any other Pod with the same labels is
    ignored, so it can neither forge nor block the verdict."""
    selector = _job_selector(inputs, job)
    participants: tuple[Participant, ...] = (
        inputs.participants if index is None else tuple(p for p in inputs.participants if p.index == index)
    )
    job_chain = ownership.run_chain(job, inputs.run_name, inputs.run_uid) or []
    launcher_pods, launcher_job = await _wait_launcher(kube, inputs, job, job_chain, image, bound)
    chained_launchers = _chained(
        [p for p in launcher_pods if backend.runs_runner(p, image)],
        lambda p: ownership.launcher_chain(p, launcher_job, job, job_chain) if job_chain else None,
        "launcher",
    )
    workers, _ = await backend.list_pods(kube, inputs.run_namespace, f"{selector},{workloads.MPI_ROLE_LABEL}=worker")
    chained_workers = _chained(
        [w for w in workers if backend.runs_runner(w, image)],
        lambda w: ownership.worker_chain(w, job, job_chain) if job_chain else None,
        "worker",
    )
    results, launcher, _ = collect.collect_mpi(
        participants,
        [w for w, _ in chained_workers],
        [p for p, _ in chained_launchers],
        inputs.check.slots_per_worker,
        scope="crossNode" if index is None else "perNode",
        script=script,
    )
    if index is not None:
        results = [collect.with_launcher_output(r, launcher) for r in results]
    job_uid = job["metadata"]["uid"]
    found = [
        Workload(
            kind="MPIJob",
            name=job["metadata"]["name"],
            uid=job_uid,
            participant_index=index,
            role="mpijob",
            owners=job_chain or None,
        )
    ]
    if launcher_job is not None:
        found.append(
            Workload(
                kind="Job",
                name=launcher_job["metadata"]["name"],
                uid=launcher_job["metadata"]["uid"],
                role="job",
                owners=[ownership.link(job, ownership.MPIJOB_KIND), *job_chain] if job_chain else None,
            )
        )
    node_index = {p.node_name: p.index for p in participants}
    for pod, owners in chained_launchers:
        node = pod.get("spec", {}).get("nodeName")
        own = index if index is not None and node_index.get(node or "") == index else None
        found.append(_pod_workload(pod, "launcher", own, owners))
    for worker, owners in sorted(chained_workers, key=lambda w: w[0]["metadata"]["name"]):
        node = worker.get("spec", {}).get("nodeName")
        found.append(_pod_workload(worker, "worker", node_index.get(node or ""), owners))
    return results, found, launcher


async def run(
    kube: Kube,
    inputs: Inputs,
    *,
    image: str,
    sshd: str,
    bound: float,
    script: str | None,
    trusted: Mapping[str, str] | None = None,
    observe_only: bool = False,
) -> tuple[list[ParticipantResult], list[Workload], RunnerResult | None]:
    """Results per participant, every workload found, and (crossNode) the launcher's result;
    a verdict counts only from a launcher that executed ``script`` (the snapshot's)."""
    jobs = await _jobs(kube, inputs, image, sshd, observe_only, trusted or {})
    outcomes = await asyncio.gather(*(_one(kube, inputs, job, index, image, bound, script) for job, index in jobs))
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
        results = sorted(
            [*results, *collect.collect_mpi(tuple(missing), [], [], script=script)[0]], key=lambda r: r.index
        )
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
