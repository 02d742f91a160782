"""One check, end to end: refuse or act; create (or adopt) the workloads; collect one result
per participant; persist the results **before any teardown**; quiesce; persist the check
evidence with the cleanup outcome; return what Argo should be told.

Safe to repeat: a retried step that finds this check's results ConfigMap does not run the
check again; it goes straight to quiescence (and reuses an existing evidence ConfigMap).
Invariant 5: before creating anything, the adapter refuses while any workload of another
check of the same Run still exists; and a check whose workloads cannot be proven gone
reports ``proceed=false`` so the Workflow starts no later check.
"""

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from adapter import backend, collect, workloads
from adapter.backend import TreeCheck, log
from adapter.inputs import Inputs, Refusal, validate_against_run
from kubeio.client import Kube, resource_path
from kubeio.errors import AlreadyExists
from shared import keys
from shared.evidence import (
    CHECK_EVIDENCE_SCHEMA,
    RESULTS_SCHEMA,
    CheckEvidence,
    CheckIdentity,
    CheckResults,
    Cleanup,
    EvidenceError,
    ParticipantResult,
    RunIdentity,
    Workload,
    check_verdict,
    config_map,
    decode_document,
    to_document,
)
from shared.result import RunnerResult
from shared.run import Verdict

Obj = dict[str, Any]


@dataclass(frozen=True)
class Settings:
    runner_image: str = workloads.DEFAULT_RUNNER_IMAGE
    sshd: str = workloads.DEFAULT_SSHD
    start_grace_seconds: float = 60.0
    """Time beyond the check's deadline to wait for results (Pods that never start)."""
    quiesce_seconds: float = 60.0
    """Bound on proving every workload gone."""


@dataclass(frozen=True)
class Report:
    verdict: Verdict
    config_map: str
    digest: str
    proceed: bool


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


async def _guard_other_checks(kube: Kube, inputs: Inputs) -> None:
    selector = f"{keys.RUN_UID_LABEL}={inputs.run_uid},{keys.CHECK_LABEL}!={inputs.check.name}"
    pods, _ = await backend.list_pods(kube, inputs.run_namespace, selector)
    jobs = await kube.get(resource_path(workloads.MPI_API, "mpijobs", inputs.run_namespace), labelSelector=selector)
    left = [f"Pod {p['metadata']['name']}" for p in pods]
    left += [f"MPIJob {j['metadata']['name']}" for j in jobs.get("items", [])]
    if left:
        raise Refusal(
            f"Run {inputs.run_name}: workloads of another check still exist ({', '.join(sorted(left)[:5])}); "
            "no check may start until they are gone"
        )


async def _persist(kube: Kube, inputs: Inputs, name: str, document: Obj, schema: str) -> tuple[str, int]:
    labels = {
        keys.RUN_NAME_LABEL: inputs.run_name,
        keys.RUN_UID_LABEL: inputs.run_uid,
        keys.CHECK_LABEL: inputs.check.name,
        keys.COMPONENT_LABEL: "evidence",
    }
    manifest, digest, size = config_map(
        name=name, namespace=inputs.run_namespace, owner=workloads.run_owner(inputs), labels=labels, document=document
    )
    path = resource_path("v1", "configmaps", inputs.run_namespace)
    try:
        await kube.create(path, manifest)
    except AlreadyExists:
        existing = await kube.get(f"{path}/{name}")
        _, digest = decode_document(existing, schema)
        log.info("evidence already persisted; keeping it", config_map=name, digest=digest)
    return digest, size


async def _run_pods(kube: Kube, inputs: Inputs, settings: Settings) -> tuple[list[ParticipantResult], list[Workload]]:
    path = resource_path("v1", "pods", inputs.run_namespace)
    bodies = [
        workloads.backend_pod(inputs, p.index, p.node_name, settings.runner_image)
        for p in sorted(inputs.participants, key=lambda p: p.index)
    ]
    await asyncio.gather(*(backend.create_or_adopt(kube, path, b, inputs, inputs.run_uid) for b in bodies))
    expected = {b["metadata"]["name"] for b in bodies}

    def finished(pods: list[Obj]) -> bool:
        done = {p["metadata"]["name"] for p in pods if collect.terminal(p)}
        return expected <= done

    bound = workloads.deadline_seconds(inputs.check) + settings.start_grace_seconds
    pods = await backend.wait_pods(kube, inputs.run_namespace, workloads.check_selector(inputs), finished, bound)
    pods = [p for p in pods if backend.runs_runner(p, settings.runner_image)]
    return collect.collect_pods(inputs.participants, pods), collect.pod_workloads(pods)


async def _run_mpijob(
    kube: Kube, inputs: Inputs, settings: Settings
) -> tuple[list[ParticipantResult], list[Workload], RunnerResult | None]:
    body = workloads.mpijob(inputs, settings.runner_image, sshd=settings.sshd)
    job = await backend.create_or_adopt(
        kube, resource_path(workloads.MPI_API, "mpijobs", inputs.run_namespace), body, inputs, inputs.run_uid
    )
    selector = workloads.check_selector(inputs)
    launchers = f"{selector},{workloads.MPI_ROLE_LABEL}=launcher"
    bound = workloads.deadline_seconds(inputs.check) + settings.start_grace_seconds
    launcher_pods = await backend.wait_pods(
        kube, inputs.run_namespace, launchers, lambda pods: any(collect.terminal(p) for p in pods), bound
    )
    workers, _ = await backend.list_pods(kube, inputs.run_namespace, f"{selector},{workloads.MPI_ROLE_LABEL}=worker")
    job_uid = job["metadata"]["uid"]
    workers = [w for w in workers if backend.owned_by(w, job_uid) and backend.runs_runner(w, settings.runner_image)]
    results, launcher, _ = collect.collect_mpi(inputs.participants, workers, launcher_pods)
    found = [Workload(kind="MPIJob", name=job["metadata"]["name"], uid=job_uid, role="mpijob")]
    launcher_job = await kube.get_or_none(
        resource_path("batch/v1", "jobs", inputs.run_namespace, f"{job['metadata']['name']}-launcher")
    )
    if launcher_job is not None and backend.owned_by(launcher_job, job_uid):
        found.append(
            Workload(kind="Job", name=launcher_job["metadata"]["name"], uid=launcher_job["metadata"]["uid"], role="job")
        )
    for pod in launcher_pods:
        found.append(
            Workload(
                kind="Pod",
                name=pod["metadata"]["name"],
                uid=pod["metadata"]["uid"],
                node_name=pod.get("spec", {}).get("nodeName"),
                role="launcher",
            )
        )
    node_index = {p.node_name: p.index for p in inputs.participants}
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


async def _collect(kube: Kube, inputs: Inputs, settings: Settings, source_digest: str) -> tuple[CheckResults, str]:
    """Run the check and persist its results; or load results an earlier attempt persisted."""
    name = workloads.results_name(inputs)
    existing = await kube.get_or_none(resource_path("v1", "configmaps", inputs.run_namespace, name))
    if existing is not None:
        try:
            document, digest = decode_document(existing, RESULTS_SCHEMA)
            return CheckResults.model_validate(document), digest
        except (EvidenceError, ValueError) as exc:
            raise Refusal(f"results ConfigMap {inputs.run_namespace}/{name} is unusable: {exc}") from exc
    await _guard_other_checks(kube, inputs)
    started = _now()
    launcher: RunnerResult | None = None
    if inputs.check.backend == "Pod":
        participants, found = await _run_pods(kube, inputs, settings)
    else:
        participants, found, launcher = await _run_mpijob(kube, inputs, settings)
    verdict, reason = check_verdict(participants)
    results = CheckResults(
        run=RunIdentity(namespace=inputs.run_namespace, name=inputs.run_name, uid=inputs.run_uid),
        check=CheckIdentity(
            index=inputs.check_index,
            name=inputs.check.name,
            backend=inputs.check.backend,
            script_key=inputs.check.script_key,
            source_digest=source_digest,
        ),
        verdict=verdict,
        reason=reason,
        started_at=started,
        collected_at=_now(),
        workloads=found,
        participants=participants,
        launcher=launcher,
    )
    digest, size = await _persist(kube, inputs, name, to_document(results), RESULTS_SCHEMA)
    log.info("results persisted", config_map=name, digest=digest, bytes=size, verdict=verdict.value)
    return results, digest


async def _quiesce(kube: Kube, inputs: Inputs, results: CheckResults, settings: Settings) -> Cleanup:
    selector = workloads.check_selector(inputs)
    tree = TreeCheck(inputs.run_namespace, selector, uids={w.uid for w in results.workloads})
    deleted: list[Workload] = []
    if inputs.check.backend == "Pod":
        pods, _ = await backend.list_pods(kube, inputs.run_namespace, selector)
        mine = [
            p for p in pods if backend.owned_by(p, inputs.run_uid) and backend.runs_runner(p, settings.runner_image)
        ]
        tree.uids |= {p["metadata"]["uid"] for p in mine}
        gone = await asyncio.gather(*(backend.delete_pod(kube, p) for p in mine))
        deleted = list(collect.pod_workloads([p for p, ok in zip(mine, gone, strict=True) if ok]))
    else:
        job = next((w for w in results.workloads if w.kind == "MPIJob"), None)
        if job is not None:
            name = job.name
            tree.named = [
                (workloads.MPI_API, "mpijobs", name),
                ("batch/v1", "jobs", f"{name}-launcher"),
                ("v1", "services", name),
                ("v1", "configmaps", f"{name}-config"),
                # The ssh Secret is not readable by the adapter (no Secrets access); the
                # foreground deletion of the MPIJob completes only once it is gone.
            ]
            pods, _ = await backend.list_pods(
                kube, inputs.run_namespace, f"{selector},{workloads.MPI_ROLE_LABEL}=worker"
            )
            workers = [
                p for p in pods if backend.owned_by(p, job.uid) and backend.runs_runner(p, settings.runner_image)
            ]
            tree.uids |= {p["metadata"]["uid"] for p in workers}
            await asyncio.gather(*(backend.delete_pod(kube, p) for p in workers))
            deleted = [w for w in results.workloads if w.role == "worker"]
            await backend.foreground_delete(kube, workloads.MPI_API, "mpijobs", inputs.run_namespace, name, job.uid)
            deleted.append(job)
    left = await backend.wait_gone(kube, tree, settings.quiesce_seconds)
    retained = [
        Workload(
            kind=str(o.get("kind", "Object")),
            name=o["metadata"]["name"],
            uid=o["metadata"]["uid"],
            node_name=o.get("spec", {}).get("nodeName") if o.get("kind") == "Pod" else None,
            role="participant" if inputs.check.backend == "Pod" else "worker" if o.get("kind") == "Pod" else "job",
        )
        for o in left
    ]
    if retained:
        names = ", ".join(f"{w.kind} {w.name}" for w in retained[:8])
        message = f"not gone after {settings.quiesce_seconds:.0f}s: {names}"
        return Cleanup(state="Failed", message=message, deleted=deleted, retained=retained, finished_at=_now())
    return Cleanup(state="Complete", message="every workload is gone", deleted=deleted, retained=[], finished_at=_now())


async def run_check(kube: Kube, inputs: Inputs, settings: Settings) -> Report:
    run = await kube.get_or_none(
        resource_path(keys.API_VERSION, keys.RUN_PLURAL, inputs.run_namespace, inputs.run_name)
    )
    validate_against_run(inputs, run)
    assert run is not None
    name = workloads.evidence_name(inputs)
    earlier = await kube.get_or_none(resource_path("v1", "configmaps", inputs.run_namespace, name))
    if earlier is not None:
        try:
            document, digest = decode_document(earlier, CHECK_EVIDENCE_SCHEMA)
            kept = CheckEvidence.model_validate(document)
        except (EvidenceError, ValueError) as exc:
            raise Refusal(f"evidence ConfigMap {inputs.run_namespace}/{name} is unusable: {exc}") from exc
        log.info("check evidence already persisted by an earlier attempt", config_map=name, digest=digest)
        return Report(kept.verdict, name, digest, proceed=_proceed(kept))
    results, results_digest = await _collect(kube, inputs, settings, run["spec"]["source"]["digest"])
    cleanup = await _quiesce(kube, inputs, results, settings)
    verdict, reason = results.verdict, results.reason
    if cleanup.state != "Complete":
        verdict, reason = Verdict.INCONCLUSIVE, f"CleanupFailed: {cleanup.message}"
    evidence = CheckEvidence(
        results=results,
        results_digest=results_digest,
        results_config_map=workloads.results_name(inputs),
        cleanup=cleanup,
        verdict=verdict,
        reason=reason[:512],
    )
    digest, size = await _persist(kube, inputs, name, to_document(evidence), CHECK_EVIDENCE_SCHEMA)
    log.info("check evidence persisted", config_map=name, digest=digest, bytes=size, verdict=verdict.value)
    return Report(verdict, name, digest, proceed=_proceed(evidence))


def _proceed(evidence: CheckEvidence) -> bool:
    """The suite goes on only after a passed check whose workloads are proven gone."""
    return evidence.verdict == Verdict.PASS and evidence.cleanup.state == "Complete"
