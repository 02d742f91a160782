"""The local base is content-addressed and recorded (issue 42, Low; docs/security.md "Supply
chain"): the digest of the base ``localcluster/images.py`` finds is recorded once, and a base
replaced under the same name (and the same key label) afterwards is refused, never built on.
Real buildah on a storage of the test's own, with a tiny root filesystem for a base."""

import io
import tarfile
from pathlib import Path

import pytest

from localcluster import images
from localcluster.buildah import ImageBuildError


def rootfs(path: Path, hostname: bytes) -> Path:
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("etc/hostname")
        info.size = len(hostname)
        tar.addfile(info, io.BytesIO(hostname))
    return path


def test_a_base_replaced_under_its_name_is_refused(tmp_path: Path) -> None:
    builder = images.Builder(tmp_path / "images", log=lambda _: None)
    builder.directory.mkdir()
    label = {images.BASE_KEY_LABEL: images.base_key()}
    builder.buildah.import_rootfs(rootfs(tmp_path / "a.tar", b"a\n"), images.BASE_REFERENCE, label)
    first = builder.ensure_base()
    assert first.startswith("sha256:")
    assert builder.base_digest() == first
    assert builder.ensure_base() == first
    builder.buildah.import_rootfs(rootfs(tmp_path / "b.tar", b"b\n"), images.BASE_REFERENCE, label)
    with pytest.raises(ImageBuildError, match=r"has digest sha256:[0-9a-f]{64}, not the digest .* recorded"):
        builder.ensure_base()
    assert builder.base_digest() == first
