"""The NCCL-over-InfiniBand example end to end without a cluster: each rank's verdict comes from
running the example's verifier on the logs in tests/data/nccl/ (see test_nccl_ib_example.py
for where their shapes come from); the rank report lines, the launcher's verdict and result
(runner/mpi.py, runner/report.py), the adapter's MPI collection (adapter/collect.py) and the
check evidence are built by the real code the launcher and the adapter run; the Run is then
decided by shared/acceptance.py, its envelopes derived by shared/envelope.py and classified by
shared/classify.py.

IB success -> Passed; socket fall-back -> Failed; one Node missing a result -> Unknown;
evidence older than the freshness window -> Stale; cleanup failure -> Unknown; a replaced
Node (uid changed) -> Unknown.
"""

import copy
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from adapter.collect import collect_mpi
from runner import mpi
from runner.document import Identity
from runner.execute import Outcome
from runner.report import build_result, fit
from shared import snapshot
from shared.classify import classify
from shared.digests import canonical_json, sha256_digest
from shared.envelope import State, ValidationResult, Verification, derive
from shared.evidence import (
    CheckEvidence,
    CheckIdentity,
    CheckResults,
    Cleanup,
    OwnerLink,
    RunIdentity,
    Workload,
    check_verdict,
)
from shared.evidence import to_document as dump
from shared.run import Participant, Verdict
from tests import evidence_builders as eb
from tests.unit.signal_builders import SCRIPT_DIGEST
from tests.unit.test_envelope_builders import NOW, accepted, make_run, read, stamp
from tests.unit.test_nccl_ib_example import DATA, nccl

Obj = dict[str, Any]
JOB = "sig-4f1c2a9b7d3e-c0"
LAUNCHER_NODE = "system-0"
"""The crossNode launcher runs on a Node that is not under test (adapter.workloads)."""
WINDOW = timedelta(days=7)
SETTINGS = nccl.Settings(threshold_gbps=40.0)


NCCL_BUNDLE = {"nccl_ib_allreduce.py": SCRIPT_DIGEST}
"""The nccl-ib Run's snapshot as the adapter records it (key digests); its source digest follows."""


def nccl_run() -> Obj:
    run = make_run()
    run["spec"]["source"]["digest"] = snapshot.bundle_of_digests(NCCL_BUNDLE)
    run["spec"]["profile"]["name"] = "nccl-ib"
    run["spec"]["checks"] = [
        {
            "name": "nccl-ib-allreduce",
            "scriptKey": "nccl_ib_allreduce.py",
            "backend": "MPIJob",
            "gpuCount": 1,
            "backendActiveDeadline": "10m",
            "workload": {"extendedResources": {"rdma/rdma_shared_device_a": 1}, "capabilities": ["IPC_LOCK"]},
            "mpi": {"scope": "crossNode"},  # one NCCL world across the Nodes
        }
    ]
    return run


KEY = "k" * 64
"""The launcher's per-check report key (runner/mpi.py): the rank wrappers sign with it."""


def rank_exit(log_name: str, rank: int) -> tuple[int, str]:
    """What the example script exits with on ``rank`` for that log (0, 1 or 3), and its report line."""
    verdict = nccl.verify(
        nccl.parse_log((DATA / log_name).read_text()), rank=rank, world_size=2, exit_code=0, settings=SETTINGS
    )
    return verdict.exit_code, nccl.RESULT_PREFIX + verdict.outcome


def mpi_evidence(
    run: Obj,
    rank_logs: dict[int, str],
    *,
    finished=NOW,
    cleanup_ok: bool = True,
    workers_on: list[int] | None = None,
) -> Obj:
    """The check evidence the adapter would persist after the ranks ran on those logs."""
    meta = run["metadata"]
    participants = tuple(Participant.model_validate(p) for p in run["spec"]["participants"])
    hosts = [f"{JOB}-worker-{p.index}" for p in participants]
    # mpirun's stdout: each rank's output and its SIGNAL-RANK line (a rank without a log never reported).
    lines, codes = [], []
    for rank, log_name in sorted(rank_logs.items()):
        code, report = rank_exit(log_name, rank)
        codes.append(code)
        # mpirun --tag-output: every line of rank r's stream carries its tag.
        own = [*(DATA / log_name).read_text().splitlines(), report, mpi.rank_line(rank, 2, hosts[rank], code, key=KEY)]
        lines += [f"[1,{rank}]<stdout>:{line}" for line in own]
    mpirun_exit = next((c for c in codes if c), 0) if len(codes) == len(hosts) else 1
    verdict, reason, report = mpi.evaluate_launcher(hosts, mpi.reports_in(lines, KEY), mpirun_exit, False)
    with tempfile.TemporaryDirectory() as work:
        stdout, stderr = Path(work) / "stdout", Path(work) / "stderr"
        stdout.write_text("\n".join(lines) + "\n")
        stderr.write_text("")
        start = (finished - timedelta(minutes=4)).timestamp()
        result = build_result(
            Identity(
                node_name=LAUNCHER_NODE,
                pod_name=f"{JOB}-launcher-x7k2p",
                pod_uid="launcher-uid",
                role="launcher",
            ),
            Outcome(mpirun_exit, None, False, start, start + 120),
            measurements_file=Path(work) / "measurements.json",
            stdout_file=stdout,
            stderr_file=stderr,
            launcher=report,
            verdict=(verdict, reason),
        )._replace(script_digest=SCRIPT_DIGEST)
    # The snapshot the adapter verified: the example's script key, as the runner hashed it.
    bundle = NCCL_BUNDLE
    message = fit(result)
    assert message is not None
    launcher_pod = {
        "metadata": {"name": f"{JOB}-launcher-x7k2p", "uid": "launcher-uid"},
        "spec": {"nodeName": LAUNCHER_NODE},
        "status": {
            "phase": "Succeeded" if verdict == Verdict.PASS else "Failed",
            "containerStatuses": [
                {
                    "name": "runner",
                    "state": {
                        "terminated": {"exitCode": 0 if verdict == Verdict.PASS else 1, "message": message.decode()}
                    },
                }
            ],
        },
    }
    placed = [p for p in participants if workers_on is None or p.index in workers_on]
    workers = [
        {"metadata": {"name": hosts[p.index], "uid": f"worker-uid-{p.index}"}, "spec": {"nodeName": p.node_name}}
        for p in placed
    ]
    results, launcher, _ = collect_mpi(participants, workers, [launcher_pod], script=SCRIPT_DIGEST)
    run_link = OwnerLink(kind="CertificationRun", name=run["metadata"]["name"], uid=run["metadata"]["uid"])
    mpijob_link = OwnerLink(kind="MPIJob", name=JOB, uid="mpijob-uid")
    job_link = OwnerLink(kind="Job", name=f"{JOB}-launcher", uid="job-uid")
    found = [
        Workload(kind="MPIJob", name=JOB, uid="mpijob-uid", role="mpijob", owners=[run_link]),
        Workload(kind="Job", name=f"{JOB}-launcher", uid="job-uid", role="job", owners=[mpijob_link, run_link]),
        Workload(
            kind="Pod",
            name=f"{JOB}-launcher-x7k2p",
            uid="launcher-uid",
            node_name=LAUNCHER_NODE,
            role="launcher",
            owners=[job_link, mpijob_link, run_link],
        ),
        *(
            Workload(
                kind="Pod",
                name=w["metadata"]["name"],
                uid=w["metadata"]["uid"],
                node_name=w["spec"]["nodeName"],
                participant_index=p.index,
                role="worker",
                owners=[mpijob_link, run_link],
            )
            for w, p in zip(workers, placed, strict=True)
        ),
    ]
    overall, why = check_verdict(results)
    check = run["spec"]["checks"][0]
    results_doc = CheckResults(
        run=RunIdentity(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"]),
        check=CheckIdentity(
            index=0,
            name=check["name"],
            backend="MPIJob",
            script_key=check["scriptKey"],
            source_digest=run["spec"]["source"]["digest"],
            bundle=bundle,
            script_digest=SCRIPT_DIGEST,
        ),
        verdict=overall,
        reason=why,
        started_at=stamp(finished - timedelta(minutes=5)),
        collected_at=stamp(finished - timedelta(minutes=1)),
        workloads=found,
        participants=results,
        launcher=launcher,
    )
    workers_gone = [w for w in found if w.role == "worker"] + [found[0]]
    if cleanup_ok:
        cleanup = Cleanup(
            state="Complete",
            message="every workload is gone",
            deleted=workers_gone,
            retained=[],
            finished_at=stamp(finished),
        )
    else:
        cleanup = Cleanup(
            state="Failed",
            message=f"not gone after 60s: Pod {hosts[1]}",
            deleted=[found[0]],
            retained=[w for w in found if w.role == "worker"][-1:],
            finished_at=stamp(finished),
        )
    document = dump(results_doc)
    evidence = CheckEvidence(
        results=results_doc,
        results_digest=sha256_digest(canonical_json(document)),
        results_config_map=f"{meta['name']}-c0-results",
        cleanup=cleanup,
        verdict=overall if cleanup_ok else Verdict.INCONCLUSIVE,
        reason=why,
    )
    return dump(evidence)


def envelopes(run: Obj, documents: list[Obj | None], **kwargs: Any) -> tuple[Obj, list[ValidationResult]]:
    done, cm, _, digest = accepted(run, documents, **kwargs)
    return done, derive(done, read(done, cm, digest), cluster="lab", observed_at=NOW)


def states(results: list[ValidationResult], uids: dict[str, str | None] | None = None) -> dict[str, tuple[State, str]]:
    out = {}
    for r in results:
        uid = (uids or {}).get(r.target.name, r.target.uid)
        c = classify(r, current_node_uid=uid, now=NOW, window=WINDOW)
        out[r.target.name] = (c.state, c.reason)
    return out


IB = {0: "ib_gdrdma.rank0.log", 1: "ib_gdrdma.rank1.log"}


def test_ib_success_is_passed_on_both_nodes() -> None:
    run = nccl_run()
    document = mpi_evidence(run, IB)
    assert document["results"]["launcher"]["launcher"]["worldSize"] == 2
    assert "NCCL-IB-CHECK Pass" in document["results"]["launcher"]["stdout"]["tail"]
    done, results = envelopes(run, [document])
    assert done["status"]["phase"] == "Succeeded"
    assert states(results) == {"gpu-000": (State.PASSED, "CheckPassed"), "gpu-001": (State.PASSED, "CheckPassed")}
    assert {r.check.name for r in results} == {"nccl-ib-allreduce"}
    assert all(r.verification.state == Verification.VERIFIED for r in results)


def test_socket_fallback_is_failed_on_both_nodes() -> None:
    run = nccl_run()
    document = mpi_evidence(run, {0: "socket_fallback.rank0.log", 1: "socket_fallback.rank1.log"})
    assert [p["verdict"] for p in document["results"]["participants"]] == ["Fail", "Fail"]
    done, results = envelopes(run, [document])
    assert done["status"]["phase"] == "Failed"
    assert states(results) == {"gpu-000": (State.FAILED, "CheckFailed"), "gpu-001": (State.FAILED, "CheckFailed")}


@pytest.mark.parametrize("rank0_log", ["mixed_socket.rank0.log", "nccl_warn.rank0.log", "ib_slow.rank0.log"])
def test_a_fault_proven_by_rank_0_is_a_failure(rank0_log: str) -> None:
    run = nccl_run()
    done, results = envelopes(run, [mpi_evidence(run, {0: rank0_log, 1: "ib_gdrdma.rank1.log"})])
    assert done["status"]["phase"] == "Failed"
    got = states(results)
    # Rank 0's Node is proven failed; its peer, whose own part passed, is not claimed healthy.
    assert got["gpu-000"] == (State.FAILED, "CheckFailed")
    assert got["gpu-001"][0] == State.UNKNOWN


@pytest.mark.parametrize("rank0_log", ["single_node.rank0.log", "truncated.rank0.log", "no_debug.rank0.log"])
def test_a_log_that_proves_nothing_is_unknown_never_failed(rank0_log: str) -> None:
    """Exit 3 from rank 0 (its evidence is insufficient): the Run is Inconclusive (retried) and
    the portal shows Unknown for both Nodes, not Failed: a healthy Node is not sent to repair."""
    run = nccl_run()
    document = mpi_evidence(run, {0: rank0_log, 1: "ib_gdrdma.rank1.log"})
    assert document["results"]["launcher"]["reason"].startswith("ScriptInconclusive: rank(s) 0 exited 3")
    assert [p["verdict"] for p in document["results"]["participants"]] == ["Inconclusive", "Inconclusive"]
    done, results = envelopes(run, [document])
    assert done["status"]["phase"] == "Inconclusive"
    assert {s for s, _ in states(results).values()} == {State.UNKNOWN}


def test_partial_targets_are_unknown() -> None:
    run = nccl_run()
    # Rank 1 never reported (its worker died before the rank line): neither Node is proven.
    done, results = envelopes(run, [mpi_evidence(run, {0: "ib_gdrdma.rank0.log"})])
    assert done["status"]["phase"] == "Inconclusive"
    assert {s for s, _ in states(results).values()} == {State.UNKNOWN}
    # No worker ran on one Node.
    done, results = envelopes(run, [mpi_evidence(run, IB, workers_on=[0])])
    assert {s for s, _ in states(results).values()} == {State.UNKNOWN}
    # Evidence that lists one Node only (a participant's result missing) does not verify.
    document = copy.deepcopy(mpi_evidence(run, IB))
    document["results"]["participants"].pop()
    document = eb.seal(document)
    done, results = envelopes(run, [document])
    assert {s for s, _ in states(results).values()} == {State.UNKNOWN}
    assert {r.verification.state for r in results} == {Verification.INCOMPLETE}


def test_stale_evidence_is_stale() -> None:
    run = nccl_run()
    old = NOW - timedelta(days=10)
    _, results = envelopes(run, [mpi_evidence(run, IB, finished=old)], decided=old)
    assert set(states(results).values()) == {(State.STALE, "OlderThanWindow")}


def test_cleanup_failure_is_unknown() -> None:
    run = nccl_run()
    done, results = envelopes(run, [mpi_evidence(run, IB, cleanup_ok=False)])
    assert done["status"]["phase"] == "Inconclusive"
    assert set(states(results).values()) == {(State.UNKNOWN, "CleanupFailed")}


def test_node_replacement_is_unknown() -> None:
    run = nccl_run()
    _, results = envelopes(run, [mpi_evidence(run, IB)])
    got = states(results, uids={"gpu-001": "uid-1-replaced"})
    assert got == {"gpu-000": (State.PASSED, "CheckPassed"), "gpu-001": (State.UNKNOWN, "NodeReplaced")}
    # Replaced before the Run was decided: the Run is not Succeeded and nothing passes.
    done, results = envelopes(run, [mpi_evidence(run, IB)], uids={"gpu-000": "uid-0", "gpu-001": "uid-1-replaced"})
    assert done["status"]["phase"] == "Inconclusive"
    assert states(results, uids={"gpu-001": "uid-1-replaced"})["gpu-001"] == (State.UNKNOWN, "NodeReplaced")
    assert states(results)["gpu-000"][0] == State.UNKNOWN
