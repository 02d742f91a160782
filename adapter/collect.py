"""From observed backend objects to one result per participant. Pure; no I/O.

Fail closed: a participant is Pass only when exactly one Pod (or MPI rank) of this check
served it, on its own Node, and that Pod's runner reported Pass for exactly that identity
(participant index, Node name, Pod name and uid) with exit code 0 and the Pod Succeeded.
A missing, unfinished, malformed, oversized, duplicated or foreign result is Inconclusive;
a well-formed Fail is Fail.

An MPI launcher's report decides the verdicts of the participants it names, so it counts only
from a launcher that ran where no other Node under test could have written it
(``launcher_placement``): a ``crossNode`` launcher on a Node that is none of the participants',
a ``perNode`` launcher on its own participant's Node.
"""

from collections import Counter
from typing import Any, assert_never

from adapter import kueue, workloads
from shared import keys
from shared.evidence import OwnerLink, ParticipantResult, Workload
from shared.limits import EXIT_PYTHON_TOO_OLD
from shared.profile import MpiScope
from shared.result import INCONCLUSIVE_EXIT_CODE, RankResult, ResultError, RunnerResult, parse_result
from shared.run import Participant, Verdict

Obj = dict[str, Any]


def terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in {"Succeeded", "Failed"}


def _runner_status(pod: Obj) -> Obj | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == workloads.CONTAINER:
            terminated = (status.get("state") or {}).get("terminated")
            return terminated if isinstance(terminated, dict) else None
    return None


START_FAILURES = frozenset({"StartError", "ContainerCannotRun", "CreateContainerError"})
"""Container reasons of a runner that never started (the runtime could not exec it)."""


def _runner_cannot_start(pod: Obj, terminated: Obj) -> str | None:
    """Why the runner container never ran its runner, when that is what happened: its command
    could not be started (a check's own image without ``python3``), or the injected runner found
    its ``python3`` too old. None otherwise."""
    container: Obj = next(
        (c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == workloads.CONTAINER), {}
    )
    image = container.get("image", "?")
    injected = workloads.INJECTED_LAUNCH in (container.get("command") or [])
    needs = (
        f"; a check's own image must have {workloads.CHECK_IMAGE_PYTHON} 3.10 or newer on its PATH "
        "(docs/operator-guide.md, 'Your own check image')"
        if injected
        else ""
    )
    if terminated.get("reason") in START_FAILURES:
        detail = " ".join(str(terminated.get("message") or "").split())[:240]
        return f"RunnerCannotStart: image {image} could not start Signal's runner ({detail}){needs}"
    if injected and terminated.get("exitCode") == EXIT_PYTHON_TOO_OLD and not terminated.get("message"):
        return f"RunnerCannotStart: image {image}: its {workloads.CHECK_IMAGE_PYTHON} is older than 3.10{needs}"
    return None


def pod_result(pod: Obj) -> tuple[RunnerResult | None, str]:
    """The runner's result in a terminated Pod, or None and why not."""
    phase = (pod.get("status") or {}).get("phase", "Unknown")
    if phase not in {"Succeeded", "Failed"}:
        gates = {g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or [] if isinstance(g, dict)}
        if kueue.KUEUE_ADMISSION_GATE in gates:
            queue = ((pod.get("metadata") or {}).get("labels") or {}).get(kueue.KUEUE_QUEUE_LABEL, "?")
            return None, (
                f"NotAdmittedByQueue: Kueue never admitted the Pod from queue {queue} (still gated by "
                f"{kueue.KUEUE_ADMISSION_GATE}); check the ClusterQueue's quota and the check's requests"
            )
        return None, f"NotFinished: the Pod is {phase} (it never started, or outlived the wait)"
    terminated = _runner_status(pod)
    reason = (pod.get("status") or {}).get("reason")
    if terminated is None:
        detail = f" ({reason})" if reason else ""
        return None, f"NoResult: the runner container never terminated normally{detail}"
    cannot = _runner_cannot_start(pod, terminated)
    if cannot:
        return None, cannot
    message = terminated.get("message")
    if not message:
        detail = f"; Pod reason {reason}" if reason else ""
        return None, f"NoResult: empty termination message (exit {terminated.get('exitCode')}{detail})"
    try:
        return parse_result(message), ""
    except ResultError as exc:
        return None, f"MalformedResult: {exc}"


def not_admitted(result: ParticipantResult, message: str) -> ParticipantResult:
    """``result``'s participant, Inconclusive: the API server refused its Pod (``message``)."""
    detail = " ".join(message.split())[:400]
    reason = f"NotAdmitted: the API server refused the Pod of participant {result.index}: {detail}"
    return result.model_copy(update={"verdict": Verdict.INCONCLUSIVE, "reason": reason[:512]})


def _base(participant: Participant, verdict: Verdict, reason: str, pod: Obj | None = None) -> ParticipantResult:
    meta = (pod or {}).get("metadata", {})
    return ParticipantResult(
        index=participant.index,
        node_name=participant.node_name,
        node_uid=participant.node_uid,
        verdict=verdict,
        reason=reason[:512],
        workload=meta.get("name"),
        workload_uid=meta.get("uid"),
    )


def script_mismatch(reported: str | None, script: str | None) -> str | None:
    """Why a runner's report of the script it executed does not prove the Run's snapshot ran,
    or None. ``script``: the check's script digest from the verified snapshot (None: the
    snapshot could not be verified)."""
    if script is None:
        return "UnverifiedSnapshot: the Run's script snapshot could not be verified"
    if reported != script:
        return f"ScriptMismatch: the runner executed {reported or 'an unreported script'}, not the snapshot's {script}"
    return None


def _from_result(participant: Participant, pod: Obj, result: RunnerResult, script: str | None) -> ParticipantResult:
    terminated = _runner_status(pod) or {}
    verdict, reason = result.verdict, result.reason
    consistent = (
        result.exit_code == 0
        and terminated.get("exitCode") == 0
        and (pod.get("status") or {}).get("phase") == "Succeeded"
    )
    if verdict == Verdict.PASS and not consistent:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            "InconsistentResult: Pass reported but the script or Pod did not succeed",
        )
    mismatch = script_mismatch(result.script_digest, script)
    if verdict != Verdict.INCONCLUSIVE and mismatch:
        verdict, reason = Verdict.INCONCLUSIVE, mismatch
    base = _base(participant, verdict, reason, pod)
    return base.model_copy(
        update={
            "script_digest": result.script_digest,
            "exit_code": result.exit_code,
            "signal": result.signal,
            "measurements": result.measurements,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "started_at": result.started_at,
            "finished_at": result.finished_at,
        }
    )


def foreign(result: RunnerResult, pod: Obj, participant: Participant) -> str | None:
    """Why ``result`` does not belong to ``pod`` serving ``participant``, or None."""
    meta, spec = pod["metadata"], pod.get("spec", {})
    identity = result.identity
    if identity.role != "pod" or identity.participant_index != participant.index:
        return f"claims participant {identity.participant_index} ({identity.role}), not {participant.index}"
    if identity.node_name != participant.node_name or spec.get("nodeName") != participant.node_name:
        return f"claims Node {identity.node_name!r}; the participant is {participant.node_name!r}"
    if identity.pod_uid != meta.get("uid") or identity.pod_name != meta.get("name"):
        return f"claims Pod {identity.pod_name}/{identity.pod_uid}, not {meta.get('name')}/{meta.get('uid')}"
    return None


def collect_pods(
    participants: tuple[Participant, ...], pods: list[Obj], *, script: str | None
) -> list[ParticipantResult]:
    """One result per participant from the check's Pods (Pod backend); a verdict counts only
    from a runner that executed ``script`` (``script_mismatch``)."""
    by_index: dict[int, list[Obj]] = {}
    for pod in pods:
        label = pod["metadata"].get("labels", {}).get(keys.PARTICIPANT_LABEL, "")
        if label.isdigit():
            by_index.setdefault(int(label), []).append(pod)
    parsed = {pod["metadata"]["uid"]: pod_result(pod) for pod in pods}
    claims = Counter((r.identity.participant_index, r.identity.pod_uid) for r, _ in parsed.values() if r is not None)
    claimed_indexes = Counter(r.identity.participant_index for r, _ in parsed.values() if r is not None)
    results = []
    for participant in sorted(participants, key=lambda p: p.index):
        candidates = by_index.get(participant.index, [])
        if not candidates:
            results.append(_base(participant, Verdict.INCONCLUSIVE, "NoWorkload: no Pod of this check served it"))
            continue
        if len(candidates) > 1:
            results.append(_base(participant, Verdict.INCONCLUSIVE, "DuplicateWorkload: more than one Pod served it"))
            continue
        pod = candidates[0]
        result, why = parsed[pod["metadata"]["uid"]]
        if result is None:
            results.append(_base(participant, Verdict.INCONCLUSIVE, why, pod))
            continue
        mismatch = foreign(result, pod, participant)
        if mismatch:
            results.append(_base(participant, Verdict.INCONCLUSIVE, f"ForeignResult: {mismatch}", pod))
            continue
        key = (result.identity.participant_index, result.identity.pod_uid)
        if claims[key] > 1 or claimed_indexes[participant.index] > 1:
            results.append(_base(participant, Verdict.INCONCLUSIVE, "DuplicateResult: identity claimed twice", pod))
            continue
        results.append(_from_result(participant, pod, result, script))
    return results


def pod_workloads(pods: list[Obj], owners: list[OwnerLink] | None = None) -> list[Workload]:
    """The Pods of a Pod check as evidence workloads, each with ``owners``, the chain the
    adapter verified for them (``shared.ownership.run_chain``)."""
    found = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        label = pod["metadata"].get("labels", {}).get(keys.PARTICIPANT_LABEL, "")
        found.append(
            Workload(
                kind="Pod",
                name=pod["metadata"]["name"],
                uid=pod["metadata"]["uid"],
                node_name=pod.get("spec", {}).get("nodeName"),
                participant_index=int(label) if label.isdigit() else None,
                role="participant",
                owners=owners,
            )
        )
    return found


def launcher_placement(node: str | None, participants: tuple[Participant, ...], scope: MpiScope) -> str | None:
    """Why a launcher that ran on ``node`` may not speak for ``participants``, or None. The
    Node a launcher runs on controls its report (its root writes the termination log, its
    kubelet the Pod's status): a ``crossNode`` launcher must have run on a Node that is none of
    the participants' (one of them would speak for the others); a ``perNode`` launcher
    (one participant) on that participant's own Node."""
    own = {p.node_name: p.index for p in participants}
    if not node:
        return "UntrustedLauncher: the launcher Pod names no Node"
    if scope == "crossNode":
        if node in own:
            return f"UntrustedLauncher: the launcher ran on participant {own[node]}'s Node {node!r}, a Node under test"
        return None
    if scope == "perNode":
        if len(own) != 1 or node not in own:
            return f"UntrustedLauncher: the launcher ran on Node {node!r}, not its participant's"
        return None
    assert_never(scope)


def trusted_launcher(
    participants: tuple[Participant, ...], launcher_pods: list[Obj], scope: MpiScope, script: str | None
) -> tuple[RunnerResult | None, str]:
    """The one finished launcher's report, if it is its own Pod's, from a Node that may speak
    for ``participants`` (``launcher_placement``), and it ran ``script`` (``script_mismatch``;
    its ranks each reported the same to it); a Pass its Pod does not bear out is
    Inconclusive. Else None and why."""
    finished = [p for p in launcher_pods if terminal(p)]
    if len(launcher_pods) > 1:
        return None, f"DuplicateLauncher: {len(launcher_pods)} launcher Pods"
    if not finished:
        return None, "NoLauncher: no launcher Pod finished"
    pod = finished[0]
    launcher, why = pod_result(pod)
    if launcher is None:
        return None, why
    identity, node = launcher.identity, pod.get("spec", {}).get("nodeName")
    if identity.role != "launcher" or launcher.launcher is None:
        return None, "ForeignResult: the launcher's result is not a launcher report"
    if identity.pod_uid != pod["metadata"]["uid"] or identity.node_name != node:
        return None, "ForeignResult: the launcher's result names another Pod or Node"
    misplaced = launcher_placement(node, participants, scope)
    if misplaced:
        return None, misplaced
    mismatch = script_mismatch(launcher.script_digest, script)
    if mismatch:
        return None, mismatch
    if launcher.verdict == Verdict.PASS:
        terminated = _runner_status(pod) or {}
        phase = (pod.get("status") or {}).get("phase")
        if not (launcher.exit_code == 0 and terminated.get("exitCode") == 0 and phase == "Succeeded"):
            reason = "InconsistentResult: the launcher reported Pass but its Pod did not succeed"
            launcher = launcher.model_copy(update={"verdict": Verdict.INCONCLUSIVE, "reason": reason})
    return launcher, why


def collect_mpi(
    participants: tuple[Participant, ...],
    workers: list[Obj],
    launcher_pods: list[Obj],
    slots: int = 1,
    *,
    scope: MpiScope = "crossNode",
    script: str | None,
) -> tuple[list[ParticipantResult], RunnerResult | None, str]:
    """One result per participant from an MPIJob's workers and its launcher's report, each
    participant bound to the ranks that ran on its own worker (``slots`` of them). For a
    perNode check, call it once per participant with that participant's MPIJob only and
    ``scope="perNode"``; the launcher's Node must fit ``scope`` (``launcher_placement``).
    Returns (results, the launcher's result or None, why there is none)."""
    launcher, why = trusted_launcher(participants, launcher_pods, scope, script)
    ranks: dict[str, list[RankResult]] = {}
    for rank in launcher.launcher.ranks if launcher and launcher.launcher else []:
        ranks.setdefault(rank.host, []).append(rank)
    by_node: dict[str, list[Obj]] = {}
    for worker in workers:
        by_node.setdefault(worker.get("spec", {}).get("nodeName") or "", []).append(worker)
    results = []
    for participant in sorted(participants, key=lambda p: p.index):
        placed = by_node.get(participant.node_name, [])
        if len(placed) != 1:
            reason = "NoWorkload: no worker ran on its Node" if not placed else "DuplicateWorkload: several workers"
            results.append(_base(participant, Verdict.INCONCLUSIVE, reason))
            continue
        worker = placed[0]
        if launcher is None:
            results.append(_base(participant, Verdict.INCONCLUSIVE, why, worker))
            continue
        own = sorted(ranks.get(worker["metadata"]["name"], []), key=lambda r: r.rank)
        # A rank that exits INCONCLUSIVE_EXIT_CODE says "my evidence is insufficient", not a fault.
        failed = [r for r in own if r.exit_code not in (0, INCONCLUSIVE_EXIT_CODE)]
        if not own:
            results.append(_base(participant, Verdict.INCONCLUSIVE, "MissingRank: no rank reported from it", worker))
        elif failed:
            listed = ", ".join(f"rank {r.rank} exited {r.exit_code}" for r in failed[:4])
            results.append(
                _base(participant, Verdict.FAIL, f"Failed: {listed}", worker).model_copy(
                    update={"script_digest": launcher.script_digest}
                )
            )
        elif launcher.verdict != Verdict.PASS:
            results.append(_base(participant, Verdict.INCONCLUSIVE, f"Launcher: {launcher.reason}", worker))
        elif len(own) != slots:
            reason = f"MissingRank: {len(own)} of {slots} ranks reported from it"
            results.append(_base(participant, Verdict.INCONCLUSIVE, reason, worker))
        else:
            numbers = ", ".join(str(r.rank) for r in own)
            results.append(
                _base(participant, Verdict.PASS, f"Succeeded: rank(s) {numbers} exited 0", worker).model_copy(
                    update={"exit_code": 0, "script_digest": launcher.script_digest}
                )
            )
    return results, launcher, why


def with_launcher_output(result: ParticipantResult, launcher: RunnerResult | None) -> ParticipantResult:
    """A perNode participant's result carries its own launcher's measurements and output
    tails (its local world's rank 0), as a Pod check's participant carries its Pod's."""
    if launcher is None:
        return result
    return result.model_copy(
        update={
            "measurements": launcher.measurements,
            "stdout": launcher.stdout,
            "stderr": launcher.stderr,
            "started_at": launcher.started_at,
            "finished_at": launcher.finished_at,
        }
    )
