"""Kubernetes Events on Runs and Nodes (``kubectl describe`` shows them). Best effort: a
failed Event is logged, never fatal. Run Events live in the Run's namespace; Node Events in
``default`` (the only namespace the API server accepts for a cluster-scoped involved object),
where deploy/node-events lets the controller create Events and nothing else."""

import uuid
from typing import Any

from controller.reconcile.state import Context, log
from kubeio.client import Obj, resource_path
from kubeio.errors import ApiError
from shared import keys

COMPONENT = "signal-controller"
NODE_EVENT_NAMESPACE = "default"
"""The API server accepts Events about cluster-scoped objects (Nodes) only in ``default``."""


def node_ref(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "name": name}


def run_ref(run: Obj) -> Obj:
    meta = run["metadata"]
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.RUN_KIND,
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
    }


async def emit(ctx: Context, involved: Obj, reason: str, message: str, *, warning: bool = False) -> None:
    stamp = ctx.timestamp()
    namespace = involved.get("namespace") or NODE_EVENT_NAMESPACE
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason[:128],
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": ctx.identity,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        await ctx.kube.create(resource_path("v1", "events", namespace), body)
    except ApiError as exc:
        log.warning("could not record an event", reason=reason, object=involved.get("name"), error=str(exc)[:200])
