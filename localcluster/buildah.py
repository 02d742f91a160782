"""Thin typed calls to buildah (vfs storage of our own, chroot isolation, never pulling) and
mmdebstrap, for localcluster/images.py. Every failure names the command and its output."""

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any, Final

# Where a CA bundle for pip (PIP_CERT on the host) appears inside RUN steps of a build.
BUILD_CA_PATH: Final = "/run/signal-build/ca.crt"
_TIMEOUT: Final = 3600


class ImageBuildError(RuntimeError):
    """An image could not be built, imported or exported."""


def _run(argv: list[str], *, what: str, capture: bool = True) -> str:
    try:
        done = subprocess.run(argv, capture_output=capture, text=True, timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageBuildError(
            f"{what}: cannot run {argv[0]} ({exc}); install it with hack/install-system-deps.sh"
        ) from exc
    if done.returncode != 0:
        output = ((done.stdout or "") + (done.stderr or ""))[-6000:]
        raise ImageBuildError(f"{what} failed (exit {done.returncode}): {' '.join(argv[:6])} ...\n{output}")
    return done.stdout or ""


def mmdebstrap_tar(options: list[str], target: Path) -> None:
    """A Debian root filesystem as a tar file (mirrors: mmdebstrap's defaults for the suite)."""
    _run(["mmdebstrap", "--mode=root", "--format=tar", "--quiet", *options, str(target)], what="mmdebstrap")


class Buildah:
    """buildah on a storage of our own (``root``), vfs driver."""

    def __init__(self, root: Path, runroot: Path) -> None:
        self.prefix = ["buildah", "--root", str(root), "--runroot", str(runroot), "--storage-driver", "vfs"]

    def __call__(self, *args: str, what: str, capture: bool = True) -> str:
        return _run([*self.prefix, *args], what=what, capture=capture)

    def image_label(self, reference: str, label: str) -> str | None:
        """The label's value on a stored image; None when the image is not stored."""
        try:
            body = json.loads(self("inspect", "--type", "image", reference, what=f"inspecting {reference}"))
        except ImageBuildError:
            return None
        labels = (body.get("OCIv1", {}).get("config") or {}).get("Labels") or {}
        value = labels.get(label)
        return str(value) if value is not None else None

    def image_digest(self, reference: str) -> str:
        """A stored image's digest, checked to be the sha256 of its stored manifest (which names
        its config and layers by digest)."""
        body = json.loads(self("inspect", "--type", "image", reference, what=f"inspecting {reference}"))
        digest = str(body.get("FromImageDigest") or "")
        manifest = str(body.get("Manifest") or "")
        computed = "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()
        if not manifest or digest != computed:
            raise ImageBuildError(
                f"{reference}: its recorded digest {digest or '(none)'} is not its manifest's {computed}; "
                f"remove it (buildah rmi {reference}) and build again"
            )
        return digest

    def image_config(self, reference: str) -> dict[str, Any]:
        body = json.loads(self("inspect", "--type", "image", reference, what=f"inspecting {reference}"))
        config: dict[str, Any] = body.get("OCIv1", {}).get("config") or {}
        return config

    def import_rootfs(self, tar: Path, reference: str, labels: dict[str, str]) -> None:
        """A root filesystem tar as a one-layer image named ``reference``."""
        container = self("from", "scratch", what="buildah from scratch").strip()
        try:
            self("add", container, str(tar), "/", what=f"adding {tar} to {reference}")
            label_args = [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
            self(
                "config",
                "--env",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--cmd",
                '["bash"]',
                *label_args,
                container,
                what=f"configuring {reference}",
            )
            self("commit", "--quiet", container, reference, what=f"committing {reference}")
        finally:
            self("rm", container, what=f"removing the working container {container}")

    def bud(
        self,
        dockerfile: Path,
        context: Path,
        reference: str,
        *,
        pip_cert: str | None,
        labels: dict[str, str] | None = None,
        build_args: dict[str, str] | None = None,
    ) -> None:
        """``buildah bud`` with chroot isolation, never pulling. One commit per stage (no
        ``--layers``): with vfs every layer is a full copy of the root filesystem, and
        localcluster/images.py caches whole images (and the shared build stage) by content."""
        extra: list[str] = []
        if pip_cert:
            extra = ["--volume", f"{pip_cert}:{BUILD_CA_PATH}:ro", "--build-arg", f"PIP_CERT={BUILD_CA_PATH}"]
        extra += [arg for key, value in (labels or {}).items() for arg in ("--label", f"{key}={value}")]
        extra += [arg for key, value in (build_args or {}).items() for arg in ("--build-arg", f"{key}={value}")]
        self(
            "bud",
            "--isolation",
            "chroot",
            "--pull=never",
            "--layers=false",
            *extra,
            "--file",
            str(dockerfile),
            "--tag",
            reference,
            str(context),
            what=f"building {reference} from {dockerfile}",
        )

    def push_oci_archive(self, reference: str, archive: Path) -> str:
        """Write the image to an OCI archive (replacing it); the manifest's digest."""
        digest_file = archive.with_suffix(".digest")
        partial = archive.with_suffix(".tar.partial")
        partial.unlink(missing_ok=True)
        self(
            "push",
            "--quiet",
            "--digestfile",
            str(digest_file),
            reference,
            f"oci-archive:{partial}:{reference}",
            what=f"writing {reference} to {archive}",
        )
        partial.replace(archive)
        digest = digest_file.read_text().strip()
        digest_file.unlink()
        if not digest.startswith("sha256:"):
            raise ImageBuildError(f"buildah push wrote no digest for {reference} (got {digest!r})")
        return digest

    def remove_image(self, reference: str) -> None:
        """Drop an image (kept in its OCI archive) and whatever only it used. Called where no build
        is in flight (under localcluster/images.py's build lock, or by a test whose own
        container is gone), so no working container is in use: every one left is removed first
        (a multi-stage ``bud`` leaves one on the stage it builds from, a killed build its own),
        or the prune fails on an image they still use."""
        self("rmi", reference, what=f"removing {reference} from buildah's storage")
        self("rm", "--all", what="removing buildah's leftover working containers")
        self("rmi", "--prune", what="pruning buildah's storage")
