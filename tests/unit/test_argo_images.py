"""The executor image's registration with the process kubelet (localcluster.argoworkflows):
process-wide, so one of two local clusters' Argo stopping must leave it to the other. Before,
the real-node module's Argo stopping unregistered it, and the test session's Argo step Pods
never started again (test_workflow_deleted_mid_check.py timed out: 'the check running')."""

from pathlib import Path
from typing import Any

import pytest

from localcluster import argoworkflows, podprocess
from localcluster.argoworkflows import EXECUTOR_IMAGE_NAME, ArgoController


@pytest.fixture(autouse=True)
def no_argo_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as if no Argo ran in this process: in a full run the session's local
    cluster runs Argo while this test runs, and holds the executor image itself."""
    monkeypatch.setattr(argoworkflows, "_IMAGE_HOLDERS", set())
    entrypoints = {k: v for k, v in podprocess.IMAGE_ENTRYPOINTS.items() if k != EXECUTOR_IMAGE_NAME}
    path_dirs = {k: v for k, v in podprocess.IMAGE_PATH_DIRS.items() if k != EXECUTOR_IMAGE_NAME}
    mount_images = {image for image in podprocess.MOUNT_NAMESPACE_IMAGES if image != EXECUTOR_IMAGE_NAME}
    monkeypatch.setattr(podprocess, "IMAGE_ENTRYPOINTS", entrypoints)
    monkeypatch.setattr(podprocess, "IMAGE_PATH_DIRS", path_dirs)
    monkeypatch.setattr(podprocess, "MOUNT_NAMESPACE_IMAGES", mount_images)


def registered() -> bool:
    return (
        EXECUTOR_IMAGE_NAME in podprocess.IMAGE_ENTRYPOINTS
        and EXECUTOR_IMAGE_NAME in podprocess.IMAGE_PATH_DIRS
        and EXECUTOR_IMAGE_NAME in podprocess.MOUNT_NAMESPACE_IMAGES
    )


def test_the_executor_image_stays_registered_until_the_last_argo_stops(tmp_path: Path) -> None:
    nothing: Any = None
    first = ArgoController(nothing, nothing, tmp_path / "one")
    second = ArgoController(nothing, nothing, tmp_path / "two")
    first.register_images()
    assert registered()
    second.register_images()
    first.stop()
    assert registered(), "one Argo stopping unregistered the executor image the other still runs"
    second.stop()
    assert not registered()
