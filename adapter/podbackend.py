"""The Pod backend of one check: one Pod per participant, created (or adopted), waited for and
collected. Thin I/O; the decisions are in ``collect``, ``workloads`` and ``shared.ownership``.

Only the Pods the adapter made for this Run count (exactly one ownerReference, to the Run; never
a mirror Pod): a kubelet may create a mirror Pod with any name and labels in any namespace, so
such a Pod neither speaks for a participant nor blocks one. A Pod's name is deterministic
(``<run>-c<check>-p<participant>``, so that a retried step adopts what an earlier one made);
when that name is taken by something that is not this check's own Pod, the participant's Pod
is made under a generated name (``<name>-<5 random>``) instead of ending the check, and it is
found again by its labels and owner, never by its name.
"""

from typing import Any

from adapter import artifacts, backend, collect, workloads
from adapter.inputs import Inputs, Refusal
from kubeio.client import Kube, resource_path
from shared import keys, ownership
from shared.artifacts import StoreConfig
from shared.evidence import ParticipantResult, Workload

Obj = dict[str, Any]


def created(pod: Obj, inputs: Inputs) -> bool:
    """The adapter made ``pod`` for this Run (``shared.ownership.run_chain``)."""
    return ownership.run_chain(pod, inputs.run_name, inputs.run_uid) is not None


def _index(pod: Obj) -> str:
    return str((pod["metadata"].get("labels") or {}).get(keys.PARTICIPANT_LABEL, ""))


async def _create(kube: Kube, path: str, body: Obj, inputs: Inputs) -> Obj:
    try:
        return await backend.create_or_adopt(kube, path, body, inputs, inputs.run_uid)
    except Refusal as refusal:
        name = body["metadata"]["name"]
        backend.log.warning("a Pod name of this check is taken; using a generated name", pod=name, why=str(refusal))
        meta = {k: v for k, v in body["metadata"].items() if k != "name"}
        created_pod: Obj = await kube.create(path, {**body, "metadata": {**meta, "generateName": f"{name}-"}})
        return created_pod


async def run(
    kube: Kube,
    inputs: Inputs,
    *,
    image: str,
    grace_seconds: float,
    script: str | None,
    observe_only: bool = False,
    store: StoreConfig | None = None,
) -> tuple[list[ParticipantResult], list[Workload]]:
    """Results per participant and every Pod found; ``observe_only``: create nothing and wait
    for nothing (an interrupted check); ``store``: the artifact store (adapter/artifacts.py)."""
    path = resource_path("v1", "pods", inputs.run_namespace)
    selector = workloads.check_selector(inputs)
    expected = {str(p.index) for p in inputs.participants}
    if not observe_only:
        # A retried step adopts what an earlier one made, under whichever name.
        existing, _ = await backend.list_pods(kube, inputs.run_namespace, selector)
        have = {_index(p) for p in existing if created(p, inputs) and backend.runs_runner(p, image)}
        bodies = [
            artifacts.with_uploads(workloads.backend_pod(inputs, p.index, p.node_name, image), store, inputs, p.index)
            for p in sorted(inputs.participants, key=lambda p: p.index)
            if str(p.index) not in have
        ]
        await backend.fan_out(lambda b: _create(kube, path, b, inputs), bodies)

    def finished(pods: list[Obj]) -> bool:
        done = {_index(p) for p in pods if collect.terminal(p) and created(p, inputs)}
        return expected <= done

    bound = 0.0 if observe_only else workloads.deadline_seconds(inputs.check) + grace_seconds
    pods = await backend.wait_pods(kube, inputs.run_namespace, selector, finished, bound)
    # Only the Pods the adapter created for this Run count: a mirror Pod or another creator's
    # Pod with the same labels is ignored.
    pods = [p for p in pods if backend.runs_runner(p, image) and created(p, inputs)]
    owners = ownership.run_chain_of(inputs.run_name, inputs.run_uid)
    results = collect.collect_pods(inputs.participants, pods, script=script)
    if store is not None:
        by_uid = {p["metadata"].get("uid"): p for p in pods}
        results = [
            artifacts.record(store, inputs, r, collect.pod_result(by_uid[r.workload_uid])[0])
            if r.workload_uid in by_uid
            else r
            for r in results
        ]
    return results, collect.pod_workloads(pods, owners)
