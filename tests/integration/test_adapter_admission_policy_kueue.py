"""Issue 41, part 4: Kueue's Pod integration under the adapter's admission policy
(deploy/base/adapter-admission-policy.yaml), on the real API server with the policy in force.

A ValidatingAdmissionPolicy sees a Pod after every mutating webhook. Kueue's Pod webhook (v0.17,
``pkg/controller/jobs/pod/pod_webhook.go``) adds to a Pod that names a queue the label
``kueue.x-k8s.io/managed=true``, the finalizer ``kueue.x-k8s.io/managed`` and the scheduling
gate ``kueue.x-k8s.io/admission``, and to a pod group's Pods the annotation
``kueue.x-k8s.io/role-hash``; the adapter names a multi-participant Pod check's pod group
(``kueue.x-k8s.io/pod-group-name``, ``kueue.x-k8s.io/pod-group-total-count``). No Kueue runs
here: each Pod below is what the adapter's Pod becomes after Kueue's webhook, created as the
adapter's ServiceAccount, which is exactly what the policy judges. Those mutations are
admitted; nothing else is (another finalizer, gate or annotation, Kueue's on a Pod that names
no queue or on an MPIJob, a pod group of another Run)."""

import copy
from collections.abc import Callable

import pytest

from adapter.workloads import KUEUE_POD_GROUP_COUNT, KUEUE_POD_GROUP_LABEL, backend_pod
from localcluster.kube import ApiError, KubeClient, Obj
from tests.integration.test_adapter_admission_policy import (
    DENIED,
    RUNNER,
    dry_run,
    good_mpijob,
    mpijobs_path,
    pods_path,
    policed,
    refusal,
)
from tests.integration.test_deploy_manifests import default_inputs

FIXTURES = (policed,)
"""The adapter's identity with the policy in force, found by pytest under this module's name."""
MANAGED = "kueue.x-k8s.io/managed"
GATE = "kueue.x-k8s.io/admission"
ROLE_HASH = "kueue.x-k8s.io/role-hash"


def queued_pod(namespace: str, participant: int = 0) -> Obj:
    """The adapter's Pod of a two-participant check that names a queue (a pod group)."""
    return backend_pod(default_inputs(namespace, "Pod", kueueQueueName="gpu"), participant, "gpu-0", RUNNER)


def as_kueue_mutates(pod: Obj) -> Obj:
    """``pod`` after Kueue's Pod webhook (what the policy sees)."""
    mutated = copy.deepcopy(pod)
    meta = mutated["metadata"]
    meta["labels"][MANAGED] = "true"
    meta.setdefault("finalizers", []).append(MANAGED)
    mutated["spec"].setdefault("schedulingGates", []).append({"name": GATE})
    if KUEUE_POD_GROUP_LABEL in meta["labels"]:
        meta.setdefault("annotations", {})[ROLE_HASH] = "0a1b2c3d"
    return mutated


async def test_a_queued_grouped_pod_as_kueue_mutates_it_is_admitted(policed: KubeClient, namespace: str) -> None:
    for participant in (0, 1):
        pod = as_kueue_mutates(queued_pod(namespace, participant))
        assert pod["metadata"]["labels"][KUEUE_POD_GROUP_LABEL].startswith("sig-11111111-2222-3333-4444-")
        assert pod["metadata"]["annotations"][KUEUE_POD_GROUP_COUNT] == "2"
        admitted = await dry_run(policed, pods_path(namespace), pod)
        assert admitted["metadata"]["finalizers"] == [MANAGED]
        assert admitted["spec"]["schedulingGates"] == [{"name": GATE}]
        assert admitted["metadata"]["labels"][MANAGED] == "true"


async def test_a_real_queued_pod_is_created_and_deleted_by_the_adapter(
    policed: KubeClient, admin: KubeClient, namespace: str
) -> None:
    """Not only dry-run: created as the adapter with Kueue's finalizer and gate, deleted by the
    adapter (its DELETE rule is unchanged), the finalizer then removed as Kueue would."""
    pod = as_kueue_mutates(queued_pod(namespace))
    created = await policed.create(pods_path(namespace), pod)
    path = f"{pods_path(namespace)}/{created['metadata']['name']}"
    try:
        await policed.delete(path)
        assert (await admin.get(path))["metadata"].get("deletionTimestamp"), "held by Kueue's finalizer"
    finally:
        await admin.merge_patch(path, {"metadata": {"finalizers": None}})


def _labels(**changes: str) -> Callable[[Obj], None]:
    return lambda pod: pod["metadata"]["labels"].update(changes)


def _annotation(key: str) -> Callable[[Obj], None]:
    return lambda pod: pod["metadata"].setdefault("annotations", {}).update({key: "true"})


def _finalizer(name: str) -> Callable[[Obj], None]:
    return lambda pod: pod["metadata"].setdefault("finalizers", []).append(name)


def _gate(name: str) -> Callable[[Obj], None]:
    return lambda pod: pod["spec"].setdefault("schedulingGates", []).append({"name": name})


def _unbound_with(change: Callable[[Obj], None]) -> Callable[[Obj], None]:
    """``change`` on the Pod without its nodeName (the API server refuses a gated bound Pod
    before any policy sees it)."""

    def unbound(pod: Obj) -> None:
        pod["spec"].pop("nodeName")
        change(pod)

    return unbound


def _group_without_queue(pod: Obj) -> None:
    pod["metadata"]["labels"][KUEUE_POD_GROUP_LABEL] = (
        f"sig-{pod['metadata']['labels']['projectsignal.dev/run-uid']}-c0"
    )


BAD: dict[str, tuple[Callable[[Obj], None], str]] = {
    "another-finalizer": (_finalizer("example.com/hold"), "may carry no finalizer"),
    "another-gate": (_gate("example.com/wait"), "may carry no scheduling gate"),
    "kueue-bypass-annotation": (_annotation("kueue.x-k8s.io/pod-suspending-parent"), "may carry no annotation"),
    "another-annotation": (_annotation("cluster-autoscaler.kubernetes.io/safe-to-evict"), "may carry no annotation"),
    "managed-not-true": (_labels(**{MANAGED: "false"}), "kueue.x-k8s.io/managed only as true"),
    "another-runs-group": (
        _labels(**{KUEUE_POD_GROUP_LABEL: "sig-99999999-2222-3333-4444-555555555555-c0"}),
        "a Kueue pod group only of its own Run",
    ),
}
UNQUEUED: dict[str, tuple[Callable[[Obj], None], str]] = {
    "managed-label": (_labels(**{MANAGED: "true"}), "not allowed: kueue.x-k8s.io/managed"),
    "finalizer": (_finalizer(MANAGED), "may carry no finalizer"),
    "gate": (_unbound_with(_gate(GATE)), "may carry no scheduling gate"),
    "group": (_group_without_queue, "not allowed: kueue.x-k8s.io/pod-group-name"),
    "group-count": (_annotation(KUEUE_POD_GROUP_COUNT), "may carry no annotation"),
}


@pytest.mark.parametrize("case", sorted(BAD))
async def test_nothing_but_kueues_own_mutations_is_admitted(
    policed: KubeClient, admin: KubeClient, namespace: str, case: str
) -> None:
    change, message = BAD[case]
    pod = as_kueue_mutates(queued_pod(namespace))
    change(pod)
    error = await refusal(policed, pods_path(namespace), pod)
    assert error.status == 403, error
    assert DENIED in error.message
    assert message in error.message, error.message
    # The policy is scoped to the adapter: an admin may create the very same Pod.
    await dry_run(admin, pods_path(namespace), pod)


@pytest.mark.parametrize("case", sorted(UNQUEUED))
async def test_kueues_marks_on_a_pod_that_names_no_queue_are_refused(
    policed: KubeClient, admin: KubeClient, namespace: str, case: str
) -> None:
    """Kueue marks only Pods that name a queue (Signal's Pods never rely on
    manageJobsWithoutQueueName): on any other Pod each mark is the adapter's own, refused."""
    change, message = UNQUEUED[case]
    pod = backend_pod(default_inputs(namespace, "Pod"), 0, "gpu-0", RUNNER)
    change(pod)
    error = await refusal(policed, pods_path(namespace), pod)
    assert error.status == 403, error
    assert message in error.message, error.message
    await dry_run(admin, pods_path(namespace), pod)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("annotation", "may carry no annotation"),
        ("template-annotation", "may carry no annotation"),
        ("template-finalizer", "may carry no finalizer"),
        ("template-gate", "may carry no scheduling gate"),
        ("template-managed-label", "not allowed: kueue.x-k8s.io/managed"),
    ],
)
async def test_an_mpijob_gets_none_of_kueues_pod_allowances(
    policed: KubeClient, admin: KubeClient, namespace: str, case: str, message: str
) -> None:
    job = good_mpijob(namespace)
    template = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    if case == "annotation":
        job["metadata"]["annotations"] = {ROLE_HASH: "x"}
    elif case == "template-annotation":
        template["metadata"]["annotations"] = {KUEUE_POD_GROUP_COUNT: "2"}
    elif case == "template-finalizer":
        template["metadata"]["finalizers"] = [MANAGED]
    elif case == "template-gate":
        template["spec"]["schedulingGates"] = [{"name": GATE}]
    else:
        template["metadata"]["labels"][MANAGED] = "true"
    error = await refusal(policed, mpijobs_path(namespace), job)
    assert error.status == 403, error
    assert message in error.message, error.message
    await dry_run(admin, mpijobs_path(namespace), job)


async def test_a_plain_pod_and_mpijob_are_still_admitted(policed: KubeClient, namespace: str) -> None:
    plain = backend_pod(default_inputs(namespace, "Pod"), 0, "gpu-0", RUNNER)
    assert "annotations" not in plain["metadata"]
    await dry_run(policed, pods_path(namespace), plain)
    await dry_run(policed, mpijobs_path(namespace), good_mpijob(namespace))
    with pytest.raises(ApiError):  # and the fixture's known-bad Pod is still refused
        await dry_run(policed, pods_path(namespace), {**plain, "spec": {**plain["spec"], "hostPID": True}})
