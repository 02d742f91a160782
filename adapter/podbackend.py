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
from kubeio.errors import Forbidden, Invalid
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
    refused: dict[str, str] = {}  # participant index -> why the API server refused its Pod
    runs = workloads.container_image(inputs.check, image)  # the runner container's image
    selector = workloads.check_selector(inputs)
    expected = {str(p.index) for p in inputs.participants}
    if not observe_only:
        # A retried step adopts what an earlier one made, under whichever name.
        existing, _ = await backend.list_pods(kube, inputs.run_namespace, selector)
        have = {_index(p) for p in existing if created(p, inputs) and backend.runs_runner(p, runs)}
        bodies = [
            artifacts.with_uploads(workloads.backend_pod(inputs, p.index, p.node_name, image), store, inputs, p.index)
            for p in sorted(inputs.participants, key=lambda p: p.index)
            if str(p.index) not in have
        ]
        await backend.fan_out(lambda b: _create_or_note(kube, path, b, inputs, refused), bodies)

    def finished(pods: list[Obj]) -> bool:
        done = {_index(p) for p in pods if collect.terminal(p) and created(p, inputs)}
        return expected - set(refused) <= done

    bound = 0.0 if observe_only else workloads.deadline_seconds(inputs.check) + grace_seconds
    pods = await backend.wait_pods(kube, inputs.run_namespace, selector, finished, bound)
    # Only the Pods the adapter created for this Run count: a mirror Pod or another creator's
    # Pod with the same labels is ignored.
    pods = [p for p in pods if backend.runs_runner(p, runs) and created(p, inputs)]
    owners = ownership.run_chain_of(inputs.run_name, inputs.run_uid)
    results = collect.collect_pods(inputs.participants, pods, script=script)
    results = [collect.not_admitted(r, refused[str(r.index)]) if str(r.index) in refused else r for r in results]
    if store is not None:
        by_uid = {p["metadata"].get("uid"): p for p in pods}
        results = [
            artifacts.record(store, inputs, r, collect.pod_result(by_uid[r.workload_uid])[0])
            if r.workload_uid in by_uid
            else r
            for r in results
        ]
    return results, collect.pod_workloads(pods, owners)


async def _create_or_note(kube: Kube, path: str, body: Obj, inputs: Inputs, refused: dict[str, str]) -> Obj | None:
    """Create a participant's Pod; a Pod the API server refuses (an admission policy, Pod
    Security, a missing RuntimeClass...) is noted, and that participant ends Inconclusive with
    the API server's reason rather than the whole check failing without evidence."""
    try:
        return await _create(kube, path, body, inputs)
    except (Forbidden, Invalid) as exc:
        refused[_index(body)] = exc.message
        backend.log.warning("the API server refused a backend Pod", pod=body["metadata"]["name"], why=exc.message)
        return None
