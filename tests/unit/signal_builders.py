"""Builders for the runner/adapter unit tests: real RunnerResult documents and Pod dicts
shaped like the API server's (no cluster, no mocks)."""

import copy
from datetime import UTC, datetime
from typing import Any

from adapter.inputs import Inputs
from shared import keys
from shared.profile import Check
from shared.result import LauncherReport, Output, RunnerIdentity, RunnerResult, render_result
from shared.run import Participant, Verdict

Obj = dict[str, Any]

RUN_UID = "6f1c2d3e-0000-4000-8000-00000000abcd"
RUN_NAME = "gpu-basic-x7k2p"
NAMESPACE = "signal-system"
SNAPSHOT = f"{RUN_NAME}-snapshot"
EMPTY_DIGEST = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
T1 = datetime(2025, 1, 2, 3, 5, 5, tzinfo=UTC)
SCRIPT_DIGEST = "sha256:" + "5c" * 32
"""What the tests' runners report having executed, and the tests' snapshots' script digest."""


def check_doc(**overrides: Any) -> Obj:
    doc: Obj = {"name": "inventory", "scriptKey": "inventory.sh", "backend": "Pod", "backendActiveDeadline": "5m"}
    doc.update(overrides)
    return doc


def make_check(**overrides: Any) -> Check:
    return Check.model_validate(check_doc(**overrides))


def participant_docs(count: int = 2) -> list[Obj]:
    return [{"index": i, "nodeName": f"gpu-{i:03d}", "nodeUID": f"node-uid-{i}"} for i in range(count)]


def participants(count: int = 2) -> tuple[Participant, ...]:
    return tuple(Participant.model_validate(p) for p in participant_docs(count))


def make_inputs(count: int = 2, check_index: int = 0, run_name: str = RUN_NAME, **check: Any) -> Inputs:
    return Inputs(
        run_namespace=NAMESPACE,
        run_name=run_name,
        run_uid=RUN_UID,
        participants=participants(count),
        snapshot=SNAPSHOT,
        check_index=check_index,
        check=make_check(**check),
    )


def run_doc(count: int = 2, checks: list[Obj] | None = None, **meta: Any) -> Obj:
    return copy.deepcopy(
        {
            "apiVersion": keys.API_VERSION,
            "kind": keys.RUN_KIND,
            "metadata": {"name": RUN_NAME, "namespace": NAMESPACE, "uid": RUN_UID, **meta},
            "spec": {
                "checks": checks if checks is not None else [check_doc()],
                "source": {"digest": EMPTY_DIGEST, "snapshotConfigMap": SNAPSHOT},
                "participants": participant_docs(count),
            },
            "status": {"phase": "Running"},
        }
    )


def output(tail: str = "") -> Output:
    return Output(digest=EMPTY_DIGEST, bytes=len(tail.encode()), tail=tail)


def make_result(
    verdict: Verdict = Verdict.PASS,
    *,
    index: int | None = 0,
    node: str = "gpu-000",
    pod_name: str = "pod-0",
    pod_uid: str = "pod-uid-0",
    role: str = "pod",
    exit_code: int | None = 0,
    signal: int | None = None,
    reason: str | None = None,
    measurements: dict[str, Any] | None = None,
    launcher: LauncherReport | None = None,
    stdout: Output | None = None,
    stderr: Output | None = None,
    script_digest: str | None = SCRIPT_DIGEST,
) -> RunnerResult:
    return RunnerResult(
        verdict=verdict,
        reason=reason if reason is not None else f"{verdict.value} reason",
        identity=RunnerIdentity(participant_index=index, node_name=node, pod_name=pod_name, pod_uid=pod_uid, role=role),
        exit_code=exit_code,
        signal=signal,
        measurements=measurements or {},
        stdout=stdout,
        stderr=stderr,
        started_at=T0,
        finished_at=T1,
        launcher=launcher,
        script_digest=script_digest,
    )


def message_of(result: RunnerResult) -> str:
    return render_result(result).decode("utf-8")


def make_pod(
    name: str,
    uid: str,
    node: str | None,
    *,
    labels: dict[str, str] | None = None,
    phase: str = "Succeeded",
    exit_code: int | None = 0,
    message: str | None = None,
    container: str = "runner",
    terminated: bool = True,
    reason: str | None = None,
) -> Obj:
    status: Obj = {"phase": phase}
    if reason:
        status["reason"] = reason
    if terminated:
        term: Obj = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error"}
        if message is not None:
            term["message"] = message
        status["containerStatuses"] = [{"name": container, "state": {"terminated": term}}]
    else:
        status["containerStatuses"] = [{"name": container, "state": {"running": {"startedAt": "2025-01-02T03:04:05Z"}}}]
    spec: Obj = {"containers": [{"name": container, "image": "projectsignal.dev/runner:0.1.0"}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "labels": dict(labels or {})},
        "spec": spec,
        "status": status,
    }


def participant_pod(
    index: int,
    *,
    verdict: Verdict = Verdict.PASS,
    phase: str | None = None,
    exit_code: int | None = None,
    result: RunnerResult | None = None,
    message: str | None = None,
    uid: str | None = None,
    node: str | None = None,
    claims: dict[str, Any] | None = None,
    **result_overrides: Any,
) -> Obj:
    """A finished backend Pod of participant ``index`` whose runner reported ``verdict``;
    ``claims`` overrides the identity fields of that result (index, node, pod_name, ...)."""
    name = f"{RUN_NAME}-c0-p{index}"
    uid = uid or f"pod-uid-{index}"
    node = node or f"gpu-{index:03d}"
    code = 0 if verdict == Verdict.PASS else 1
    if result is None:
        fields: dict[str, Any] = {"index": index, "node": node, "pod_name": name, "pod_uid": uid, "exit_code": code}
        fields.update(result_overrides)
        fields.update(claims or {})
        result = make_result(verdict, **fields)
    return make_pod(
        name,
        uid,
        node,
        labels={keys.RUN_UID_LABEL: RUN_UID, keys.CHECK_LABEL: "inventory", keys.PARTICIPANT_LABEL: str(index)},
        phase=phase or ("Succeeded" if code == 0 else "Failed"),
        exit_code=code if exit_code is None else exit_code,
        message=message if message is not None else message_of(result),
    )
