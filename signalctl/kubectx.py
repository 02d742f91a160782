"""The operator's connection: the namespace signalctl uses, and how an API error becomes a
message that says what failed, for which object, and what to do next (which kubeconfig, merged
as kubectl merges it: signalctl/kubeconfigs.py).

``explain`` is pure.
Used by every operator command (not by ``signalctl demo``)."""

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import AlreadyExists, ApiError, Conflict, Forbidden, Invalid, NotFound, ServerError, TransportError
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


def explain(exc: ApiError, verb: str, what: str, hint: str = "") -> str:
    """One line: ``verb`` (get, patch, ...) of ``what`` (e.g. "Run signal-system/x") failed,
    why, and what the operator can do. ``hint`` is the advice for a missing object."""
    detail = exc.message or exc.reason or f"HTTP {exc.status}"
    if isinstance(exc, TransportError):  # no answer at all
        return (
            f"could not {verb} {what}: no answer from the API server ({detail}); check the kubeconfig and the cluster"
        )
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
