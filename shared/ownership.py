"""Whose workload is it: the controller owner chain from a backend Pod up to its Run. Pure.

A Pod's labels, name, image and status say nothing about who made it: a kubelet may create a
*mirror Pod* (annotation ``kubernetes.io/config.mirror``) bound to its own Node, in any
namespace, with any labels, and write its status and termination message (NodeRestriction
allows exactly that, and nothing more: a mirror Pod's one ownerReference is to its Node). So
a backend workload counts only when it is no mirror Pod and its controller owner chain leads
to this Run, as Signal and the Kubeflow MPI operator v0.8.0 create them:

* a Pod check's Pod, and an MPIJob: created by the adapter with exactly one ownerReference,
  to the Run (``[Run]``);
* an MPI worker Pod: the MPI operator's, controlled by its MPIJob (``[MPIJob, Run]``);
* a launcher Pod: the Job controller's, controlled by the launcher Job
  (``batch.kubernetes.io/controller-uid``), which the MPI operator created controlled by the
  MPIJob (``[Job, MPIJob, Run]``).

The adapter applies the ``*_chain`` functions to the objects it reads (anything else is
ignored, never counted, so a squatted mirror Pod neither forges nor blocks a verdict) and
records each chain in the evidence (``shared.evidence.Workload.owners``); ``chain_problem``
re-checks the recorded chains at acceptance (the controller's and ``signalctl evidence
verify``'s): a proven verdict whose workloads' chains are missing or lead elsewhere is
Inconclusive.
"""

from collections.abc import Mapping
from typing import Any, Final

from shared import keys
from shared.evidence import CheckResults, OwnerLink
from shared.run import Verdict

Obj = Mapping[str, Any]
MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
JOB_UID_LABELS: Final = ("batch.kubernetes.io/controller-uid", "controller-uid")
"""What the Job controller labels its Pods with: the Job's uid (the second is the legacy key)."""
MPIJOB_KIND: Final = "MPIJob"
JOB_KIND: Final = "Job"


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def is_mirror(obj: Obj) -> bool:
    """A kubelet's mirror Pod (created with a Node's own credential)."""
    return MIRROR_ANNOTATION in (_meta(obj).get("annotations") or {})


def link(obj: Obj, kind: str) -> OwnerLink:
    meta = _meta(obj)
    return OwnerLink(kind=kind, name=str(meta.get("name", "")), uid=str(meta.get("uid", "")))


def controller_ref(obj: Obj) -> Obj | None:
    """The object's one controller ownerReference, or None (none, or several)."""
    refs = [r for r in _meta(obj).get("ownerReferences") or [] if isinstance(r, Mapping) and r.get("controller")]
    return refs[0] if len(refs) == 1 else None


def _controlled_by(obj: Obj, owner: Obj, kind: str) -> bool:
    ref = controller_ref(obj)
    return ref is not None and ref.get("kind") == kind and ref.get("uid") == _meta(owner).get("uid")


def run_chain_of(run_name: str, run_uid: str) -> list[OwnerLink]:
    return [OwnerLink(kind=keys.RUN_KIND, name=run_name, uid=run_uid)]


def run_chain(obj: Obj, run_name: str, run_uid: str) -> list[OwnerLink] | None:
    """``[Run]`` for a Pod or MPIJob the adapter created for this Run (exactly one
    ownerReference, to the Run), else None."""
    refs = _meta(obj).get("ownerReferences") or []
    if is_mirror(obj) or len(refs) != 1 or not isinstance(refs[0], Mapping):
        return None
    ref = refs[0]
    if ref.get("kind") != keys.RUN_KIND or ref.get("uid") != run_uid or ref.get("name") != run_name:
        return None
    return run_chain_of(run_name, run_uid)


def worker_chain(pod: Obj, mpijob: Obj, mpijob_chain: list[OwnerLink]) -> list[OwnerLink] | None:
    """``[MPIJob, Run]`` for a worker Pod the MPI operator made for ``mpijob``, else None."""
    if is_mirror(pod) or not _controlled_by(pod, mpijob, MPIJOB_KIND):
        return None
    return [link(mpijob, MPIJOB_KIND), *mpijob_chain]


def launcher_chain(
    pod: Obj, launcher_job: Obj | None, mpijob: Obj, mpijob_chain: list[OwnerLink]
) -> list[OwnerLink] | None:
    """``[Job, MPIJob, Run]`` for a launcher Pod that the Job controller made for the launcher
    Job that the MPI operator made for ``mpijob``, else None (a mirror Pod, a Pod of another
    Job, a Job of another MPIJob, no Job at all)."""
    if launcher_job is None or is_mirror(pod) or not _controlled_by(launcher_job, mpijob, MPIJOB_KIND):
        return None
    if not _controlled_by(pod, launcher_job, JOB_KIND):
        return None
    job_uid = _meta(launcher_job).get("uid")
    labels = _meta(pod).get("labels") or {}
    marked = [labels[key] for key in JOB_UID_LABELS if key in labels]
    if not marked or any(value != job_uid for value in marked):
        return None
    return [link(launcher_job, JOB_KIND), link(mpijob, MPIJOB_KIND), *mpijob_chain]


# ------------------------------------------------------------------ acceptance, from the evidence


def _leads_to_run(chain: list[OwnerLink] | None, run_uid: str, kinds: tuple[str, ...]) -> bool:
    return (
        chain is not None
        and [c.kind for c in chain] == [*kinds, keys.RUN_KIND]
        and chain[-1].uid == run_uid
        and all(c.uid for c in chain)
    )


def chain_problem(run_uid: str, results: CheckResults, scope: str) -> str | None:
    """Why the recorded owner chains do not back the check's proven verdicts, or None.

    Every participant with a proven verdict (Pass or Fail) must have been served by a workload
    whose recorded chain leads to this Run: a Pod check's Pod ``[Run]``; an MPI worker
    ``[MPIJob, Run]`` of an MPIJob recorded with ``[Run]``, whose launcher (the crossNode one,
    or the participant's own perNode one) is ``[Job, that MPIJob, Run]``. Evidence without
    chains (written before they were recorded) proves nothing."""
    proven = [p for p in results.participants if p.verdict != Verdict.INCONCLUSIVE]
    if not proven:
        return None
    by_uid = {w.uid: w for w in results.workloads}
    where = "UnprovenOwnership: "
    missing = "its evidence records no owner chain (written before chains were recorded, or not by the adapter)"
    if results.check.backend == "Pod":
        for p in proven:
            served = by_uid.get(p.workload_uid or "")
            if served is None or served.owners is None:
                return f"{where}participant {p.index}'s Pod: {missing}"
            if not _leads_to_run(served.owners, run_uid, ()):
                return f"{where}participant {p.index}'s Pod was not created by the adapter for this Run"
        return None
    mpijobs = {w.uid: w for w in results.workloads if w.role == "mpijob"}
    if any(w.owners is None for w in mpijobs.values()):
        return f"{where}an MPIJob: {missing}"
    ours = {uid: w for uid, w in mpijobs.items() if _leads_to_run(w.owners, run_uid, ())}
    launchers = [w for w in results.workloads if w.role == "launcher"]
    for p in proven:
        worker = by_uid.get(p.workload_uid or "")
        if worker is None or worker.owners is None:
            return f"{where}participant {p.index}'s worker: {missing}"
        if not _leads_to_run(worker.owners, run_uid, (MPIJOB_KIND,)) or worker.owners[0].uid not in ours:
            return f"{where}participant {p.index}'s worker is not of an MPIJob of this Run"
        world = worker.owners[0].uid
        if scope == "perNode" and ours[world].participant_index != p.index:
            return f"{where}participant {p.index}'s worker is of another participant's MPIJob"
        own = [w for w in launchers if scope == "crossNode" or w.participant_index == p.index]
        if len(own) != 1 or own[0].owners is None:
            return f"{where}participant {p.index}'s launcher: {missing}"
        chain = own[0].owners
        if not _leads_to_run(chain, run_uid, (JOB_KIND, MPIJOB_KIND)) or chain[1].uid != world:
            return f"{where}participant {p.index}'s launcher is not the launcher Job's Pod of its worker's MPIJob"
    return None
