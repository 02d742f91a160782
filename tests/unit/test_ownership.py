"""Whose workload is it (shared/ownership.py, issue 42 H-B): a backend Pod counts only when it
is no mirror Pod and its controller owner chain leads to this Run, and acceptance re-checks the
chain the adapter recorded. A kubelet can create a mirror Pod with any labels and write its
status: labels, name, image and Node prove nothing."""

import copy
from typing import Any

import pytest

from adapter.collect import collect_mpi
from shared import keys, ownership
from shared.acceptance import validate_check
from shared.evidence import OwnerLink
from shared.run import Verdict
from signalctl.progress import check_states
from tests import evidence_builders as eb
from tests.unit.signal_builders import SCRIPT_DIGEST, participants
from tests.unit.test_acceptance_rules import NODES, make_run, mpi_evidence, pernode_evidence, plain
from tests.unit.test_adapter_shapes import JOB, TRUSTED, launcher, worker

Obj = dict[str, Any]
RUN, RUN_UID = "r1", "run-uid"


def mpijob(uid: str = "mpijob-uid") -> Obj:
    owner = {"apiVersion": keys.API_VERSION, "kind": keys.RUN_KIND, "name": RUN, "uid": RUN_UID}
    return {"metadata": {"name": JOB, "uid": uid, "ownerReferences": [owner]}}


def controlled(obj: Obj, kind: str, owner: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    ref = {"kind": kind, "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"], "controller": True}
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


def launcher_job(of: Obj, uid: str = "job-uid") -> Obj:
    return controlled({"metadata": {"name": f"{JOB}-launcher", "uid": uid}}, "MPIJob", of)


def launcher_pod(job: Obj, ranks: list[tuple[int, str, int]], hosts: list[str], node: str = TRUSTED) -> Obj:
    pod = controlled(launcher(JOB, node, ranks, hosts, len(ranks)), "Job", job)
    pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = job["metadata"]["uid"]
    return pod


def mirror(pod: Obj, node: str) -> Obj:
    """What a kubelet may create with its own credential: any labels, its own Node, its status."""
    forged = copy.deepcopy(pod)
    forged["metadata"]["annotations"] = {ownership.MIRROR_ANNOTATION: "forged"}
    forged["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": "node-uid", "controller": True}
    ]
    return forged


HOSTS = [f"{JOB}-worker-0", f"{JOB}-worker-1"]
ALL_PASS = [(0, HOSTS[0], 0), (1, HOSTS[1], 0)]


def test_the_real_launcher_chain_is_job_mpijob_run() -> None:
    job = mpijob()
    run_chain = ownership.run_chain(job, RUN, RUN_UID)
    assert run_chain == [OwnerLink(kind=keys.RUN_KIND, name=RUN, uid=RUN_UID)]
    lj = launcher_job(job)
    chain = ownership.launcher_chain(launcher_pod(lj, ALL_PASS, HOSTS), lj, job, run_chain)
    assert chain is not None
    assert [(c.kind, c.uid) for c in chain] == [("Job", "job-uid"), ("MPIJob", "mpijob-uid"), (keys.RUN_KIND, RUN_UID)]
    w = controlled(worker(HOSTS[0], "gpu-000", "w0"), "MPIJob", job)
    assert [c.kind for c in ownership.worker_chain(w, job, run_chain) or []] == ["MPIJob", keys.RUN_KIND]


def _refusals() -> list[Any]:
    job = mpijob()
    lj = launcher_job(job)
    real = launcher_pod(lj, ALL_PASS, HOSTS)
    other_job = launcher_job(mpijob("another-mpijob"), uid="job-uid")
    relabelled = copy.deepcopy(real)
    relabelled["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "another-job"
    unlabelled = copy.deepcopy(real)
    del unlabelled["metadata"]["labels"]["batch.kubernetes.io/controller-uid"]
    mirrored_with_chain = copy.deepcopy(real)
    mirrored_with_chain["metadata"]["annotations"] = {ownership.MIRROR_ANNOTATION: "x"}
    return [
        pytest.param(mirror(real, TRUSTED), lj, id="a mirror Pod with the launcher's labels"),
        pytest.param(mirrored_with_chain, lj, id="a mirror Pod, whatever its ownerReferences"),
        pytest.param(controlled(real, "Job", launcher_job(job, uid="forged-job")), lj, id="a Pod of another Job"),
        pytest.param(real, other_job, id="a Job of another MPIJob"),
        pytest.param(real, None, id="no launcher Job at all"),
        pytest.param(relabelled, lj, id="the Job controller's uid label names another Job"),
        pytest.param(unlabelled, lj, id="no Job controller's uid label"),
    ]


@pytest.mark.parametrize(("pod", "job_obj"), _refusals())
def test_a_launcher_not_made_for_this_mpijob_is_refused(pod: Obj, job_obj: Obj | None) -> None:
    job = mpijob()
    assert ownership.launcher_chain(pod, job_obj, job, ownership.run_chain(job, RUN, RUN_UID) or []) is None


def test_only_the_adapters_own_pods_and_mpijobs_lead_to_the_run() -> None:
    job = mpijob()
    assert ownership.run_chain(mirror(job, "gpu-009"), RUN, RUN_UID) is None
    two = copy.deepcopy(job)
    two["metadata"]["ownerReferences"].append({"kind": "Node", "name": "gpu-009", "uid": "n"})
    assert ownership.run_chain(two, RUN, RUN_UID) is None
    assert ownership.run_chain(job, RUN, "another-run") is None
    w = worker(HOSTS[0], "gpu-000", "w0")
    assert ownership.worker_chain(mirror(controlled(w, "MPIJob", job), "gpu-000"), job, []) is None
    assert ownership.worker_chain(controlled(w, "MPIJob", mpijob("other")), job, []) is None


def test_a_mirror_launcher_beside_the_real_one_changes_nothing_once_filtered() -> None:
    """What the adapter now hands collect_mpi: the chained launchers only. The forged report
    (every rank exited 0) from an idle Node's mirror Pod is dropped; the real launcher's Fail stands."""
    job = mpijob()
    lj = launcher_job(job)
    chain = ownership.run_chain(job, RUN, RUN_UID) or []
    real = launcher_pod(lj, [(0, HOSTS[0], 0), (1, HOSTS[1], 7)], HOSTS)
    forged = mirror(launcher_pod(lj, ALL_PASS, HOSTS, node="idle-9"), "idle-9")
    kept = [p for p in (forged, real) if ownership.launcher_chain(p, lj, job, chain) is not None]
    assert kept == [real]
    workers = [worker(HOSTS[0], "gpu-000", "w0"), worker(HOSTS[1], "gpu-001", "w1")]
    results, _, _ = collect_mpi(participants(2), workers, kept, script=SCRIPT_DIGEST)
    assert [r.verdict for r in results] == [Verdict.INCONCLUSIVE, Verdict.FAIL]


# ------------------------------------------------------------------ acceptance re-checks the chains


def _strip_owners(document: Obj) -> Obj:
    doc = plain(document)
    for w in doc["results"]["workloads"] + doc["cleanup"]["deleted"]:
        w.pop("owners", None)
    return eb.seal(doc)


@pytest.mark.parametrize("backend", ["Pod", "MPIJob-crossNode", "MPIJob-perNode"])
def test_evidence_without_owner_chains_proves_nothing(backend: str) -> None:
    """Evidence written before chains were recorded still reads (no MalformedEvidence) but its
    verdicts are Inconclusive: nothing shows that its workloads were this Run's."""
    if backend == "Pod":
        run = make_run()
        document = eb.check_evidence(run)
    elif backend == "MPIJob-crossNode":
        run = make_run(backend="MPIJob")
        document = mpi_evidence(run)
    else:
        run = make_run(backend="MPIJob", scope="perNode")
        document = pernode_evidence(run)
    assert validate_check(run, 0, document)[:2] == (Verdict.PASS, None)
    verdict, problem, _ = validate_check(run, 0, _strip_owners(document))
    assert verdict == Verdict.INCONCLUSIVE
    assert problem is not None
    assert problem.startswith("UnprovenOwnership: "), problem
    assert "records no owner chain" in problem


def _launcher(doc: Obj, index: int | None = None) -> Obj:
    return next(
        w
        for w in doc["results"]["workloads"]
        if w["role"] == "launcher" and (index is None or w["participantIndex"] == index)
    )


def _forge_crossnode_launcher_of_another_mpijob(doc: Obj, run: Obj) -> None:
    _launcher(doc)["owners"] = eb.mpi_chain(run, "some-other-mpijob", launcher=True)


def _forge_crossnode_launcher_of_a_node(doc: Obj, run: Obj) -> None:
    _launcher(doc)["owners"] = [{"kind": "Node", "name": "idle-9", "uid": "node-uid"}]


def _forge_worker_of_another_run(doc: Obj, run: Obj) -> None:
    other = {**run, "metadata": {**run["metadata"], "uid": "another-run"}}
    for w in doc["results"]["workloads"]:
        if w["role"] == "worker":
            w["owners"] = eb.mpi_chain(other, "mpijob-uid")


def _forge_mpijob_of_another_run(doc: Obj, run: Obj) -> None:
    for w in doc["results"]["workloads"]:
        if w["role"] == "mpijob":
            w["owners"] = [{"kind": keys.RUN_KIND, "name": "x", "uid": "another-run"}]


def _forge_pernode_launcher_of_the_neighbour(doc: Obj, run: Obj) -> None:
    _launcher(doc, 1)["owners"] = eb.mpi_chain(run, "mpijob-uid-0", launcher=True)


@pytest.mark.parametrize(
    ("scope", "forge"),
    [
        pytest.param("crossNode", _forge_crossnode_launcher_of_another_mpijob, id="launcher of another MPIJob"),
        pytest.param("crossNode", _forge_crossnode_launcher_of_a_node, id="launcher owned by a Node (mirror Pod)"),
        pytest.param("crossNode", _forge_worker_of_another_run, id="workers of another Run"),
        pytest.param("crossNode", _forge_mpijob_of_another_run, id="MPIJob of another Run"),
        pytest.param("perNode", _forge_pernode_launcher_of_the_neighbour, id="perNode launcher of the neighbour"),
    ],
)
def test_a_recorded_chain_that_leads_elsewhere_proves_nothing(scope: str, forge: Any) -> None:
    run = make_run(backend="MPIJob", scope=scope)
    doc = plain(mpi_evidence(run) if scope == "crossNode" else pernode_evidence(run))
    forge(doc, run)
    doc["cleanup"]["deleted"] = copy.deepcopy(doc["results"]["workloads"])
    verdict, problem, _ = validate_check(run, 0, eb.seal(doc))
    assert verdict == Verdict.INCONCLUSIVE
    assert problem is not None
    assert problem.startswith("UnprovenOwnership: "), problem


def test_a_pod_checks_pod_must_be_the_adapters_for_this_run() -> None:
    run = make_run()
    doc = plain(eb.check_evidence(run))
    doc["results"]["workloads"][0]["owners"] = [{"kind": "Node", "name": NODES[0], "uid": "n"}]
    verdict, problem, _ = validate_check(run, 0, eb.seal(doc))
    assert (verdict, problem) == (
        Verdict.INCONCLUSIVE,
        "UnprovenOwnership: participant 0's Pod was not created by the adapter for this Run",
    )
    # Nothing proven, nothing to refuse: an all-Inconclusive check stays readable as such.
    assert (
        validate_check(run, 0, _strip_owners(eb.check_evidence(run, verdicts={0: "Inconclusive", 1: "Inconclusive"})))[
            1
        ]
        is None
    )


def test_signalctl_shows_no_progress_from_a_mirror_pod() -> None:
    run = make_run()
    pod = {
        "metadata": {
            "name": "look-alike",
            "labels": {keys.RUN_UID_LABEL: run["metadata"]["uid"], keys.CHECK_LABEL: run["spec"]["checks"][0]["name"]},
            "annotations": {ownership.MIRROR_ANNOTATION: "x"},
        },
        "status": {"phase": "Succeeded"},
    }
    (state,) = check_states(run, [pod], {})
    real = copy.deepcopy(pod)
    del real["metadata"]["annotations"]
    (counted,) = check_states(run, [real], {})
    assert state != counted
    assert "0/2" in state.line(), state.line()
    assert "2/2" in counted.line(), counted.line()
