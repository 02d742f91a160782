"""localcluster/buildah.py ``remove_image`` with real buildah, in a storage of the test's own:
a working container left on an image that a rebuild has left dangling (what each multi-stage
``bud`` leaves on the shared build stage) must not make the prune fail, and is removed."""

import io
import tarfile
from pathlib import Path

from localcluster.buildah import Buildah

REFERENCE = "localhost/signal-test/tiny:local"


def _rootfs(tmp_path: Path, content: bytes) -> Path:
    tar = tmp_path / f"rootfs-{len(content)}.tar"
    with tarfile.open(tar, "w") as archive:
        info = tarfile.TarInfo("marker")
        info.size = len(content)
        archive.addfile(info, io.BytesIO(content))
    return tar


def test_a_leftover_container_on_a_dangling_image_does_not_stop_the_prune(tmp_path: Path) -> None:
    buildah = Buildah(tmp_path / "storage", tmp_path / "run")
    try:
        buildah.import_rootfs(_rootfs(tmp_path, b"first"), REFERENCE, {"n": "1"})
        buildah("from", "--pull-never", REFERENCE, what="a working container left behind")
        # Rebuilt under the same name: the first image is dangling, still used by the container.
        buildah.import_rootfs(_rootfs(tmp_path, b"second!"), REFERENCE, {"n": "2"})
        buildah.remove_image(REFERENCE)
        assert buildah("containers", "--quiet", what="listing containers").split() == []
        assert buildah("images", "--quiet", what="listing images").split() == []
    finally:
        buildah("rm", "--all", what="cleaning up")
        buildah("rmi", "--all", "--force", what="cleaning up")
