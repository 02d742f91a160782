"""The adapter's API calls for one check: create (or adopt) the backend workloads, wait
for them to finish, and quiesce them. Thin and typed; every decision is in
``collect``/``workloads``/``shared.evidence``.

Deletions are exact: only Pods carrying this check's labels, owned by this Run (Pod
backend) or by this check's MPIJob (workers), running the runner container, are deleted,
each with a uid precondition, and are gone only once their kubelet has stopped them
(``delete_pod``). Creation is idempotent: a Pod or MPIJob that already exists is adopted only
if it carries this check's labels and this Run's owner.
"""

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import structlog

from adapter import kueue, workloads
from adapter.inputs import Inputs, Refusal
from kubeio.client import Kube, resource_path
from kubeio.errors import AlreadyExists, ApiError, Conflict, NotFound
from shared import keys

Obj = dict[str, Any]
Item = TypeVar("Item")
T = TypeVar("T")
log = structlog.get_logger("signal-adapter")
POLL_SECONDS: Final = 0.25
KILL_GRACE_SECONDS: Final = 1
"""Grace of a backend Pod's deletion: the kubelet sends SIGTERM, then SIGKILL after at least
this long (kubelets wait at least 2 s), and only then is the Pod gone."""
FAN_OUT_REQUESTS: Final = 8
"""Requests in flight at once when the adapter creates or deletes one workload per participant:
each needs a connection of its own, and a new connection costs a TLS handshake on both sides
(64 at once, one per Pod of a 64-participant check, was 65 handshakes per check; now 8, kept
and reused, for the deletions too)."""


async def fan_out(
    step: Callable[[Item], Awaitable[T]], items: Iterable[Item], limit: int = FAN_OUT_REQUESTS
) -> list[T]:
    """``step`` of every item, as ``asyncio.gather`` would (results in order, the first error
    raised) but at most ``limit`` at once; a step starts only when its turn comes, so one
    cancelled before its turn leaves nothing half done."""
    slots = asyncio.Semaphore(limit)

    async def one(item: Item) -> T:
        async with slots:
            return await step(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


def owned_by(obj: Obj, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])


def _ours(obj: Obj, inputs: Inputs) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return labels.get(keys.RUN_UID_LABEL) == inputs.run_uid and labels.get(keys.CHECK_LABEL) == inputs.check.name


def runs_runner(pod: Obj, image: str) -> bool:
    """Container identity: the runner container with the runner image."""
    return any(
        c.get("name") == workloads.CONTAINER and c.get("image") == image
        for c in pod.get("spec", {}).get("containers", [])
    )


async def create_or_adopt(kube: Kube, path: str, body: Obj, inputs: Inputs, owner_uid: str) -> Obj:
    try:
        return await kube.create(path, body)
    except AlreadyExists:
        existing = await kube.get(f"{path}/{body['metadata']['name']}")
        if not (_ours(existing, inputs) and owned_by(existing, owner_uid)):
            raise Refusal(
                f"{body['kind']} {inputs.run_namespace}/{body['metadata']['name']} exists but does not belong to "
                f"Run {inputs.run_name} check {inputs.check.name}; delete it or investigate"
            ) from None
        log.info("adopted existing workload", kind=body["kind"], name=body["metadata"]["name"])
        return existing


async def list_pods(kube: Kube, namespace: str, selector: str) -> tuple[list[Obj], str]:
    listing = await kube.get(resource_path("v1", "pods", namespace), labelSelector=selector)
    return list(listing.get("items", [])), str(listing["metadata"]["resourceVersion"])


async def wait_pods(
    kube: Kube, namespace: str, selector: str, done: Callable[[list[Obj]], bool], bound_seconds: float
) -> list[Obj]:
    """Watch the Pods matching ``selector`` until ``done(pods)`` or the bound passes;
    returns the last state seen."""
    deadline = time.monotonic() + bound_seconds
    pods, version = await list_pods(kube, namespace, selector)
    state = {p["metadata"]["uid"]: p for p in pods}
    while not done(list(state.values())):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            async with asyncio.timeout(remaining):
                async for event in kube.watch(
                    resource_path("v1", "pods", namespace),
                    resource_version=version,
                    labelSelector=selector,
                    timeoutSeconds=str(max(1, int(remaining))),
                ):
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise ApiError(int(obj.get("code", 500)), "", str(obj.get("message")), "WATCH", "pods")
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] == "DELETED":
                        state.pop(obj["metadata"]["uid"], None)
                    elif event["type"] in {"ADDED", "MODIFIED"}:
                        state[obj["metadata"]["uid"]] = obj
                    if event["type"] != "BOOKMARK" and done(list(state.values())):
                        break
        except TimeoutError:
            break
        except ApiError as exc:
            log.warning("pod watch ended; re-listing", error=str(exc))
            pods, version = await list_pods(kube, namespace, selector)
            state = {p["metadata"]["uid"]: p for p in pods}
    return list(state.values())


async def delete_pod(kube: Kube, pod: Obj) -> bool:
    """Delete one Pod with a uid precondition; False if it was already gone.

    Gracefully (``KILL_GRACE_SECONDS``), so that the Pod is gone only once it is stopped: the
    API server then keeps the object until its kubelet has stopped every container and removes
    it itself. A zero-grace deletion removes the object at once while the kubelet is still
    stopping the containers (seen on real nodes: a check's containers still ran after the
    adapter had proven its Pods gone). A finished Pod (Succeeded or Failed) is removed at once
    either way: its containers have stopped. A Pod that no kubelet ever started (no
    ``status.startTime``) runs nothing and is removed at once, but only if it is unchanged since
    it was read (resourceVersion precondition): one that a kubelet took meanwhile is deleted
    gracefully like the others."""
    meta = pod["metadata"]
    path = resource_path("v1", "pods", meta["namespace"], meta["name"])
    if not (pod.get("status") or {}).get("startTime"):
        try:
            await kube.delete(path, uid=meta["uid"], resource_version=meta["resourceVersion"], grace_seconds=0)
        except NotFound:
            return False
        except Conflict:
            pass  # changed since read (a kubelet took it) or replaced: the uid decides below
        else:
            return True
    try:
        await kube.delete(path, uid=meta["uid"], grace_seconds=KILL_GRACE_SECONDS)
    except (NotFound, Conflict):
        return False
    return True


@dataclass
class TreeCheck:
    """The objects of one check that must be gone before the step returns."""

    namespace: str
    selector: str
    named: list[tuple[str, str, str]] = field(default_factory=list)
    """(api version, plural, name) of objects the MPI operator derives from the MPIJob."""
    uids: set[str] = field(default_factory=set)
    """uids of every object this check created or caused; anything with one of these uids,
    or owned by one, that is still present is retained."""

    def member(self, obj: Obj) -> bool:
        meta = obj.get("metadata", {})
        owners = {ref.get("uid") for ref in meta.get("ownerReferences") or []}
        return meta.get("uid") in self.uids or bool(owners & self.uids)


async def remaining(kube: Kube, tree: TreeCheck) -> list[Obj]:
    """Objects of the tree still present, Pods first."""
    if not tree.uids:
        return []
    pods, _ = await list_pods(kube, tree.namespace, tree.selector)
    left = [dict(p, kind="Pod") for p in pods if tree.member(p)]
    for api, plural, name in tree.named:
        obj = await kube.get_or_none(resource_path(api, plural, tree.namespace, name))
        if obj is not None and tree.member(obj):
            left.append(obj)
    return left


async def wait_gone(kube: Kube, tree: TreeCheck, bound_seconds: float) -> list[Obj]:
    """Poll until nothing of ``tree`` remains or the bound passes; returns what remains."""
    deadline = time.monotonic() + bound_seconds
    while True:
        left = await remaining(kube, tree)
        if not left or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(POLL_SECONDS)


async def foreground_delete(kube: Kube, api: str, plural: str, namespace: str, name: str, uid: str) -> None:
    with contextlib.suppress(NotFound, Conflict):
        await kube.delete(resource_path(api, plural, namespace, name), uid=uid, propagation="Foreground")


async def release_pod_group(kube: Kube, inputs: Inputs) -> None:
    """Delete the Kueue Workload of this check's pod group, if it has one: Kueue removes its
    finalizer from the Pods of a group it never admitted only when the group's Workload is
    deleted (v0.17: deleted, gated Pods otherwise stay Pending with the finalizer for ever).
    Gone already (finished and collected, or no Kueue installed): nothing to do. Refused or
    failed (an installation without this RBAC rule): logged, and the wait for the Pods that
    follows names any left behind (cleanup Failed, the check Inconclusive)."""
    group = kueue.pod_group(inputs)
    if group is None:
        return
    path = resource_path(kueue.KUEUE_WORKLOAD_API, kueue.KUEUE_WORKLOADS, inputs.run_namespace, group[0])
    try:
        await kube.delete(path, propagation="Background")
    except NotFound:
        return
    except ApiError as exc:
        log.warning(
            "cannot delete the Kueue Workload of the check's pod group; its Pods may keep Kueue's finalizer "
            "(grant the adapter delete on kueue.x-k8s.io workloads, deploy/base/adapter-rbac.yaml, and apply "
            "deploy/base/adapter-kueue-admission-policy.yaml)",
            workload=group[0],
            error=str(exc)[:300],
        )
        return
    log.info("deleted the Kueue Workload of the check's pod group", workload=group[0])
