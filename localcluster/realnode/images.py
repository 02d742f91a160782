"""OCI image archives for real nodes: the static pause image and the test image, written as an
OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256``) in one tar file, byte for
byte reproducible, from the static program ``localcluster/realnode/static`` builds.

``ctr -n k8s.io images import`` loads such an archive into a node's containerd (see
``localcluster.realnode.containerd``); the images helper's ``.cache/images/*.tar`` archives go in
the same way. Nothing here talks to a registry: no image is ever pulled.
"""

import hashlib
import io
import json
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from localcluster.binaries import REPO_ROOT, BuildError

STATIC_BUILD_SCRIPT = Path(__file__).resolve().parent / "static" / "build.sh"
PAUSE_IMAGE = "localcluster.projectsignal.dev/pause:signal"
"""The Pod sandbox image of every real node (containerd's ``sandbox_image``)."""
TEST_IMAGE = "localcluster.projectsignal.dev/nettest:signal"
"""A tiny static test image: ``/nettest echo|exit|sleep|serve|dial|lookup|hostname``."""

_LAYER = "application/vnd.oci.image.layer.v1.tar"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class ImageArchive:
    """An OCI archive on disk and the image name it carries."""

    name: str
    path: Path


def static_binary() -> Path:
    """The static program (pause, namespace holder, test tool), built and cached on first use."""
    result = subprocess.run(["bash", str(STATIC_BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"building the static pause program failed (exit {result.returncode}); "
            f"run {STATIC_BUILD_SCRIPT} to see why:\n{result.stderr[-3000:]}"
        )
    return Path(result.stdout.strip().splitlines()[-1])


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def _layer(files: dict[str, tuple[bytes, int]]) -> bytes:
    """An uncompressed, reproducible layer tar: path -> (content, mode); owner root, mtime 0."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files):
            content, mode = files[path]
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def oci_archive(name: str, files: dict[str, tuple[bytes, int]], entrypoint: list[str], destination: Path) -> Path:
    """Write a one-layer linux/amd64 image named ``name`` (``host/repo:tag``) holding ``files``
    as an OCI archive at ``destination``; returns ``destination``. The same input gives the same
    bytes."""
    layer_digest, layer = _blob(_layer(files))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "localcluster.realnode.images", "created": "1970-01-01T00:00:00Z"}],
    }
    config_digest, config_bytes = _blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": _MANIFEST,
        "config": {"mediaType": _CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": _LAYER, "digest": layer_digest, "size": len(layer)}],
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": _MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    entries = {
        "oci-layout": (json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), 0o644),
        "index.json": (json.dumps(index, sort_keys=True).encode(), 0o644),
    }
    for digest, data in ((layer_digest, layer), (config_digest, config_bytes), (manifest_digest, manifest_bytes)):
        entries[f"blobs/sha256/{digest.removeprefix('sha256:')}"] = (data, 0o644)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_suffix(".partial")
    partial.write_bytes(_layer(entries))
    partial.replace(destination)
    return destination


def node_images(directory: Path | None = None) -> list[ImageArchive]:
    """The pause and test images as OCI archives (under ``$SIGNAL_REALNODE_DIR/images``, default
    ``.cache/realnode/images``),
    rewritten only when the static program changed."""
    binary = static_binary()
    directory = directory or Path(os.environ.get("SIGNAL_REALNODE_DIR") or REPO_ROOT / ".cache" / "realnode") / "images"
    stamp = binary.name.rsplit("-", 1)[-1]
    content = binary.read_bytes()
    archives = []
    for name, path_in_image in ((PAUSE_IMAGE, "pause"), (TEST_IMAGE, "nettest")):
        destination = directory / f"{path_in_image}-{stamp}.tar"
        if not destination.exists():
            oci_archive(name, {path_in_image: (content, 0o755)}, [f"/{path_in_image}"], destination)
        archives.append(ImageArchive(name, destination))
    return archives
