"""The controller's working context: its API connection, caches, fence, and the few
reads and writes every path shares (ledger compare-and-swap, status patches).

Caches may be stale; every destructive or admission decision re-reads what it acts on with
an uncached GET (the ledger, the source ConfigMap), or writes conditioned on the
resourceVersion it decided on (a Node's reservation is tried first on the cached view and
refused by the API server if the Node changed since; controller/reconcile/reservations.py)."""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from controller.reconcile import metrics
from controller.reconcile.ledgerstore import forget_unnamed, store_segments
from controller.reconcile.ledgerstore import read_ledger as read_segmented
from controller.rules.ledger import (
    LEDGER_NAME,
    Ledger,
    LedgerError,
    Segment,
    assemble,
    ledger_object,
    parse_head,
)
from controller.rules.nodes import NodeView, node_view
from controller.rules.requested import RequestIndex
from controller.rules.runview import RunView, lean, run_view
from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import NotFound
from kubeio.informer import Informer
from shared import keys

log = structlog.get_logger("signal-controller")
RUN_PAGE_SIZE = 100
"""Runs per page of the Run cache's LIST (kubeio's default: 500)."""


class NotLeader(RuntimeError):
    """The ledger's fence belongs to another controller: this one must not write."""


def workflow_view(workflow: Obj) -> Obj:
    """What the controller keeps of a Workflow: metadata, phase, and its check steps'
    index and output parameters (for the digests the adapter reported)."""
    status = workflow.get("status") or {}
    checks = {
        key: {k: node.get(k) for k in ("templateName", "phase", "inputs", "outputs")}
        for key, node in (status.get("nodes") or {}).items()
        if node.get("templateName") == "check"
    }
    return {
        "metadata": lean(workflow)["metadata"],
        "spec": {"shutdown": (workflow.get("spec") or {}).get("shutdown")},
        "status": {"phase": status.get("phase"), "finishedAt": status.get("finishedAt"), "nodes": checks},
    }


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Context:
    kube: Kube
    namespace: str
    identity: str
    fence: int = 0
    profile_selector: str = ""
    workflow_instance_id: str = ""
    """Argo instanceID label to put on Workflows (empty: none)."""
    """Label selector limiting the profiles this controller serves (empty: all)."""
    workflow_template_digest: str = ""
    """The content digest (``shared.digests.template_digest``) the signal-adapter
    WorkflowTemplate must have before a Workflow is submitted (empty: not checked)."""
    clock: Callable[[], datetime] = _now
    nodes: Informer[NodeView] = field(init=False)
    requested: RequestIndex = field(init=False)
    """The cached Nodes requested for each profile, in selection order (fed by ``nodes``)."""
    profiles: Informer[Obj] = field(init=False)
    runs: Informer[RunView] = field(init=False)
    """Runs parsed once into typed views (controller/rules/runview.py)."""
    workflows: Informer[Obj] = field(init=False)
    """Signal's Workflows in the namespace (metadata only), for orphan recovery."""
    written: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Run name -> (resourceVersion, monotonic time) of this controller's last status write,
    so that the loop does not act on a cached Run older than its own write."""
    profile_status_written: dict[str, float] = field(default_factory=dict)
    """Profile name -> monotonic time of this controller's last status write of it
    (controller/reconcile/profiles.py: progress-only changes are written at most every few seconds)."""
    profile_admitted: dict[str, float] = field(default_factory=dict)
    """Profile name -> monotonic time of this controller's last admission for it (progress-only
    status writes wait after it too: controller/reconcile/profiles.py)."""
    source_namespaces: tuple[str, ...] = ()
    """Namespaces besides its own that profile sources may come from (``*``: any;
    controller/rules/sources.py)."""
    legacy_warned: dict[str, str] = field(default_factory=dict)
    """Node uid -> the old request label's value it was warned of (controller/reconcile/lifecycle.py)."""
    profile_status_owed: set[str] = field(default_factory=set)
    """Profiles that admitted a group since their status was last decided: their next pass
    writes the status of what is left (controller/reconcile/profiles.py)."""
    ledger_problem: str = ""
    """Why the admission ledger cannot be parsed ('' while it can): admission stops, nothing
    else does (issue 42 M-B)."""
    ledger_segments: dict[str, Segment] = field(default_factory=dict)
    """Digest -> segment, for every group the last ledger read named (segments are immutable:
    each is read once; controller/reconcile/ledgerstore.py)."""
    segments_litter: bool = True
    """Whether a segment no head names may have been left: at start and at each fence taken (a
    crash or the term before may have left one), after a head write that failed, or a deletion
    that failed. Only then, or an hour after the last look, does a resync list the segments
    (recovery.collect_segments)."""
    segments_swept: float = float("-inf")
    """Monotonic time of the last look for segments no head names."""

    def __post_init__(self) -> None:
        self.nodes = Informer(self.kube, resource_path("v1", "nodes"), node_view)
        self.requested = RequestIndex()
        self.nodes.handlers.append(self.requested.on_node)
        query = {"labelSelector": self.profile_selector} if self.profile_selector else {}
        self.profiles = Informer(self.kube, resource_path(keys.API_VERSION, keys.PROFILE_PLURAL), lean, **query)
        self.runs = Informer(self.kube, resource_path(keys.API_VERSION, keys.RUN_PLURAL, self.namespace), run_view)
        # A 64-Node Run is about 44 KB of JSON: a page of 500 parsed at once left its garbage
        # around the kept views, 105 MiB of RSS for 1,000 Runs against 36 MiB in pages of 100
        # (issue 47; a Node, 2.7 KB, keeps the default).
        self.runs.page_size = RUN_PAGE_SIZE
        self.workflows = Informer(
            self.kube,
            resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, self.namespace),
            workflow_view,
            labelSelector=keys.RUN_UID_LABEL,
        )

    def start_caches(self) -> None:
        for informer in (self.nodes, self.profiles, self.runs, self.workflows):
            informer.start()

    async def wait_synced(self) -> None:
        for informer in (self.nodes, self.profiles, self.runs, self.workflows):
            await informer.synced.wait()

    async def stop_caches(self) -> None:
        for informer in (self.nodes, self.profiles, self.runs, self.workflows):
            await informer.stop()

    def node_map(self) -> Mapping[str, NodeView]:
        return {n.name: n for n in self.nodes.items.values()}

    # -- paths ---------------------------------------------------------------------------

    def run_path(self, name: str | None = None, sub: str | None = None) -> str:
        return resource_path(keys.API_VERSION, keys.RUN_PLURAL, self.namespace, name, sub)

    def ledger_path(self) -> str:
        return resource_path("v1", "configmaps", self.namespace, LEDGER_NAME)

    # -- ledger --------------------------------------------------------------------------

    async def read_ledger(self, *, require_fence: bool = True) -> Ledger:
        """Uncached read; raises NotLeader when another controller holds the fence, and
        LedgerError (recorded in ``ledger_problem`` and the metric) when it cannot be parsed."""
        try:
            ledger = await read_segmented(self.kube, self.namespace, self.ledger_segments)
        except NotFound:
            ledger = Ledger()
        except LedgerError as exc:
            self._ledger_unreadable(str(exc))
            raise
        if self.ledger_problem:
            log.info("the admission ledger is readable again; admission resumes", was=self.ledger_problem[:300])
            self.ledger_problem = ""
            metrics.LEDGER_UNREADABLE.set(0)
        if require_fence and (ledger.fence != self.fence or ledger.holder != self.identity):
            raise NotLeader(f"ledger fence {ledger.fence} ({ledger.holder}) is not ours ({self.fence})")
        return ledger

    def _ledger_unreadable(self, problem: str) -> None:
        metrics.LEDGER_UNREADABLE.set(1)
        if problem != self.ledger_problem:
            log.error(
                "the admission ledger cannot be parsed: admission is stopped until it is repaired "
                "(acceptance, releases and re-assertion go on)",
                ledger=f"{self.namespace}/{LEDGER_NAME}",
                error=problem[:500],
            )
            self.ledger_problem = problem

    async def drop_group(self, run: str) -> None:
        """Remove ``run``'s group from the ledger (compare-and-swap), if it holds it. With an
        unparsable ledger, nothing is written and nothing stops: the release or rollback that
        called goes on, and the group is dropped by recovery once the ledger is repaired (its
        Run is gone or Released by then); admission stays stopped meanwhile."""
        try:
            ledger = await self.read_ledger()
        except LedgerError:
            log.warning("the admission ledger is unparsable; its group is left for recovery", run=run)
            return
        if run in ledger.groups:
            await self.write_ledger(ledger.without(run))

    async def write_ledger(self, ledger: Ledger) -> Ledger:
        """Compare-and-swap of the head, after the segments of its new groups, then the deletion
        of the segments of the groups it dropped: fails with Conflict when the ledger changed
        since it was read (the new segments are then named by no head, and deleted later:
        recovery.collect_segments)."""
        try:
            ledger = await store_segments(self.kube, self.namespace, ledger, self.ledger_segments)
            body = ledger_object(ledger, self.namespace)
            if ledger.resource_version:
                written = await self.kube.replace(self.ledger_path(), body)
            else:
                written = await self.kube.create(resource_path("v1", "configmaps", self.namespace), body)
        except BaseException:  # maybe written after all (a reply lost): litter either way
            self.segments_litter = True
            raise
        try:
            if not await forget_unnamed(self.kube, self.namespace, ledger.digests, self.ledger_segments):
                self.segments_litter = True
        except BaseException:  # the head is written: the segments not deleted are litter
            self.segments_litter = True
            raise
        return assemble(parse_head(written), self.ledger_segments)

    async def take_fence(self) -> None:
        """Become the only writer: bump the fence in the ledger (compare-and-swap). An
        unparsable ledger is fenced too, its other data kept as it is for a human to repair
        (``fence_raw``): the controller leads and does everything but admit."""
        try:
            ledger = await self.read_ledger(require_fence=False)
        except LedgerError:
            await self.fence_raw()
            return
        self.fence = ledger.fence + 1
        self.segments_litter = True  # a term begins: the one before may have left some
        await self.write_ledger(ledger.fenced(self.fence, self.identity))
        log.info("fence taken", fence=self.fence, identity=self.identity)

    async def fence_raw(self) -> None:
        """Bump the fence of an unparsable ledger without touching its groups (compare-and-swap
        on its resourceVersion): a fence that does not parse counts as 0."""
        raw = await self.kube.get(self.ledger_path())
        data = dict(raw.get("data") or {})
        try:
            previous = int(data.get("fence", "0"))
        except ValueError:
            previous = 0
        self.fence = max(previous, 0) + 1
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": LEDGER_NAME,
                "namespace": self.namespace,
                "resourceVersion": raw["metadata"]["resourceVersion"],
            },
            "data": {**data, "fence": str(self.fence), "holder": self.identity},
        }
        await self.kube.replace(self.ledger_path(), body)
        log.warning("fence taken on an unparsable admission ledger", fence=self.fence, identity=self.identity)

    # -- status --------------------------------------------------------------------------

    async def patch_run_status(self, run: Obj, status: Mapping[str, Any]) -> Obj:
        patch = {"metadata": {"uid": run["metadata"]["uid"]}, "status": dict(status)}
        written = await self.kube.merge_patch(self.run_path(run["metadata"]["name"], "status"), patch)
        self.written[run["metadata"]["name"]] = (str(written["metadata"]["resourceVersion"]), time.monotonic())
        return written

    def timestamp(self) -> str:
        return self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
