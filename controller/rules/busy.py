"""Busy Nodes (issue 43, item 2; shared/busynodes.py): which Pods a drain evicts, what is free
on a Node, and when the wait has lasted too long. Pure: the caller lists the Pods bound to
each Node and passes ``now``; controller/reconcile/busyio.py does the reads and writes.

* ``drain_plan``: the Pods a drain waits for (every Pod bound to the Node that has not ended,
  except DaemonSet Pods, mirror Pods and Pods of Signal's own namespace) and, of those, the
  ones to evict now (not already being deleted).
* ``idle_shortfall``: for ``waitForIdle``, each resource the checks request that is not free:
  allocatable minus the effective requests of the Pods bound to the Node that have not ended
  (a Pod being deleted still holds what it requested, as the scheduler counts it).
* ``wait_started``/``timed_out``: the wait starts when the Run's ``NodesIdle`` condition first
  turns False (its lastTransitionTime, kept in the Run's status, so a restarted controller
  goes on with the same deadline).
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from controller.rules.runview import RunView
from shared import keys
from shared.busynodes import DEFAULT_BUSY_TIMEOUT_SECONDS
from shared.ownership import controller_ref, is_mirror
from shared.quantity import QuantityError, parse_quantity
from shared.run import Phase

Obj = Mapping[str, Any]
CONDITION = "NodesIdle"
"""The Run condition of the wait: False while waiting (reason ``Draining`` or
``WaitingForIdle``), True once every Node is ready for the checks (reason ``NodesIdle``)."""
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
POLL_SECONDS = 2.0
"""How often a waiting Run looks at its Nodes' Pods again (Pods are not watched)."""
MAX_NAMED = 10
"""Pods named in one message (then "and N more")."""


@dataclass(frozen=True, slots=True)
class BusyPolicy:
    policy: str
    timeout_seconds: int


def busy_policy(spec: Obj) -> BusyPolicy:
    """The Run's ``spec.busyNodes`` (absent: ``none``, the behaviour before it existed)."""
    raw = spec.get("busyNodes")
    if not isinstance(raw, Mapping):
        return BusyPolicy("none", DEFAULT_BUSY_TIMEOUT_SECONDS)
    timeout = raw.get("timeoutSeconds")
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
        timeout = DEFAULT_BUSY_TIMEOUT_SECONDS
    return BusyPolicy(str(raw.get("policy") or "none"), timeout)


def waiting(run: RunView) -> bool:
    """Whether ``run`` is (or is about to be) waiting for busy Nodes: being admitted, with a
    policy other than ``none``, and its Nodes not yet found ready."""
    if run.phase not in {Phase.PENDING, Phase.ADMITTED} or run.cancel:
        return False
    return busy_policy(run.raw.get("spec") or {}).policy != "none" and not run.is_true(CONDITION)


def pod_name(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def ended(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ENDED_PHASES


def drain_skip(pod: Obj, signal_namespace: str) -> str | None:
    """Why a drain leaves ``pod`` alone (None: it is drained)."""
    if ended(pod):
        return "ended"
    if is_mirror(pod):
        return "mirror Pod"
    owner = controller_ref(pod)
    if owner is not None and owner.get("kind") == "DaemonSet" and str(owner.get("apiVersion", "")).startswith("apps/"):
        return "DaemonSet Pod"
    if (pod.get("metadata") or {}).get("namespace") == signal_namespace:
        return "Signal's own Pod"
    return None


@dataclass(frozen=True, slots=True)
class DrainPlan:
    remaining: tuple[str, ...]
    """``namespace/name`` of every Pod the drain waits for, sorted."""
    evict: tuple[Obj, ...]
    """Those to evict now (not being deleted yet)."""


def drain_plan(pods: Iterable[Obj], signal_namespace: str) -> DrainPlan:
    waiting = sorted((p for p in pods if drain_skip(p, signal_namespace) is None), key=pod_name)
    evict = tuple(p for p in waiting if not (p.get("metadata") or {}).get("deletionTimestamp"))
    return DrainPlan(tuple(pod_name(p) for p in waiting), evict)


def requested_resources(checks: Sequence[Obj]) -> dict[str, int]:
    """Per Node, the most of each resource any one check requests (checks run one after
    another): ``nvidia.com/gpu`` (``gpuCount``) and the checks' extended resources."""
    wanted: dict[str, int] = {}
    for check in checks:
        gpus = check.get("gpuCount") or 0
        extended = (check.get("workload") or {}).get("extendedResources") or {}
        for name, count in [(keys.GPU_RESOURCE, gpus), *extended.items()]:
            if isinstance(count, int) and count > 0:
                wanted[name] = max(wanted.get(name, 0), count)
    return wanted


def _amount(resources: Obj | None, name: str) -> int:
    """A container's request of ``name`` (its limit when it sets no request, as the API server
    defaults it); a malformed quantity counts as unbounded (fail closed: never free)."""
    resources = resources or {}
    value = (resources.get("requests") or {}).get(name)
    if value is None:
        value = (resources.get("limits") or {}).get(name)
    if value is None:
        return 0
    try:
        return parse_quantity(value)
    except (QuantityError, TypeError):
        return 2**63 - 1


def pod_request(pod: Obj, name: str) -> int:
    """The Pod's effective request of ``name``, as the scheduler counts it: the larger of its
    containers' sum (with restartable init containers, i.e. sidecars) and each init
    container's request with the sidecars started before it, plus the Pod's overhead."""
    spec = pod.get("spec") or {}
    sidecars = 0
    init_peak = 0
    for container in spec.get("initContainers") or []:
        amount = _amount(container.get("resources"), name)
        if container.get("restartPolicy") == "Always":
            sidecars += amount
        else:
            init_peak = max(init_peak, sidecars + amount)
    regular = sum(_amount(c.get("resources"), name) for c in spec.get("containers") or [])
    overhead = _amount({"requests": spec.get("overhead") or {}}, name)
    return max(regular + sidecars, init_peak) + overhead


def idle_shortfall(requested: Mapping[str, int], allocatable: Obj, pods: Iterable[Obj]) -> list[str]:
    """What keeps the Node from being idle enough for the checks: one line per requested
    resource that is not free, naming the Pods that hold it. Empty: every one is free."""
    holding = [p for p in pods if not ended(p)]
    problems = []
    for name, want in sorted(requested.items()):
        try:
            have = parse_quantity(allocatable.get(name) or 0)
        except (QuantityError, TypeError):
            have = 0
        holders = [(pod_name(p), pod_request(p, name)) for p in holding]
        holders = sorted((h for h in holders if h[1] > 0), key=lambda h: h[0])
        free = have - sum(amount for _, amount in holders)
        if free < want:
            who = named([f"{n} ({amount})" for n, amount in holders]) or "no Pod (the Node does not have them)"
            problems.append(f"{name}: {want} requested, {max(free, 0)} of {have} free; held by {who}")
    return problems


def named(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_NAMED])
    return shown + (f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")


def wait_started(conditions: Iterable[Obj]) -> datetime | None:
    """When the wait began: the lastTransitionTime of ``NodesIdle=False`` (None: not waiting)."""
    found = next((c for c in conditions if c.get("type") == CONDITION), None)
    if found is None or found.get("status") != "False":
        return None
    try:
        return datetime.fromisoformat(str(found.get("lastTransitionTime")).replace("Z", "+00:00"))
    except ValueError:
        return None


def timed_out(started: datetime | None, now: datetime, timeout_seconds: int) -> bool:
    return started is not None and now >= started + timedelta(seconds=timeout_seconds)


def seconds_left(started: datetime | None, now: datetime, timeout_seconds: int) -> float:
    if started is None:
        return float(timeout_seconds)
    return max(0.0, (started + timedelta(seconds=timeout_seconds) - now).total_seconds())
