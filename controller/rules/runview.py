"""A CertificationRun as the controller reads it: parsed once, when the Run cache takes the
object (controller/reconcile/state.py), into a frozen view with typed fields, instead of ``run["spec"]``
and ``(run.get("status") or {})`` lookups at every use. Pure; no I/O.

The view keeps the object it was parsed from (``raw``): writes need its resourceVersion and
uid, evidence and Events its whole identity. Parsing never fails: the API server's schema
already refuses most bad shapes, and what is left (a status of the wrong shape, a startTime
that is not a time) is recorded in ``problem``, so the loop ends that Run (``Inconclusive``,
reason ``MalformedRun``) instead of leaving it out of the cache, where nothing would ever
look at it again (issue 13)."""

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.cachetransform import pruned
from shared.run import TERMINAL_PHASES, Phase, may_have_mpijobs

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WorkflowRef:
    """The Workflow a Run recorded in ``status.workflow`` (its name and uid)."""

    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class ParticipantRef:
    """One admitted Node of a Run: its index, name and immutable uid (``spec.participants``)."""

    index: int
    node_name: str
    node_uid: str


@dataclass(frozen=True, slots=True)
class RunView:
    raw: Obj = field(repr=False, compare=False)
    name: str
    namespace: str
    uid: str
    resource_version: str
    generation: int | None
    labels: Mapping[str, str]
    profile_name: str
    profile_uid: str
    participants: tuple[ParticipantRef, ...]
    """In index order."""
    check_names: tuple[str, ...]
    may_have_mpijobs: bool
    """Unless every check is a Pod check (shared/run.may_have_mpijobs): then the Run's backend
    workloads are listed without MPIJobs, and a cluster without the MPIJob CRD serves it."""
    source_digest: str
    snapshot: str
    """The Run-owned snapshot ConfigMap of its source."""
    attempt: int
    cancel: bool
    release: bool
    suite_deadline_seconds: int | None
    phase: str
    """A ``Phase`` value (Pending when unset); an unknown value is kept as it is."""
    conditions: tuple[Obj, ...]
    start_time: datetime | None
    completion_time: str
    workflow: WorkflowRef | None
    workflow_resubmits: int
    problem: str | None = None
    """Why this Run cannot be reconciled as it is (None: it can)."""

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def condition(self, type_: str) -> Obj | None:
        return next((c for c in self.conditions if c.get("type") == type_), None)

    def is_true(self, type_: str) -> bool:
        found = self.condition(type_)
        return found is not None and found.get("status") == "True"


def _mapping(value: Any, where: str, problems: list[str]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(f"{where} is a {type(value).__name__}, not an object")
        return {}
    return value


def _int(value: Any, where: str, problems: list[str], default: int | None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{where} is {value!r}, not an integer")
        return default
    return value


def _time(value: Any, where: str, problems: list[str]) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        problems.append(f"{where} is {value!r}, not an RFC 3339 time")
        return None


def _conditions(value: Any, problems: list[str]) -> tuple[Obj, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        problems.append("status.conditions is not a list of objects")
        return ()
    return tuple(value)


def _workflow(value: Any, problems: list[str]) -> WorkflowRef | None:
    ref = _mapping(value, "status.workflow", problems)
    name, uid = ref.get("name"), ref.get("uid")
    if not ref or not uid:
        return None
    if not isinstance(name, str) or not isinstance(uid, str) or not name:
        problems.append("status.workflow needs a string name and uid")
        return None
    return WorkflowRef(name, uid)


def _participants(value: Any, problems: list[str]) -> tuple[ParticipantRef, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append("spec.participants is not a list")
        return ()
    found = []
    for entry in value:
        index, name, uid = (
            entry.get(k) if isinstance(entry, Mapping) else None for k in ("index", "nodeName", "nodeUID")
        )
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not isinstance(name, str)
            or not isinstance(uid, str)
        ):
            problems.append("spec.participants needs an integer index, a nodeName and a nodeUID in every entry")
            return ()
        # Interned, and written back into the kept object: the same Node's name and uid in every
        # cached Run and in the Node cache are then one string each (10,000 Nodes, 500 Runs of
        # 64: about 9 KiB less per Run). Equal values: the object reads the same.
        name, uid = sys.intern(name), sys.intern(uid)
        if isinstance(entry, dict):
            entry["nodeName"], entry["nodeUID"] = name, uid
        found.append(ParticipantRef(index, name, uid))
    return tuple(sorted(found, key=lambda p: p.index))


def _check_names(value: Any, problems: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(c, Mapping) and isinstance(c.get("name"), str) for c in value):
        problems.append("spec.checks needs a name in every entry")
        return ()
    return tuple(str(c["name"]) for c in value)


def lean(obj: Mapping[str, Any]) -> Obj:
    """A shallow copy of ``obj`` without ``metadata.managedFields``: the API server's record of
    who wrote which field, which nothing in the controller reads and which, cached for every
    Run and Workflow, costs memory (on a Workflow Argo has written, more than the rest of it)."""
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return dict(obj)


PARTICIPANT_DROPPED = ("capacity", "allocatable")
"""What the Run cache drops of each ``spec.participants[]`` entry: the Node's resources at
admission (half a 64-Node Run's cached size), which the controller never reads back (the busy
check reads the Node cache's; the adapter and signalctl read Runs uncached). Reading one from a
cached Run raises (shared/cachetransform.py), so a new reader fails its tests instead of deciding on
an empty value."""


def cached_form(obj: Mapping[str, Any]) -> Obj:
    """What the Run cache keeps of a raw Run: ``lean``, its participants without
    ``PARTICIPANT_DROPPED``."""
    kept = lean(obj)
    spec = kept.get("spec")
    if isinstance(spec, Mapping) and isinstance(spec.get("participants"), list):
        entries = [
            pruned(p, PARTICIPANT_DROPPED, "spec.participants[]") if isinstance(p, Mapping) else p
            for p in spec["participants"]
        ]
        kept["spec"] = {**spec, "participants": entries}
    return kept


def run_view(obj: Mapping[str, Any]) -> RunView:
    """Parse a raw Run (never raises; see ``RunView.problem``); ``raw`` is its ``cached_form``."""
    problems: list[str] = []
    raw = cached_form(obj)
    meta = _mapping(raw.get("metadata"), "metadata", problems)
    spec = _mapping(raw.get("spec"), "spec", problems)
    status = _mapping(raw.get("status"), "status", problems)
    profile = _mapping(spec.get("profile"), "spec.profile", problems)
    source = _mapping(spec.get("source"), "spec.source", problems)
    labels = _mapping(meta.get("labels"), "metadata.labels", problems)
    phase = status.get("phase") or Phase.PENDING.value
    started = _time(status.get("startTime"), "status.startTime", problems)
    deadline = _int(spec.get("suiteDeadlineSeconds"), "spec.suiteDeadlineSeconds", problems, None)
    if phase == Phase.RUNNING and started is not None and deadline is None:
        problems.append("a Running Run has no spec.suiteDeadlineSeconds")
    return RunView(
        raw=raw,
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        generation=_int(meta.get("generation"), "metadata.generation", problems, None),
        labels={str(k): str(v) for k, v in labels.items() if v is not None},
        profile_name=str(profile.get("name") or ""),
        profile_uid=str(profile.get("uid") or ""),
        participants=_participants(spec.get("participants"), problems),
        check_names=_check_names(spec.get("checks"), problems),
        may_have_mpijobs=may_have_mpijobs(spec.get("checks")),
        source_digest=str(source.get("digest") or ""),
        snapshot=str(source.get("snapshotConfigMap") or ""),
        attempt=_int(spec.get("attempt"), "spec.attempt", problems, 1) or 1,
        cancel=spec.get("cancel") is True,
        release=spec.get("release") is True,
        suite_deadline_seconds=deadline,
        phase=str(phase),
        conditions=_conditions(status.get("conditions"), problems),
        start_time=started,
        completion_time=str(status.get("completionTime") or ""),
        workflow=_workflow(status.get("workflow"), problems),
        workflow_resubmits=_int(status.get("workflowResubmits"), "status.workflowResubmits", problems, 0) or 0,
        problem="; ".join(problems) or None,
    )
