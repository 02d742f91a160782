"""Container statuses as the process kubelet reports them: running, and terminated with the
exit code, the signal and the termination message (capped at 4096 bytes like a kubelet's;
``FallbackToLogsOnError`` takes the log's tail). Pure apart from reading the container's
termination-message and log files."""

from datetime import UTC, datetime

from localcluster.kube import Obj
from localcluster.podprocess import ProcessSpec

TERMINATION_MESSAGE_LIMIT = 4096


def now() -> str:
    """The time as the kubelet writes it in a Pod's status (to the second)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def running_statuses(pod: Obj, started: str) -> list[Obj]:
    return [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": started}},
        }
        for c in pod["spec"]["containers"]
    ]


def terminated_status(spec: ProcessSpec, container: Obj, code: int, started: str) -> Obj:
    """``code``: the process's exit status, or minus the signal that killed it."""
    message = spec.termination_file.read_bytes()[:TERMINATION_MESSAGE_LIMIT] if spec.termination_file.exists() else b""
    if not message and code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
        message = spec.log_file.read_bytes()[-2048:] if spec.log_file.exists() else b""
    exit_code = code if code >= 0 else 128 - code
    terminated: Obj = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": started,
        "finishedAt": now(),
        "containerID": f"process://{spec.argv[0]}",
    }
    if code < 0:
        terminated["signal"] = -code
    if message:
        terminated["message"] = message.decode("utf-8", errors="replace")
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"terminated": terminated},
    }
