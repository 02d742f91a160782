"""Any checkout path works, /tmp included (issue 11, 2.10). Containers of Argo's executor run in
private mount namespaces with a private /tmp; a checkout, a virtual environment or an image's
binaries under /tmp must still be visible there, where they are on the host, or every Argo step
of a checkout cloned under /tmp fails. Only those paths: the rest of the host's /tmp stays
hidden."""

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from localcluster import podprocess
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import KubeClient, Obj, resource_path
from tests.controller_support import eventually

IMAGE = "example.test/tmp-tool"


@pytest.fixture
async def tool_under_tmp(tmp_path: Path) -> AsyncIterator[Path]:
    """An image whose binary lives under /tmp (as the Argo build of a checkout under /tmp does)."""
    assert str(tmp_path).startswith("/tmp/"), tmp_path
    tools = tmp_path / "checkout" / "bin"
    tools.mkdir(parents=True)
    tool = tools / "signal-tmp-tool"
    tool.write_text(
        "#!/bin/sh\n"
        'if [ -e "$1" ]; then echo "host /tmp leaked: $1" > /dev/termination-log; exit 3; fi\n'
        'echo "ran $0 with a private /tmp" > /dev/termination-log\n'
    )
    tool.chmod(0o755)
    (tmp_path / "elsewhere-in-tmp").write_text("not for the Pod")
    podprocess.IMAGE_PATH_DIRS[IMAGE] = [str(tools)]
    podprocess.MOUNT_NAMESPACE_IMAGES.add(IMAGE)
    try:
        yield tool
    finally:
        podprocess.IMAGE_PATH_DIRS.pop(IMAGE, None)
        podprocess.MOUNT_NAMESPACE_IMAGES.discard(IMAGE)


async def _finished(admin: KubeClient, path: str, timeout: float = 60.0) -> Obj:

    async def done() -> Obj | None:
        pod = await admin.get(path)
        return pod if pod.get("status", {}).get("phase") in {"Succeeded", "Failed"} else None

    found: Obj = await eventually(done, timeout=timeout, what=f"Pod {path} finished")
    return found


@pytest.mark.asyncio(loop_scope="session")
async def test_a_binary_under_tmp_runs_in_a_private_mount_namespace(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tool_under_tmp: Path, tmp_path: Path
) -> None:
    node = f"paths-{uuid.uuid4().hex[:6]}"
    await cluster.add_nodes([SimNode(node)])
    try:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "tmp-tool"},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "containers": [
                    {"name": "main", "image": IMAGE, "args": [str(tmp_path / "elsewhere-in-tmp")]},
                ],
            },
        }
        podprocess.IMAGE_ENTRYPOINTS[IMAGE] = [tool_under_tmp.name]
        pods = resource_path("v1", "pods", namespace)
        await admin.create(pods, body)
        pod = await _finished(admin, f"{pods}/tmp-tool")
        state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert pod["status"]["phase"] == "Succeeded", state
        assert state["message"].strip() == f"ran {tool_under_tmp} with a private /tmp"
    finally:
        podprocess.IMAGE_ENTRYPOINTS.pop(IMAGE, None)
        await cluster.remove_node(node)


def test_the_checkout_and_the_python_environment_stay_visible() -> None:
    kept = podprocess.host_paths()
    assert str(podprocess.REPO_ROOT) in kept
    assert any(Path(p) == Path(sys.prefix) for p in kept)
