"""The operator's connection: which kubeconfig and namespace signalctl uses, and how an API
error becomes a message that says what failed, for which object, and what to do next.

``resolve_kubeconfig`` and ``explain`` are pure; ``connect`` opens a ``kubeio.Kube``.
Used by every operator command (not by ``signalctl demo``)."""

import os
from pathlib import Path

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import AlreadyExists, ApiError, Conflict, Forbidden, Invalid, NotFound, ServerError
from shared import keys

DEFAULT_NAMESPACE = "signal-system"
FIELD_MANAGER = "signalctl"
RUNS_HINT = "list Runs with `signalctl get runs -A`"


class CommandError(Exception):
    """A failure to report to the operator: the message is complete; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def resolve_kubeconfig(flag: str | None, environ: dict[str, str], home: Path) -> str | None:
    """The kubeconfig file to use: ``--kubeconfig``, else the first existing file of
    ``$KUBECONFIG`` (a path list), else ``~/.kube/config``. None means in-cluster
    configuration (only inside a Pod). Raise CommandError when nothing usable is there."""
    if flag:
        if not Path(flag).is_file():
            raise CommandError(f"kubeconfig {flag} does not exist; pass an existing file with --kubeconfig")
        return flag
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    for path in listed:
        if Path(path).is_file():
            return path
    default = home / ".kube" / "config"
    if not listed and default.is_file():
        return str(default)
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    tried = ", ".join(listed) if listed else str(default)
    raise CommandError(f"no kubeconfig found (tried {tried}); pass --kubeconfig FILE or set KUBECONFIG")


async def connect(kubeconfig: str | None) -> Kube:
    try:
        return await Kube.connect(kubeconfig=kubeconfig, field_manager=FIELD_MANAGER)
    except Exception as exc:
        raise CommandError(
            f"could not load kubeconfig {kubeconfig or '(in-cluster)'}: {exc}; check the file or pass --kubeconfig"
        ) from exc


def explain(exc: ApiError, verb: str, what: str, hint: str = "") -> str:
    """One line: ``verb`` (get, patch, ...) of ``what`` (e.g. "Run signal-system/x") failed,
    why, and what the operator can do. ``hint`` is the advice for a missing object."""
    detail = exc.message or exc.reason or f"HTTP {exc.status}"
    if isinstance(exc, NotFound):
        return f"{what} not found" + (f"; {hint}" if hint else "")
    if isinstance(exc, Forbidden):
        return (
            f"not allowed to {verb} {what}: {detail}; use a kubeconfig whose user may {verb} it "
            "(ask the cluster administrator for RBAC access)"
        )
    if isinstance(exc, Invalid):
        return f"the API server refused to {verb} {what}: {detail}; the object may not allow this change"
    if isinstance(exc, Conflict | AlreadyExists):
        return f"could not {verb} {what}: it changed meanwhile ({detail}); run the command again"
    if isinstance(exc, ServerError):
        return f"the API server failed to {verb} {what}: {detail}; retry, or check the API server's health"
    return f"could not {verb} {what}: HTTP {exc.status} {exc.reason}: {detail}"


def unreachable(kube: Kube, exc: Exception) -> str:
    """Message for a connection failure (no HTTP answer at all)."""
    host = kube.host
    return f"cannot reach the API server at {host}: {exc or type(exc).__name__}; check the kubeconfig and the cluster"


async def get_run(kube: Kube, namespace: str, name: str, *, missing_code: int = 1) -> Obj:
    """The Run, or a CommandError that says how to find it (``missing_code`` when it is absent)."""
    try:
        return await kube.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, name))
    except ApiError as exc:
        hint = f"{RUNS_HINT} (this looked in namespace {namespace}; choose another with -n)"
        code = missing_code if isinstance(exc, NotFound) else 1
        raise CommandError(explain(exc, "get", f"Run {namespace}/{name}", hint), code) from exc
