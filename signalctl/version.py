"""``signalctl version [--client]``: this client's version and the controller's.

The controller's version is read from its Deployment (``signal-controller`` in the Signal
namespace): the ``app.kubernetes.io/version`` label when it carries one, else the tag of the
controller container's image, plus the image digests its Pods actually run (``imageID``). Not
from ``signal_build_info`` on /metrics: an operator's kubeconfig reaches the API server, not the
controller's metrics port (the NetworkPolicy admits only scrapers), and the Deployment is what an
upgrade changes. ``controller_version`` is pure."""

import argparse
from typing import Any

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import ApiError
from shared.version import VERSION
from signalctl import output
from signalctl.kubectx import explain

DEPLOYMENT = "signal-controller"
CONTAINER = "controller"
VERSION_LABEL = "app.kubernetes.io/version"


def image_tag(image: str) -> str | None:
    """The tag of ``registry/name:tag[@sha256:...]`` (None when there is none)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def controller_version(deployment: Obj, pods: list[Obj]) -> dict[str, Any]:
    meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    container = next((c for c in containers if c.get("name") == CONTAINER), containers[0] if containers else {})
    image = str(container.get("image") or "")
    version = (meta.get("labels") or {}).get(VERSION_LABEL) or image_tag(image) or "unknown"
    status = deployment.get("status") or {}
    running = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        for state in (pod.get("status") or {}).get("containerStatuses") or []:
            if state.get("name") == container.get("name"):
                running.append({"pod": pod["metadata"]["name"], "imageID": state.get("imageID") or ""})
    return {
        "deployment": f"{meta.get('namespace')}/{meta.get('name')}",
        "version": version,
        "image": image,
        "readyReplicas": int(status.get("readyReplicas") or 0),
        "replicas": int(spec.get("replicas") or 0),
        "pods": running,
    }


def text(client: str, controller: dict[str, Any] | None, problem: str = "") -> str:
    lines = [f"Client Version: {client}"]
    if controller is not None:
        lines.append(
            f"Controller Version: {controller['version']} (Deployment {controller['deployment']}, image "
            f"{controller['image']}, {controller['readyReplicas']}/{controller['replicas']} ready)"
        )
        lines += [f"  Pod {p['pod']}: {p['imageID'] or '<image not pulled yet>'}" for p in controller["pods"]]
    elif problem:
        lines.append(f"Controller Version: unknown ({problem})")
    return "\n".join(lines)


async def cmd_version(kube: Kube, args: argparse.Namespace) -> int:
    deployment_path = resource_path("apps/v1", "deployments", args.namespace, DEPLOYMENT)
    controller: dict[str, Any] | None = None
    problem = ""
    try:
        deployment = await kube.get(deployment_path)
        selector = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        pods: list[Obj] = []
        if selector:
            query = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            answer = await kube.get(resource_path("v1", "pods", args.namespace), labelSelector=query)
            pods = answer.get("items", [])
        controller = controller_version(deployment, pods)
    except ApiError as exc:
        problem = explain(
            exc, "get", f"Deployment {args.namespace}/{DEPLOYMENT}", "is Signal installed there? choose it with -n"
        )
    return print_version(args, controller, problem)


def print_version(args: argparse.Namespace, controller: dict[str, Any] | None, problem: str = "") -> int:
    document: dict[str, Any] = {"clientVersion": {"version": VERSION}}
    if controller is not None:
        document["controllerVersion"] = controller
    elif problem:
        document["controllerError"] = problem
    if args.output == "json":
        print(output.json_text(document))
    elif args.output == "yaml":
        print(output.yaml_text(document))
    else:
        print(text(VERSION, controller, problem))
    return 0 if controller is not None or args.client else 1


def client_only(args: argparse.Namespace) -> int:
    return print_version(args, None)


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]", common: argparse.ArgumentParser) -> None:
    version = commands.add_parser("version", parents=[common], help="the client's and the controller's versions")
    version.add_argument("--client", action="store_true", help="only the client's (no API server needed)")
    version.add_argument("-o", "--output", choices=("json", "yaml"), default=None, help="json or yaml")
    version.set_defaults(handler=cmd_version, offline=lambda args: client_only(args) if args.client else None)
