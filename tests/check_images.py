"""Check images of an operator's own (issue 44: bring your own image) for the real-node tests,
built with buildah on the local Debian base (localcluster/images.py), never FROM Signal's runner:
``examples/own-image/Containerfile`` (with ``python3``) and ``Containerfile.no-python`` (without).
Each is written as an OCI archive beside Signal's images, with its manifest digest, and rebuilt
only when its Containerfile changes (under the images directory's build lock)."""

import fcntl
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from localcluster import images
from localcluster.realnode import containerd
from localcluster.realnode.node import RealNode

OWN_IMAGE_DIR: Final = images.REPO / "examples" / "own-image"
CONTAINERFILES: Final = {"with-python": "Containerfile", "no-python": "Containerfile.no-python"}
REPOSITORY: Final = "registry.example/operator/gpu-diag"
"""The images' name: an operator's registry (never reached: the nodes have them imported)."""


@dataclass(frozen=True)
class CheckImage:
    name: str
    reference: str
    digest: str
    archive: Path

    @property
    def pinned(self) -> str:
        return f"{REPOSITORY}@{self.digest}"


def build_check_images(builder: images.Builder | None = None) -> dict[str, CheckImage]:
    builder = builder or images.Builder()
    directory = builder.directory / "check-images"
    directory.mkdir(parents=True, exist_ok=True)
    built: dict[str, CheckImage] = {}
    with (builder.directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, file in CONTAINERFILES.items():
            containerfile = OWN_IMAGE_DIR / file
            key = images.text_key(containerfile.read_text(), OWN_IMAGE_DIR)
            reference = f"{REPOSITORY}:{name}"
            archive, record = directory / f"{name}.tar", directory / f"{name}.json"
            if archive.exists() and record.exists() and json.loads(record.read_text()).get("key") == key:
                digest = json.loads(record.read_text())["digest"]
            else:
                builder.ensure_base()
                builder.buildah.bud(containerfile, OWN_IMAGE_DIR, reference, pip_cert=None)
                digest = builder.buildah.push_oci_archive(reference, archive)
                builder.buildah.remove_image(reference)
                record.write_text(json.dumps({"key": key, "digest": digest}))
            built[name] = CheckImage(name, reference, digest, archive)
    return built


def import_pinned(node: RealNode, image: CheckImage) -> None:
    """Import the archive into the node's containerd and name it by digest too, as a pull by
    digest would: the kubelet then finds ``name@sha256:...`` without pulling."""
    node.import_archive(image.archive)
    containerd.ctr(node.enter(), node.runtime, "images", "tag", "--force", image.reference, image.pinned)
