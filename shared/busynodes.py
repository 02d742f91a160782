"""What Signal does with a Node that is still running other work when its Run is admitted
(issue 43, item 2): the profile's ``busyNodes``, copied into each Run's spec at admission.
Pure; no I/O.

* ``none`` (the default, and the behaviour before ``busyNodes`` existed): Signal cordons the
  Node (its NoSchedule taint) and starts the checks at once. Nothing running there is evicted;
  a check whose GPUs are still held sits Pending and ends Inconclusive at its deadline.
* ``drain``: Signal evicts the Node's Pods through the Eviction API (PodDisruptionBudgets are
  respected), except DaemonSet Pods, mirror Pods and Signal's own backend Pods, and starts the
  checks once none of them is left; after ``timeoutSeconds`` the Run ends Inconclusive
  (``DrainTimedOut``) naming the Pods that would not leave.
* ``waitForIdle``: Signal evicts nothing and starts the checks once the GPUs and extended
  resources (e.g. RDMA) the checks request are free on every Node (allocatable minus the
  requests of the Pods bound there that have not ended); after ``timeoutSeconds`` the Run
  ends Inconclusive (``NodesNotIdle``) naming what is still held and by which Pods.
"""

from typing import Annotated, Literal

from pydantic import Field

from shared.meta import WireModel

BusyPolicy = Literal["none", "drain", "waitForIdle"]
DEFAULT_BUSY_TIMEOUT_SECONDS = 600
MAX_BUSY_TIMEOUT_SECONDS = 24 * 3600


class BusyNodes(WireModel):
    """What happens to a requested Node that still runs other work when it is admitted."""

    policy: BusyPolicy = "none"
    """``none`` (cordon and start at once: nothing is evicted), ``drain`` (evict the Node's Pods
    through the Eviction API, then start) or ``waitForIdle`` (start once the checks' GPUs and
    extended resources are free)."""
    timeout_seconds: Annotated[int, Field(ge=1, le=MAX_BUSY_TIMEOUT_SECONDS)] = DEFAULT_BUSY_TIMEOUT_SECONDS
    """How long ``drain`` or ``waitForIdle`` may wait (1..86400 s, default 600); then the Run
    ends Inconclusive with a reason naming the Pods that are still there."""
