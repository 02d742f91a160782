"""Container images for real nodes, built without Docker (cached by content).

* **Base:** ``mmdebstrap`` makes a Debian bookworm root filesystem from Debian's packages
  (minbase, slim), loaded into buildah's storage as ``BASE_REFERENCE``; its digest (checked to
  be its manifest's sha256) is recorded in the index when made, checked before every build and
  passed as ``BASE_IMAGE=<BASE_REFERENCE>@<digest>`` (the Dockerfiles refuse a base by tag).
* **Signal's images:** ``Dockerfile.<name>``, built with ``buildah bud --isolation chroot
  --storage-driver vfs --pull=never``. Their first stage (``FROM ${BASE_IMAGE} AS build``:
  Python, the virtual environment, the locked build backend) is the same text in all four:
  built once (``STAGE_REFERENCE`` while its key holds), each image's own stages (its lock, the
  distribution, the final image) on it (``split_build_stage``).
* **Local-cluster images** (never shipped): Argo's executor (``argoexec``) and
  workflow-controller from localcluster/argo's build, and the real Kubeflow MPI operator
  from localcluster/mpi-operator/build.sh, each a static binary on the same base.

Each image is written as an OCI archive ``<dir>/<name>.tar`` (the image's reference as its
``org.opencontainers.image.ref.name``) and recorded in ``<dir>/index.json`` with its
manifest digest, so manifests can pin ``reference@digest``. An image is rebuilt only when
its key changes: the Dockerfile, the content of every file its ``COPY`` lines take from the
context, the binary, and the base's recipe. Settings: ``SIGNAL_IMAGES_DIR`` (default
``.cache/images``). Run ``python -m localcluster.images [NAME ...]``.
"""

import argparse
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, TextIO

from localcluster.buildah import Buildah, ImageBuildError, mmdebstrap_tar

REPO: Final = Path(__file__).resolve().parent.parent
BASE_REFERENCE: Final = "debian:bookworm-slim"
BASE_SUITE: Final = "bookworm"
BASE_KEY_LABEL: Final = "dev.projectsignal.base-key"
# The build argument every Dockerfile takes its base from (``FROM ${BASE_IMAGE}``).
BASE_ARG: Final = "BASE_IMAGE"
BASE_NAME_LABEL: Final = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL: Final = "org.opencontainers.image.base.digest"
# Bump when the way images are built changes (invalidates every cached image).
RECIPE: Final = "signal-images/2"
PROJECT_IMAGES: Final = ("controller", "adapter", "portal", "runner")
PROJECT_TAG: Final = "0.1.0"
LOCAL_IMAGES: Final = ("argoexec", "workflow-controller", "mpi-operator")
BUILD_STAGE: Final = "build"
STAGE_REFERENCE: Final = "localcluster.projectsignal.dev/build-stage:local"
STAGE_KEY_LABEL: Final = "dev.projectsignal.build-stage-key"
INDEX: Final = "index.json"
_IGNORED_PARTS: Final = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})


@dataclass(frozen=True)
class Image:
    """One built image, as recorded in the index."""

    name: str
    reference: str
    archive: str  # file name under the images directory
    digest: str  # the manifest's digest, sha256:<hex>
    key: str
    size_bytes: int
    build_seconds: float
    entrypoint: list[str]
    user: str
    base_digest: str = ""  # the digest of the base it was built on (binary and project images)

    @property
    def pinned(self) -> str:
        return f"{self.reference}@{self.digest}"


def images_dir() -> Path:
    configured = os.environ.get("SIGNAL_IMAGES_DIR")
    return Path(configured) if configured else REPO / ".cache" / "images"


def project_reference(name: str) -> str:
    return f"projectsignal.dev/{name}:{PROJECT_TAG}"


def local_reference(name: str) -> str:
    return f"localcluster.projectsignal.dev/{name}:local"


def base_recipe() -> list[str]:
    """mmdebstrap's options for the base (the part of the base's key that we control)."""
    excludes = ["/usr/share/man/*", "/usr/share/doc/*", "/usr/share/info/*", "/usr/share/locale/*"]
    includes = ["/usr/share/doc/*/copyright", "/usr/share/locale/locale.alias"]
    return [
        "--variant=minbase",
        *(f"--dpkgopt=path-exclude={p}" for p in excludes),
        *(f"--dpkgopt=path-include={p}" for p in includes),
        '--aptopt=Binary::apt::APT::Keep-Downloaded-Packages "false"',
        BASE_SUITE,
    ]


def base_key() -> str:
    return _sha256_text("\n".join([RECIPE, BASE_REFERENCE, *base_recipe()]))


def copy_sources(dockerfile_text: str) -> list[str]:
    """Context paths the Dockerfile's ``COPY``/``ADD`` lines take (not ``--from`` stages)."""
    sources: list[str] = []
    for raw in dockerfile_text.splitlines():
        words = raw.split()
        if not words or words[0].upper() not in {"COPY", "ADD"}:
            continue
        words = shlex.split(raw)
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]) or len(args) < 2:
            continue
        sources.extend(args[:-1])
    return sources


def context_files(context: Path, sources: list[str]) -> Iterator[Path]:
    """Every file under the sources, in a stable order, without caches."""
    for source in sorted(set(sources)):
        path = context / source
        if path.is_file():
            yield path
        elif path.is_dir():
            for child in sorted(path.rglob("*")):
                rel = child.relative_to(context)
                if child.is_file() and not _IGNORED_PARTS.intersection(rel.parts) and child.suffix != ".pyc":
                    yield child
        else:
            raise ImageBuildError(f"{source} (named by a COPY line) is not in the build context {context}")


def split_build_stage(text: str) -> tuple[str, str, str] | None:
    """Pure: a Dockerfile's global ``ARG`` lines (the preamble before its first ``FROM``), its
    first stage when it is ``FROM ${BASE_IMAGE} AS build`` and another stage follows, and the
    rest from the next ``FROM`` on; None for any other shape."""
    lines = text.splitlines(keepends=True)
    froms = [i for i, line in enumerate(lines) if line.split()[:1] and line.split()[0].upper() == "FROM"]
    if len(froms) < 2:
        return None
    words = lines[froms[0]].split()
    if words[1:2] != [f"${{{BASE_ARG}}}"] or [w.lower() for w in words[2:]] != ["as", BUILD_STAGE]:
        return None
    preamble = "".join(line for line in lines[: froms[0]] if line.split()[:1] == ["ARG"])
    return preamble, "".join(lines[froms[0] : froms[1]]), "".join(lines[froms[1] :])


def pinned_base(digest: str) -> str:
    """The ``BASE_IMAGE`` build argument: the base by name and digest."""
    return f"{BASE_REFERENCE}@{digest}"


def dockerfile_key(dockerfile: Path, context: Path) -> str:
    return text_key(dockerfile.read_text(), context)


def text_key(text: str, context: Path) -> str:
    """The cache key of a Dockerfile's text built in ``context``."""
    digest = hashlib.sha256()
    for part in (RECIPE, base_key(), text, _read_if(context / ".dockerignore")):
        digest.update(_sha256_text(part).encode())
    for path in context_files(context, copy_sources(text)):
        digest.update(f"{path.relative_to(context)}\0{_sha256_file(path)}\n".encode())
    return digest.hexdigest()


def binary_containerfile(binary_name: str, user: str) -> str:
    """A static Go binary on the base (pinned by digest: ``BASE_IMAGE``), as a non-root user."""
    return (
        f"ARG {BASE_ARG}\n"
        f"FROM ${{{BASE_ARG}}}\n"
        f"COPY {binary_name} /usr/local/bin/{binary_name}\n"
        f"USER {user}\n"
        f'ENTRYPOINT ["/usr/local/bin/{binary_name}"]\n'
    )


# Argo's executor runs as 8737 in Argo's own images; the others as 65532.
_BINARY_USERS: Final = {"argoexec": "8737", "workflow-controller": "8737", "mpi-operator": "65532:65532"}


class Builder:
    """Builds images into ``directory`` (buildah storage, archives, index), one at a time."""

    def __init__(self, directory: Path | None = None, log: Callable[[str], None] | None = None) -> None:
        self.directory = directory or images_dir()
        self.log = log or (lambda message: print(message, file=sys.stderr))
        self.buildah = Buildah(self.directory / "storage", self.directory / "run")

    def _index_body(self) -> dict[str, Any]:
        path = self.directory / INDEX
        return json.loads(path.read_text()) if path.exists() else {"images": {}}

    def index(self) -> dict[str, Image]:
        return {name: Image(**body) for name, body in self._index_body()["images"].items()}

    def base_digest(self) -> str | None:
        """The digest recorded for the base when it was made (None before)."""
        base = self._index_body().get("base") or {}
        return str(base["digest"]) if base.get("key") == base_key() and base.get("digest") else None

    def _write_index(self, body: dict[str, Any]) -> None:
        tmp = self.directory / f"{INDEX}.tmp"
        tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.directory / INDEX)

    def build(self, names: list[str]) -> dict[str, Image]:
        """The named images (all when empty), built where their key changed; the index."""
        unknown = sorted(set(names) - set(PROJECT_IMAGES) - set(LOCAL_IMAGES))
        if unknown:
            raise ImageBuildError(f"unknown image(s) {unknown}: choose from {[*PROJECT_IMAGES, *LOCAL_IMAGES]}")
        with self.locked():
            for name in names or [*PROJECT_IMAGES, *LOCAL_IMAGES]:
                if name in PROJECT_IMAGES:
                    self._project_image(name)
                else:
                    self._binary_image(name)
            return self.index()

    def locked(self) -> TextIO:
        """The directory's build lock (one build at a time), held until the file is closed."""
        self.directory.mkdir(parents=True, exist_ok=True)
        lock = (self.directory / ".lock").open("w")
        fcntl.flock(lock, fcntl.LOCK_EX)
        return lock

    def _project_image(self, name: str) -> Image:
        dockerfile = REPO / f"Dockerfile.{name}"
        key = dockerfile_key(dockerfile, REPO)
        base = self.ensure_base()
        cached = self._cached(name, key, base)
        if cached:
            return cached
        started = time.monotonic()
        reference = project_reference(name)
        pip_cert = os.environ.get("PIP_CERT")
        split = split_build_stage(dockerfile.read_text())
        if split is None:
            self.log(f"images: building {reference} from {dockerfile.name}")
            self.buildah.bud(dockerfile, REPO, reference, pip_cert=pip_cert, **self._base_args(base))
            return self._record(name, reference, key, started, base)
        preamble, stage, rest = split
        self._ensure_stage(preamble + stage, pip_cert, base)
        self.log(f"images: building {reference} from {dockerfile.name} (its '{BUILD_STAGE}' stage: {STAGE_REFERENCE})")
        with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=self.directory) as scratch:
            containerfile = Path(scratch) / f"Dockerfile.{name}"
            containerfile.write_text(f"{preamble}FROM {STAGE_REFERENCE} AS {BUILD_STAGE}\n{rest}")
            self.buildah.bud(containerfile, REPO, reference, pip_cert=pip_cert, **self._base_args(base))
        return self._record(name, reference, key, started, base)

    @staticmethod
    def _base_args(base: str) -> dict[str, dict[str, str]]:
        return {
            "build_args": {BASE_ARG: pinned_base(base)},
            "labels": {BASE_NAME_LABEL: BASE_REFERENCE, BASE_DIGEST_LABEL: base},
        }

    def _ensure_stage(self, stage: str, pip_cert: str | None, base: str) -> None:
        """The shared build stage, built unless the stored one has the same key (its text, the
        files it copies and the base's digest)."""
        key = _sha256_text(f"{text_key(stage, REPO)}\n{base}")
        if self.buildah.image_label(STAGE_REFERENCE, STAGE_KEY_LABEL) == key:
            return
        started = time.monotonic()
        self.log(f"images: building the shared '{BUILD_STAGE}' stage {STAGE_REFERENCE}")
        with tempfile.TemporaryDirectory(prefix="stage-", dir=self.directory) as scratch:
            containerfile = Path(scratch) / "Dockerfile.build"
            containerfile.write_text(stage)
            args = self._base_args(base)
            args["labels"][STAGE_KEY_LABEL] = key
            self.buildah.bud(containerfile, REPO, STAGE_REFERENCE, pip_cert=pip_cert, **args)
        self.log(f"images: {STAGE_REFERENCE} in {time.monotonic() - started:.1f}s")

    def _binary_image(self, name: str) -> Image:
        binary = _local_binary(name)
        containerfile = binary_containerfile(name, _BINARY_USERS[name])
        key = _sha256_text("\n".join([RECIPE, base_key(), containerfile, _sha256_file(binary)]))
        base = self.ensure_base()
        cached = self._cached(name, key, base)
        if cached:
            return cached
        started = time.monotonic()
        reference = local_reference(name)
        self.log(f"images: building {reference} from {binary}")
        with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=self.directory) as context:
            (Path(context) / "Containerfile").write_text(containerfile)
            target = Path(context) / name
            shutil.copyfile(binary, target)
            target.chmod(0o755)
            self.buildah.bud(
                Path(context) / "Containerfile", Path(context), reference, pip_cert=None, **self._base_args(base)
            )
        return self._record(name, reference, key, started, base)

    def _cached(self, name: str, key: str, base: str) -> Image | None:
        image = self.index().get(name)
        if image and image.key == key and image.base_digest == base and (self.directory / image.archive).is_file():
            return image
        return None

    def ensure_base(self) -> str:
        """The base's digest: made (and its digest recorded) unless the stored one has the
        base's key; a stored base whose digest is not the recorded one is refused."""
        key = base_key()
        if self.buildah.image_label(BASE_REFERENCE, BASE_KEY_LABEL) != key:
            self.log(f"images: making the {BASE_REFERENCE} base with mmdebstrap (about 1-2 minutes)")
            with tempfile.TemporaryDirectory(prefix="base-", dir=self.directory) as scratch:
                tar = Path(scratch) / "rootfs.tar"
                mmdebstrap_tar(base_recipe(), tar)
                self.buildah.import_rootfs(tar, BASE_REFERENCE, {BASE_KEY_LABEL: key})
            self._record_base(self.buildah.image_digest(BASE_REFERENCE))
        digest = self.buildah.image_digest(BASE_REFERENCE)
        recorded = self.base_digest()
        if recorded is None:  # a base made before digests were recorded: recorded as found
            self._record_base(digest)
        elif recorded != digest:
            raise ImageBuildError(
                f"the stored base {BASE_REFERENCE} has digest {digest}, not the digest {recorded} recorded in "
                f"{self.directory / INDEX} when it was made: something replaced it. Remove it "
                f"(buildah rmi {BASE_REFERENCE}) so the next build makes and records a new one"
            )
        return digest

    def _record_base(self, digest: str) -> None:
        body = self._index_body()
        body["base"] = {"reference": BASE_REFERENCE, "digest": digest, "key": base_key()}
        self._write_index(body)
        self.log(f"images: base {pinned_base(digest)} recorded")

    def _record(self, name: str, reference: str, key: str, started: float, base: str) -> Image:
        archive = self.directory / f"{name}.tar"
        digest = self.buildah.push_oci_archive(reference, archive)
        config = self.buildah.image_config(reference)
        # The archive is the product; only the base stays in buildah's storage.
        self.buildah.remove_image(reference)
        image = Image(
            name=name,
            reference=reference,
            archive=archive.name,
            digest=digest,
            key=key,
            size_bytes=archive.stat().st_size,
            build_seconds=round(time.monotonic() - started, 1),
            entrypoint=list(config.get("Entrypoint") or []),
            user=str(config.get("User") or ""),
            base_digest=base,
        )
        body = self._index_body()
        body["images"][name] = asdict(image)
        self._write_index(body)
        self.log(f"images: {image.pinned} ({image.size_bytes / 2**20:.0f} MiB) in {image.build_seconds}s")
        return image


def _local_binary(name: str) -> Path:
    if name == "mpi-operator":
        from localcluster.kubeflowmpi import operator_binary  # noqa: PLC0415 (built only when asked for)

        return operator_binary()
    from localcluster.binaries import argo_build_dir  # noqa: PLC0415

    return argo_build_dir() / name


def _read_if(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.images", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names", nargs="*", help=f"images to build (default: all of {[*PROJECT_IMAGES, *LOCAL_IMAGES]})"
    )
    parser.add_argument("--base", action="store_true", help=f"only make (or find) the {BASE_REFERENCE} base")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        if args.base:
            builder = Builder()
            with builder.locked():
                print(pinned_base(builder.ensure_base()))
            return 0
        index = Builder().build(args.names)
    except ImageBuildError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    for name in args.names or [*PROJECT_IMAGES, *LOCAL_IMAGES]:
        image = index[name]
        print(f"{name}\t{image.pinned}\t{image.size_bytes}\t{images_dir() / image.archive}")
    print(f"images: done in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
