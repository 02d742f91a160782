"""The backend workloads' shapes for issue 11: the Nodes' own taints tolerated as the
profile allows, Kueue-queued Pods placed by node affinity (never ``nodeName``), both MPI
worlds (perNode: a launcher/worker pair per participant; crossNode: one world) with
``slotsPerWorker`` ranks per Node, the SSH fields a real MPI operator needs, worker
deadlines; and rank results bound to the participant whose worker ran them."""

from typing import Any

import pytest

from adapter import mpispec, workloads
from adapter.collect import collect_mpi, with_launcher_output
from adapter.workflow_template import build_workflow_template
from shared import keys
from shared.result import LauncherReport, RankResult
from shared.run import Verdict
from tests.unit.signal_builders import (
    RUN_UID,
    SCRIPT_DIGEST,
    make_inputs,
    make_pod,
    make_result,
    message_of,
    participants,
)

Obj = dict[str, Any]
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def mpi(count: int, **check: Any) -> Any:
    return make_inputs(count, backend="MPIJob", **check)


def pod_templates(job: Obj) -> list[Obj]:
    return [job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"] for role in ("Launcher", "Worker")]


def node_names(spec: Obj) -> list[str]:
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    names = []
    for term in terms:  # ORed; the API server allows one value per field selector
        assert list(term) == ["matchFields"]
        (field,) = term["matchFields"]
        assert (field["key"], field["operator"]) == ("metadata.name", "In")
        (name,) = field["values"]
        names.append(name)
    return names


def test_backend_pods_tolerate_the_cordon_and_exactly_the_profiles_taints() -> None:
    equal = {"key": "example.com/maintenance", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}
    inputs = make_inputs(2, workload={"tolerations": [GPU_TAINT, equal]})
    cordon = {"key": keys.RESERVED_TAINT_KEY, "operator": "Equal", "value": RUN_UID, "effect": "NoSchedule"}
    pod = workloads.backend_pod(inputs, 0, "gpu-000", "img")
    assert pod["spec"]["tolerations"] == [cordon, GPU_TAINT, equal]
    launcher, worker = pod_templates(mpispec.mpijob(mpi(2, workload={"tolerations": [GPU_TAINT]}), "img"))
    assert worker["tolerations"] == [cordon, GPU_TAINT]
    assert launcher["tolerations"] == [GPU_TAINT], "a crossNode launcher never goes to a cordoned Node"
    for spec in pod_templates(
        mpispec.mpijob(mpi(2, workload={"tolerations": [GPU_TAINT]}), "img", participant_index=0)
    ):
        assert spec["tolerations"] == [cordon, GPU_TAINT]
    assert workloads.backend_pod(make_inputs(1), 0, "gpu-000", "img")["spec"]["tolerations"] == [cordon]


def test_a_kueue_queued_pod_is_placed_by_node_affinity_never_node_name() -> None:
    queued = workloads.backend_pod(make_inputs(2, workload={"kueueQueueName": "gpu"}), 1, "gpu-001", "img")
    assert "nodeName" not in queued["spec"]
    assert node_names(queued["spec"]) == ["gpu-001"]
    assert queued["metadata"]["labels"][workloads.KUEUE_QUEUE_LABEL] == "gpu"
    plain = workloads.backend_pod(make_inputs(2), 1, "gpu-001", "img")
    assert plain["spec"]["nodeName"] == "gpu-001"
    assert "affinity" not in plain["spec"]


@pytest.mark.parametrize(
    ("count", "workload", "grouped"),
    [
        pytest.param(2, {"kueueQueueName": "gpu"}, True, id="two participants, a queue: one pod group"),
        pytest.param(3, {"kueueQueueName": "gpu"}, True, id="three participants"),
        pytest.param(1, {"kueueQueueName": "gpu"}, False, id="one participant: no group needed"),
        pytest.param(2, {}, False, id="no queue: Kueue is not involved"),
    ],
)
def test_a_queued_multi_participant_pod_check_is_one_kueue_pod_group(count: int, workload: Obj, grouped: bool) -> None:
    inputs = make_inputs(count, workload=workload)
    pods = [workloads.backend_pod(inputs, i, f"gpu-{i:03d}", "img") for i in range(count)]
    groups = {p["metadata"]["labels"].get(workloads.KUEUE_POD_GROUP_LABEL) for p in pods}
    counts = {(p["metadata"].get("annotations") or {}).get(workloads.KUEUE_POD_GROUP_COUNT) for p in pods}
    if grouped:
        assert groups == {f"sig-{RUN_UID}-c{inputs.check_index}"}, "one group for every Pod of the check"
        assert counts == {str(count)}, "Kueue admits the group when all its Pods fit"
        assert {p["metadata"]["annotations"][workloads.KUEUE_RETRIABLE_IN_GROUP] for p in pods} == {"false"}
    else:
        assert groups == {None}
        assert counts == {None}
        assert all("annotations" not in p["metadata"] for p in pods)
    assert workloads.pod_group(make_inputs(2, backend="MPIJob", workload={"kueueQueueName": "q"})) is None


def test_pernode_is_the_default_one_launcher_worker_pair_per_participant_on_its_node() -> None:
    inputs = mpi(3, gpuCount=8, mpi={"slotsPerWorker": 8})
    jobs = mpispec.mpijobs(inputs, "img")
    assert [j["metadata"]["name"] for j in jobs] == [workloads.mpijob_name(inputs, i) for i in range(3)]
    assert len({j["metadata"]["name"] for j in jobs}) == 3
    for index, job in enumerate(jobs):
        spec = job["spec"]
        assert spec["slotsPerWorker"] == 8
        assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 1
        assert job["metadata"]["labels"][keys.PARTICIPANT_LABEL] == str(index)
        for template in pod_templates(job):
            assert node_names(template) == [f"gpu-{index:03d}"], "launcher and worker on the participant's Node"
        launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        assert launcher["args"][launcher["args"].index("--slots") + 1] == "8"


def test_crossnode_is_one_world_with_slots_per_worker_on_every_node() -> None:
    inputs = mpi(2, gpuCount=4, mpi={"scope": "crossNode", "slotsPerWorker": 4})
    (job,) = mpispec.mpijobs(inputs, "img")
    assert job["metadata"]["name"] == workloads.mpijob_name(inputs)
    assert keys.PARTICIPANT_LABEL not in job["metadata"]["labels"]
    assert job["spec"]["slotsPerWorker"] == 4
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    launcher, worker = pod_templates(job)
    assert launcher["affinity"] == mpispec.off_nodes_under_test(["gpu-000", "gpu-001"])
    assert node_names(worker) == ["gpu-000", "gpu-001"]


def test_mpi_pods_get_the_ssh_fields_a_real_operator_needs_and_workers_a_deadline() -> None:
    job = mpispec.mpijob(mpi(2, backendActiveDeadline="10m"), "img")
    assert job["spec"]["sshAuthMountPath"] == keys.RUNNER_SSH_DIR == "/home/signal/.ssh"
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "None", "workers stay until the evidence is taken"
    launcher, worker = pod_templates(job)
    for spec in (launcher, worker):
        assert spec["securityContext"]["fsGroup"] == keys.RUNNER_UID, "the key Secret must be readable"
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert env["OMPI_MCA_orte_tmpdir_base"] == workloads.WORKDIR == env["TMPDIR"]
        assert env["OMPI_MCA_rtc_hwloc_vmhole"] == "none", "daemons may not map the topology near the stack"
        mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert not mounts[workloads.WORKDIR].get("readOnly"), "OpenMPI's session directory must be writable"
    assert launcher["activeDeadlineSeconds"] == 600
    assert worker["activeDeadlineSeconds"] == 600 + workloads.WORKER_GRACE_SECONDS


JOB = "sig-0123456789ab-c0"
TRUSTED = "system-0"
"""A Node that is not under test (neither requested nor reserved, and no participant)."""


def worker(name: str, node: str, uid: str) -> Obj:
    return make_pod(name, uid, node, labels={workloads.MPI_ROLE_LABEL: "worker"}, phase="Running", terminated=False)


def launcher(job: str, node: str, ranks: list[tuple[int, str, int]], hosts: list[str], world: int) -> Obj:
    report = LauncherReport.build(
        hosts, [RankResult(rank=r, host=h, exit_code=c) for r, h, c in ranks], world_size=world, mpirun_exit_code=0
    )
    failed = any(c for _, _, c in ranks)
    verdict = Verdict.FAIL if failed else Verdict.PASS
    result = make_result(
        verdict,
        index=None,
        role="launcher",
        node=node,
        pod_name=f"{job}-launcher",
        pod_uid=f"{job}-launcher-uid",
        exit_code=1 if failed else 0,
        launcher=report,
        measurements={"busbw": 123.0},
    )
    return make_pod(
        f"{job}-launcher",
        f"{job}-launcher-uid",
        node,
        labels={workloads.MPI_ROLE_LABEL: "launcher"},
        phase="Failed" if failed else "Succeeded",
        exit_code=1 if failed else 0,
        message=message_of(result),
    )


def test_crossnode_ranks_are_bound_to_the_participant_whose_worker_ran_them() -> None:
    hosts = [f"{JOB}-worker-0", f"{JOB}-worker-1"]
    ranks = [(0, hosts[0], 0), (1, hosts[1], 0), (2, hosts[0], 0), (3, hosts[1], 0)]
    workers = [worker(hosts[0], "gpu-000", "w0"), worker(hosts[1], "gpu-001", "w1")]
    results, report, _ = collect_mpi(
        participants(2), workers, [launcher(JOB, TRUSTED, ranks, hosts, 4)], 2, script=SCRIPT_DIGEST
    )
    assert report is not None
    assert [(r.index, r.verdict, r.reason) for r in results] == [
        (0, Verdict.PASS, "Succeeded: rank(s) 0, 2 exited 0"),
        (1, Verdict.PASS, "Succeeded: rank(s) 1, 3 exited 0"),
    ]
    failing = [(0, hosts[0], 0), (1, hosts[1], 0), (2, hosts[0], 0), (3, hosts[1], 9)]
    results, _, _ = collect_mpi(
        participants(2), workers, [launcher(JOB, TRUSTED, failing, hosts, 4)], 2, script=SCRIPT_DIGEST
    )
    assert [(r.verdict, r.reason) for r in results] == [
        (Verdict.INCONCLUSIVE, f"Launcher: {Verdict.FAIL.value} reason"),
        (Verdict.FAIL, "Failed: rank 3 exited 9"),
    ]


def test_a_participant_with_fewer_ranks_than_slots_is_never_pass() -> None:
    hosts = [f"{JOB}-worker-0", f"{JOB}-worker-1"]
    # The launcher claims Pass, but worker 1 ran one rank of two: its participant is not proven.
    ranks = [(0, hosts[0], 0), (1, hosts[1], 0), (2, hosts[0], 0), (3, hosts[0], 0)]
    workers = [worker(hosts[0], "gpu-000", "w0"), worker(hosts[1], "gpu-001", "w1")]
    results, _, _ = collect_mpi(
        participants(2), workers, [launcher(JOB, TRUSTED, ranks, hosts, 4)], 2, script=SCRIPT_DIGEST
    )
    assert results[1].verdict == Verdict.INCONCLUSIVE
    assert results[1].reason == "MissingRank: 1 of 2 ranks reported from it"


@pytest.mark.parametrize("failing", [None, 1])
def test_pernode_each_participant_gets_its_verdict_from_its_own_launcher(failing: int | None) -> None:
    everyone = participants(2)
    results = []
    for p in everyone:
        job = f"{JOB}-p{p.index}"
        host = f"{job}-worker-0"
        code = 5 if p.index == failing else 0
        ranks = [(r, host, code if r == 1 else 0) for r in range(4)]
        own, report, _ = collect_mpi(
            (p,),
            [worker(host, p.node_name, f"w{p.index}")],
            [launcher(job, p.node_name, ranks, [host], 4)],
            4,
            scope="perNode",
            script=SCRIPT_DIGEST,
        )
        results += [with_launcher_output(r, report) for r in own]
    expected = [Verdict.PASS, Verdict.FAIL if failing == 1 else Verdict.PASS]
    assert [r.verdict for r in results] == expected, "one Node's failure proves nothing about another's"
    assert [r.workload for r in results] == [f"{JOB}-p0-worker-0", f"{JOB}-p1-worker-0"]
    assert results[0].measurements == {"busbw": 123.0}, "its own local world's rank 0 measurements"


# ---------------------------------------------- a crossNode launcher speaks for no Node under test


def test_a_crossnode_launcher_is_required_off_every_node_under_test() -> None:
    inputs = mpi(3, gpuCount=4, mpi={"scope": "crossNode"})
    (job,) = mpispec.mpijobs(inputs, "img")
    launcher, worker = pod_templates(job)
    (term,) = launcher["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # Neither requested nor reserved (the adapter's step Pods' own requirement, named once) ...
    assert term["matchExpressions"] == [
        {"key": keys.CERTIFY_LABEL, "operator": "DoesNotExist"},
        {"key": keys.RESERVED_BY_LABEL, "operator": "DoesNotExist"},
    ]
    steps = build_workflow_template()["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert steps["nodeSelectorTerms"] == [{"matchExpressions": term["matchExpressions"]}]
    # ... and, ANDed in the same term, none of the participants by name (a kubelet can drop its
    # own Node's labels, never rename it).
    assert term["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": [f"gpu-{i:03d}"]} for i in range(3)
    ]
    # It tolerates no Signal taint (its Run's cordon included) and asks for nothing.
    assert keys.RESERVED_TAINT_KEY not in [t["key"] for t in launcher.get("tolerations", [])]
    assert "resources" not in launcher["containers"][0]
    # The workers still run one per participant, on the participants.
    assert node_names(worker) == ["gpu-000", "gpu-001", "gpu-002"]


@pytest.mark.parametrize("node", ["gpu-000", "gpu-001", ""], ids=["participant-0", "participant-1", "unscheduled"])
def test_a_crossnode_launcher_on_a_participants_node_certifies_no_one(node: str) -> None:
    """Participant 0's Node (its root rewrites the termination log, its kubelet the launcher
    Pod's status) claims a Pass for every rank: nobody passes, not even itself."""
    hosts = [f"{JOB}-worker-0", f"{JOB}-worker-1"]
    workers = [worker(hosts[0], "gpu-000", "w0"), worker(hosts[1], "gpu-001", "w1")]
    forged = launcher(JOB, node, [(0, hosts[0], 0), (1, hosts[1], 0)], hosts, 2)
    results, report, why = collect_mpi(participants(2), workers, [forged], script=SCRIPT_DIGEST)
    assert report is None
    assert why.startswith("UntrustedLauncher: ")
    assert [(r.verdict, r.reason) for r in results] == [(Verdict.INCONCLUSIVE, why)] * 2
    # The same report from a launcher on a Node that is not under test counts.
    trusted = launcher(JOB, TRUSTED, [(0, hosts[0], 0), (1, hosts[1], 0)], hosts, 2)
    results, report, why = collect_mpi(participants(2), workers, [trusted], script=SCRIPT_DIGEST)
    assert report is not None
    assert why == ""
    assert [r.verdict for r in results] == [Verdict.PASS, Verdict.PASS]


def test_a_pernode_launcher_counts_only_on_its_own_participants_node() -> None:
    (p0, p1) = participants(2)
    job = f"{JOB}-p1"
    host = f"{job}-worker-0"
    ranks = [(0, host, 0)]
    elsewhere = launcher(job, p0.node_name, ranks, [host], 1)
    results, report, why = collect_mpi(
        (p1,), [worker(host, p1.node_name, "w1")], [elsewhere], scope="perNode", script=SCRIPT_DIGEST
    )
    assert report is None
    assert why.startswith("UntrustedLauncher: ")
    assert results[0].verdict == Verdict.INCONCLUSIVE
    own = launcher(job, p1.node_name, ranks, [host], 1)
    results, report, _ = collect_mpi(
        (p1,), [worker(host, p1.node_name, "w1")], [own], scope="perNode", script=SCRIPT_DIGEST
    )
    assert report is not None
    assert results[0].verdict == Verdict.PASS
