"""One check, end to end: refuse or act; create (or adopt) the workloads; collect one result
per participant; persist the results **before any teardown**; quiesce; persist the check
evidence with the cleanup outcome; return what Argo should be told.

Safe to repeat: a retried step that finds this check's results ConfigMap does not run the
check again; it goes straight to quiescence (and reuses an existing evidence ConfigMap). It
adopts only what carries this Run's and this check's labels, owner and identity
(adapter/adoption.py); anything else under those names is refused.
Invariant 5: before creating anything, the adapter refuses while any workload of another
check of the same Run still exists; and a check whose workloads cannot be proven gone
reports ``proceed=false`` so the Workflow starts no later check.

Interrupted (``stop`` set: SIGTERM from Argo's Terminate or the suite deadline): the adapter
stops waiting, takes what exists now as the results (an unfinished participant is
Inconclusive), persists them, quiesces exactly as after a finished check, persists the
evidence and raises ``Interrupted`` (the step fails). A Run found cancelled or ended gets the
same treatment for this check's leftover workloads before the adapter refuses, so a step
retried after its adapter was killed still removes what that adapter created.
"""

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from adapter import backend, collect, mpijobs, podbackend, workloads
from adapter.adoption import adoptable
from adapter.adoption import labels as evidence_labels
from adapter.backend import TreeCheck, log
from adapter.inputs import Inputs, Refusal, ended, validate_against_run, with_run
from kubeio.client import Kube, resource_path
from kubeio.discovery import list_if_served
from kubeio.errors import AlreadyExists
from shared import keys, ownership, snapshot
from shared.artifacts import StoreConfig
from shared.evidence import (
    CHECK_EVIDENCE_SCHEMA,
    RESULTS_SCHEMA,
    CheckEvidence,
    CheckIdentity,
    CheckResults,
    Cleanup,
    ParticipantResult,
    RunIdentity,
    Workload,
    check_verdict,
    config_map,
    to_document,
)
from shared.meta import to_millisecond
from shared.result import RunnerResult
from shared.run import Verdict, may_have_mpijobs

Obj = dict[str, Any]


@dataclass(frozen=True)
class Settings:
    runner_image: str = workloads.DEFAULT_RUNNER_IMAGE
    sshd: str = workloads.DEFAULT_SSHD
    start_grace_seconds: float = 60.0
    """Time beyond the check's deadline to wait for results (Pods that never start)."""
    quiesce_seconds: float = 60.0
    """Bound on proving every workload gone."""
    trusted_nodes: Mapping[str, str] = field(default_factory=dict)
    """The trusted Nodes' ``node-restriction.kubernetes.io/`` labels: where a ``crossNode``
    launcher may run (adapter/placement.py); empty: any Node not under test."""
    artifact_store: StoreConfig | None = None
    """Where backend Pods store full logs (adapter/artifacts.py); None: nothing is stored."""


class Interrupted(RuntimeError):
    """The check was interrupted; its workloads were quiesced and its evidence persisted."""


@dataclass(frozen=True)
class Report:
    verdict: Verdict
    config_map: str
    digest: str
    proceed: bool


def _now() -> datetime:
    return to_millisecond(datetime.now(UTC))


async def _mpijobs(kube: Kube, inputs: Inputs, selector: str) -> list[Obj]:
    """MPIJobs matching ``selector``; none where the cluster does not serve MPIJobs at all
    (no MPI operator; kubeio/discovery.py confirms the list's 404, else it is raised)."""
    return await list_if_served(
        kube, workloads.MPI_API, keys.MPIJOB_PLURAL, inputs.run_namespace, labelSelector=selector
    )


async def _guard_other_checks(kube: Kube, inputs: Inputs, run: Obj) -> None:
    selector = f"{keys.RUN_UID_LABEL}={inputs.run_uid},{keys.CHECK_LABEL}!={inputs.check.name}"
    pods, _ = await backend.list_pods(kube, inputs.run_namespace, selector)
    # A kubelet's mirror Pod with the Run's labels holds nothing back (shared/ownership.py).
    left = [f"Pod {p['metadata']['name']}" for p in pods if not ownership.is_mirror(p)]
    others = [c for i, c in enumerate(run["spec"].get("checks") or []) if i != inputs.check_index]
    if may_have_mpijobs(others):  # a Pod-only Run has no MPIJob to wait for
        left += [f"MPIJob {j['metadata']['name']}" for j in await _mpijobs(kube, inputs, selector)]
    if left:
        raise Refusal(
            f"Run {inputs.run_name}: workloads of another check still exist ({', '.join(sorted(left)[:5])}); "
            "no check may start until they are gone"
        )


async def _persist(kube: Kube, inputs: Inputs, name: str, document: Obj, schema: str) -> tuple[str, int]:
    manifest, digest, size = config_map(
        name=name,
        namespace=inputs.run_namespace,
        owner=workloads.run_owner(inputs),
        labels=evidence_labels(inputs),
        document=document,
    )
    path = resource_path("v1", "configmaps", inputs.run_namespace)
    try:
        await kube.create(path, manifest)
    except AlreadyExists:
        existing = await kube.get(f"{path}/{name}")
        _, digest = adoptable(existing, inputs, schema)  # only this check's own
        log.info("evidence already persisted; keeping it", config_map=name, digest=digest)
    return digest, size


async def _run_backend(
    kube: Kube, inputs: Inputs, settings: Settings, script: str | None, *, observe_only: bool = False
) -> tuple[list[ParticipantResult], list[Workload], RunnerResult | None]:
    if inputs.check.backend == "Pod":
        participants, found = await podbackend.run(
            kube,
            inputs,
            image=settings.runner_image,
            grace_seconds=settings.start_grace_seconds,
            script=script,
            observe_only=observe_only,
            store=settings.artifact_store,
        )
        return participants, found, None
    bound = 0.0 if observe_only else workloads.deadline_seconds(inputs.check) + settings.start_grace_seconds
    return await mpijobs.run(
        kube,
        inputs,
        image=settings.runner_image,
        sshd=settings.sshd,
        bound=bound,
        script=script,
        trusted=settings.trusted_nodes,
        observe_only=observe_only,
    )


async def _until_stopped(
    kube: Kube, inputs: Inputs, settings: Settings, script: str | None, stop: asyncio.Event
) -> tuple[list[ParticipantResult], list[Workload], RunnerResult | None, bool]:
    """Run the check unless ``stop`` is set first; then take what exists now instead.
    The last value says whether the check was interrupted."""
    work = asyncio.ensure_future(_run_backend(kube, inputs, settings, script))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        stopped.cancel()
        return (*work.result(), False)
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work
    log.warning("check interrupted; taking what exists now as its results", check=inputs.check.name)
    return (*await _run_backend(kube, inputs, settings, script, observe_only=True), True)


async def _collect(
    kube: Kube, inputs: Inputs, settings: Settings, run: Obj, stop: asyncio.Event, *, observe_only: bool
) -> tuple[CheckResults, str, bool]:
    """Run the check (or, ``observe_only``, take what exists now) and persist its results;
    or load results an earlier attempt persisted. The last value: interrupted."""
    name = workloads.results_name(inputs)
    existing = await kube.get_or_none(resource_path("v1", "configmaps", inputs.run_namespace, name))
    if existing is not None:
        document, digest = adoptable(existing, inputs, RESULTS_SCHEMA)  # only this check's own
        try:
            return CheckResults.model_validate(document), digest, observe_only
        except ValueError as exc:
            raise Refusal(f"results ConfigMap {inputs.run_namespace}/{name} is unusable: {exc}") from exc
    started = _now()
    source_digest = run["spec"]["source"]["digest"]
    bundle = await _verified_snapshot(kube, inputs, source_digest, refuse=not observe_only)
    script = bundle.get(inputs.check.script_key) if bundle is not None else None
    if observe_only:
        participants, found, launcher = await _run_backend(kube, inputs, settings, script, observe_only=True)
        interrupted = True
    else:
        await _guard_other_checks(kube, inputs, run)
        if stop.is_set():
            raise Interrupted(f"Run {inputs.run_name} check {inputs.check.name}: stopped before it started")
        participants, found, launcher, interrupted = await _until_stopped(kube, inputs, settings, script, stop)
    verdict, reason = check_verdict(participants)
    if interrupted:
        reason = f"Interrupted: {reason}"
    results = CheckResults(
        run=RunIdentity(namespace=inputs.run_namespace, name=inputs.run_name, uid=inputs.run_uid),
        check=CheckIdentity(
            index=inputs.check_index,
            name=inputs.check.name,
            backend=inputs.check.backend,
            script_key=inputs.check.script_key,
            source_digest=source_digest,
            bundle=bundle,
            script_digest=script,
            parameters=dict(inputs.check.parameters),
            image=inputs.check.image,
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
    return results, digest, interrupted


async def _verified_snapshot(kube: Kube, inputs: Inputs, source_digest: str, *, refuse: bool) -> dict[str, str] | None:
    """sha256 of every key of the Run's snapshot, once it is shown to be the Run's own
    (``shared.snapshot.problem``: controlled by the Run, immutable, its bytes the Run's source
    digest) and to hold the check's script key. Otherwise: ``refuse`` (before anything is
    created) raises Refusal; else (taking what exists after an interruption) None, and no
    verdict of the check is proven."""
    where = f"snapshot ConfigMap {inputs.run_namespace}/{inputs.snapshot}"
    found = await kube.get_or_none(resource_path("v1", "configmaps", inputs.run_namespace, inputs.snapshot))
    why = "it does not exist" if found is None else snapshot.problem(found, inputs.run_uid, source_digest)
    digests = snapshot.key_digests(found) if found is not None and why is None else None
    if digests is not None and inputs.check.script_key not in digests:
        why = f"it has no key {inputs.check.script_key!r}"
    if why is None and digests is not None:
        return digests
    if refuse:
        raise Refusal(
            f"{where} is not Run {inputs.run_name}'s snapshot: {why}; no workload may run it. "
            "The controller makes it; find who changed or replaced it"
        )
    log.warning("the Run's snapshot cannot be verified; no verdict of this check is proven", problem=why)
    return None


async def _quiesce(kube: Kube, inputs: Inputs, results: CheckResults, settings: Settings) -> Cleanup:
    selector = workloads.check_selector(inputs)
    tree = TreeCheck(inputs.run_namespace, selector, uids={w.uid for w in results.workloads})
    deleted: list[Workload] = []
    if inputs.check.backend == "Pod":
        pods, _ = await backend.list_pods(kube, inputs.run_namespace, selector)
        mine = [
            p
            for p in pods
            if backend.owned_by(p, inputs.run_uid)
            and backend.runs_runner(p, workloads.container_image(inputs.check, settings.runner_image))
        ]
        tree.uids |= {p["metadata"]["uid"] for p in mine}
        gone = await backend.fan_out(lambda p: backend.delete_pod(kube, p), mine)
        deleted = list(collect.pod_workloads([p for p, ok in zip(mine, gone, strict=True) if ok]))
        await backend.release_pod_group(kube, inputs)
    else:
        deleted = await mpijobs.quiesce(kube, inputs, list(results.workloads), settings.runner_image, tree)
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


async def run_check(kube: Kube, inputs: Inputs, settings: Settings, stop: asyncio.Event | None = None) -> Report:
    """Run one check; ``stop`` (set on SIGTERM) interrupts it (see the module docstring)."""
    stop = stop if stop is not None else asyncio.Event()
    run = await kube.get_or_none(
        resource_path(keys.API_VERSION, keys.RUN_PLURAL, inputs.run_namespace, inputs.run_name)
    )
    try:
        validate_against_run(inputs, run)
    except Refusal:
        if run is None or not ended(run):
            raise
        # Cancelled or ended: refuse, but first remove what an earlier (killed) adapter of
        # this check left behind, evidence first, if the inputs are otherwise the Run's.
        validate_against_run(inputs, run, allow_ended=True)
        await _finish(kube, inputs, settings, run, stop, observe_only=True)
        raise
    assert run is not None
    return await _finish(kube, with_run(inputs, run), settings, run, stop, observe_only=False)


async def clean_up(kube: Kube, inputs: Inputs, settings: Settings) -> Report:
    """The exit handler's work for one check, whatever the Run's phase: if the check left
    workloads or persisted results, and no evidence (its adapter was killed), take what exists
    (or the persisted results) as its results, quiesce, persist the evidence. Nothing to do
    otherwise."""
    run = await kube.get_or_none(
        resource_path(keys.API_VERSION, keys.RUN_PLURAL, inputs.run_namespace, inputs.run_name)
    )
    validate_against_run(inputs, run, allow_ended=True)
    assert run is not None
    return await _finish(kube, inputs, settings, run, asyncio.Event(), observe_only=True)


async def _finish(
    kube: Kube, inputs: Inputs, settings: Settings, run: Obj, stop: asyncio.Event, *, observe_only: bool
) -> Report:
    name = workloads.evidence_name(inputs)
    earlier = await kube.get_or_none(resource_path("v1", "configmaps", inputs.run_namespace, name))
    if earlier is not None:
        document, digest = adoptable(earlier, inputs, CHECK_EVIDENCE_SCHEMA)  # only this check's own
        try:
            kept = CheckEvidence.model_validate(document)
        except ValueError as exc:
            raise Refusal(f"evidence ConfigMap {inputs.run_namespace}/{name} is unusable: {exc}") from exc
        log.info("check evidence already persisted by an earlier attempt", config_map=name, digest=digest)
        return Report(kept.verdict, name, digest, proceed=_proceed(kept))
    if observe_only and not await _has_workloads(kube, inputs) and not await _has_results(kube, inputs):
        return Report(Verdict.INCONCLUSIVE, "", "", proceed=False)
    results, results_digest, interrupted = await _collect(kube, inputs, settings, run, stop, observe_only=observe_only)
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
    if interrupted and not observe_only:
        raise Interrupted(
            f"Run {inputs.run_name} check {inputs.check.name} was interrupted; its workloads were "
            f"{'removed' if cleanup.state == 'Complete' else 'NOT all removed: ' + cleanup.message}, "
            f"evidence {name}"
        )
    return Report(verdict, name, digest, proceed=_proceed(evidence))


async def _has_workloads(kube: Kube, inputs: Inputs) -> bool:
    selector = workloads.check_selector(inputs)
    pods, _ = await backend.list_pods(kube, inputs.run_namespace, selector)
    if any(not ownership.is_mirror(p) for p in pods):  # a kubelet's mirror Pod holds nothing back
        return True
    if inputs.check.backend == "Pod":  # a Pod check has no MPIJob
        return False
    return bool(await _mpijobs(kube, inputs, selector))


async def _has_results(kube: Kube, inputs: Inputs) -> bool:
    """This check's results were persisted but its evidence was not: an adapter killed between
    the two (after, or during, the removal of the workloads). The evidence is still owed."""
    name = workloads.results_name(inputs)
    return await kube.get_or_none(resource_path("v1", "configmaps", inputs.run_namespace, name)) is not None


def _proceed(evidence: CheckEvidence) -> bool:
    """The suite goes on only after a passed check whose workloads are proven gone."""
    return evidence.verdict == Verdict.PASS and evidence.cleanup.state == "Complete"
