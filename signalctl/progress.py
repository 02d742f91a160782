"""Progress of each check of each Run, Node by Node: what ``signalctl request --wait`` and the demo
print while a certification runs (``Run X: check 2/3 mpi (MPIJob): 1/2 Nodes done``), and each
check's verdict as its evidence lands.

A participant's part of a running check is done when its backend workload has ended: its Pod
(Pod checks, or the launcher of a per-Node MPI world) has terminated, or, for an MPI world across
the Nodes, the one launcher has. A check is finished when its evidence ConfigMap exists; its
verdicts are what that evidence supports under the controller's own acceptance rules
(``assess_check``), never the verdict the document states: the adapter's identity writes it, and a
document that does not validate shows Inconclusive with its problem, not a crash or a Pass.
:func:`check_states` and :class:`Tracker` are pure; :func:`observe` does the reads (through any
client with ``get(path, **params)``; a caller that may not list Pods still sees verdicts)."""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared import keys
from shared.acceptance import CheckInput, assess_check
from shared.ownership import is_mirror
from shared.run import Verdict

Obj = dict[str, Any]
Get = Callable[..., Awaitable[Obj]]
MPI_ROLE_LABEL = "training.kubeflow.org/job-role"
ENDED = {"Succeeded", "Failed"}


evidence_name = keys.check_evidence_name


@dataclass(frozen=True)
class Finished:
    """A check's evidence: its verdict, each participant's, and the evidence digest."""

    verdict: str
    participants: tuple[tuple[str, str], ...]
    """(Node name, verdict) per participant."""
    digest: str
    """Empty when the evidence did not decode."""
    problem: str | None = None
    """Why the evidence does not support a verdict (then Inconclusive)."""


@dataclass(frozen=True)
class CheckState:
    run: str
    index: int
    count: int
    name: str
    backend: str
    total: int
    done: int
    started: bool
    finished: Finished | None = None

    def head(self) -> str:
        return f"Run {self.run}: check {self.index + 1}/{self.count} {self.name} ({self.backend})"

    def progress(self) -> str:
        """The Nodes-done line (a finished check's: all of them)."""
        return f"{self.head()}: {self.done}/{self.total} Nodes done"

    def line(self) -> str:
        if self.finished is not None:
            finished = self.finished
            nodes = ", ".join(f"{node} {verdict}" for node, verdict in finished.participants)
            digest = f"{finished.digest[:19]}..." if finished.digest else "<unreadable>"
            problem = f" ({finished.problem})" if finished.problem else ""
            return f"{self.head()}: {finished.verdict}{problem} [{nodes}] evidence {digest}"
        if not self.started:
            return f"{self.head()}: waiting"
        return self.progress()


def _done_participants(pods: Sequence[Obj], participants: set[int]) -> set[int]:
    done: set[int] = set()
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(MPI_ROLE_LABEL) == "worker" or (pod.get("status") or {}).get("phase") not in ENDED:
            continue
        if is_mirror(pod):  # a kubelet's look-alike (shared/ownership.py) shows no progress
            continue
        index = labels.get(keys.PARTICIPANT_LABEL)
        if index is None:  # one launcher for the whole world across the Nodes
            done |= participants
        elif index.isdigit() and int(index) in participants:
            done.add(int(index))
    return done


def check_states(run: Obj, pods: Sequence[Obj], evidence: dict[int, Finished]) -> list[CheckState]:
    """Every check of ``run``: finished (``evidence`` by check index), running (its backend Pods
    among ``pods``, matched by the Run's uid and the check's name), or waiting."""
    name, uid = run["metadata"]["name"], run["metadata"].get("uid")
    participants = {int(p["index"]) for p in run["spec"].get("participants") or []}
    checks = run["spec"].get("checks") or []
    states = []
    for index, check in enumerate(checks):
        mine = [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get(keys.RUN_UID_LABEL) == uid
            and (p["metadata"].get("labels") or {}).get(keys.CHECK_LABEL) == check["name"]
        ]
        done = _done_participants(mine, participants)
        states.append(
            CheckState(
                run=name,
                index=index,
                count=len(checks),
                name=check["name"],
                backend=check.get("backend", ""),
                total=len(participants),
                done=len(participants) if index in evidence else len(done),
                started=bool(mine) or index in evidence,
                finished=evidence.get(index),
            )
        )
    return states


@dataclass
class Tracker:
    """Prints each check's state once per change. A check first seen already finished (its Pods
    all ended between two looks) gets its Nodes-done line before its verdict, so every check
    shows the same two steps however fast it ran."""

    shown: dict[tuple[str, int], str] = field(default_factory=dict)
    evidence: dict[tuple[str, int], Finished] = field(default_factory=dict)

    def changes(self, states: Sequence[CheckState]) -> list[str]:
        lines = []
        for state in states:
            line = state.line()
            if not state.started and (state.run, state.index) not in self.shown:
                self.shown[(state.run, state.index)] = line  # "waiting" is not worth a line
                continue
            before = self.shown.get((state.run, state.index))
            if before != line:
                if state.finished is not None and before in (None, f"{state.head()}: waiting"):
                    lines.append(state.progress())
                self.shown[(state.run, state.index)] = line
                lines.append(line)
        return lines


def finished_from(run: Obj, index: int, config_map: Obj) -> Finished:
    """Check ``index``'s verdicts from its evidence ConfigMap, re-validated as the controller
    does (``assess_check``): evidence that does not validate is Inconclusive for every
    participant, with its problem."""
    outcome = assess_check(run, CheckInput(index, evidence_name(run["metadata"]["name"], index), config_map))
    verdicts = outcome.participant_verdicts
    participants = tuple(
        (p["nodeName"], verdicts.get(p["index"], Verdict.INCONCLUSIVE).value)
        for p in sorted(run["spec"].get("participants") or [], key=lambda p: p["index"])
    )
    return Finished(outcome.verdict.value, participants, outcome.digest or "", outcome.problem)


async def observe(
    get: Get, namespace: str, runs: Sequence[Obj], tracker: Tracker, errors: tuple[type[Exception], ...]
) -> list[str]:
    """Read the backend Pods and the evidence that has not landed yet; the lines that changed.
    ``errors``: the client's API error types (a read that fails just shows less)."""
    try:
        listing = await get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"{keys.COMPONENT_LABEL}=backend")
        pods: list[Obj] = listing.get("items", [])
    except errors:
        pods = []
    lines: list[str] = []
    states: list[CheckState] = []
    for run in sorted(runs, key=lambda r: r["metadata"]["name"]):
        name = run["metadata"]["name"]
        for index in range(len(run["spec"].get("checks") or [])):
            if (name, index) in tracker.evidence:
                continue
            try:
                config_map = await get(f"/api/v1/namespaces/{namespace}/configmaps/{evidence_name(name, index)}")
            except errors:
                continue
            tracker.evidence[(name, index)] = finished_from(run, index, config_map)
        evidence = {i: f for (r, i), f in tracker.evidence.items() if r == name}
        states += check_states(run, pods, evidence)
    return lines + tracker.changes(states)
