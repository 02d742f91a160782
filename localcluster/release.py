"""``make release``: the release bundle of Signal (docs/upgrade.md).

* ``dist/install.yaml``: ``kubectl kustomize deploy/`` (the CRDs and the base) with the four
  images pinned by digest (a kustomize ``images:`` overlay, as an operator's own overlay pins
  them): ``kubectl apply --server-side -f install.yaml`` installs it.
* ``dist/signal-<version>.tgz``: ``helm package`` of charts/signal, its values.yaml pinning the
  same digests.

The digests are those of the images built from the current sources into the local image index
(``python -m localcluster.images controller portal adapter runner``; ``localcluster.images``):
an image missing from the index, or built from other sources or another base, fails the
release with what to run. ``--unpinned`` writes tag-only manifests instead (for trying the
bundle out; never for production), and says so in install.yaml's header. ``--registry`` names
where the images are pushed (default: their project names, ``projectsignal.dev/<name>``).

Before writing, the bundle checks itself: the packaged chart rendered with its own values
(``helm template --include-crds``) must be object by object the same as install.yaml."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from localcluster.helmchart import CHART, DEPLOY, REPO_ROOT, Dumper, helm_binary, kustomize
from localcluster.images import INDEX, PROJECT_IMAGES, Builder, dockerfile_key, images_dir

DIST = REPO_ROOT / "dist"
IMAGE_NAMES = ("controller", "portal", "adapter", "runner")

Obj = dict[str, Any]


class ReleaseError(RuntimeError):
    """The bundle cannot be made as asked; the message says what to do."""


def built_digests() -> dict[str, str]:
    """The digest of each of Signal's four images in the local image index, checked to be built
    from the current sources and base."""
    directory = images_dir()
    index_path = directory / INDEX
    build = f"python -m localcluster.images {' '.join(IMAGE_NAMES)}"
    if not index_path.is_file():
        raise ReleaseError(f"no local image index at {index_path}: build the images first (`{build}`)")
    images = json.loads(index_path.read_text()).get("images", {})
    base = Builder(directory, log=lambda _: None).base_digest()
    digests: dict[str, str] = {}
    problems = []
    for name in IMAGE_NAMES:
        image = images.get(name)
        if not image or not image.get("digest"):
            problems.append(f"{name}: not in the index")
        elif image.get("key") != dockerfile_key(REPO_ROOT / f"Dockerfile.{name}", REPO_ROOT):
            problems.append(f"{name}: built from other sources than this checkout's")
        elif name in PROJECT_IMAGES and base is not None and image.get("base_digest") not in (None, base):
            problems.append(f"{name}: built on another base image")
        else:
            digests[name] = str(image["digest"])
    if problems:
        raise ReleaseError(
            f"cannot pin the images by digest ({'; '.join(problems)}): run `{build}` and `make release` again "
            "(or `make release RELEASE_ARGS=--unpinned` for a tag-only bundle, never for production)"
        )
    return digests


def install_yaml(registry: str, digests: dict[str, str] | None) -> list[Obj]:
    """deploy/ through a kustomize overlay that names the images (by digest when given)."""
    with tempfile.TemporaryDirectory(prefix="signal-release-") as scratch:
        overlay = Path(scratch)
        images = []
        for name in IMAGE_NAMES:
            entry: Obj = {"name": f"projectsignal.dev/{name}", "newName": f"{registry}/{name}"}
            if digests:
                entry["digest"] = digests[name]
            images.append(entry)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(DEPLOY, overlay)],
            "images": images,
        }
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return kustomize(overlay)


def pin_values(text: str, registry: str, digests: dict[str, str] | None) -> str:
    """The chart's values.yaml with each image's repository (and digest) set, comments kept."""
    for name in IMAGE_NAMES:
        pattern = re.compile(
            rf"^(  {name}:\n    repository: )\S+(\n    tag: \S+\n    digest: )\"\"$", flags=re.MULTILINE
        )
        digest = f'"{digests[name]}"' if digests else '""'
        replacement = f"\\g<1>{registry}/{name}\\g<2>{digest}"
        text, count = pattern.subn(replacement, text)
        if count != 1:
            raise ReleaseError(f"charts/signal/values.yaml: images.{name} is not in the expected form (found {count})")
    return text


def keyed(docs: list[Obj]) -> dict[tuple[str, str, str, str], Obj]:
    return {(d["apiVersion"], d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


def package_chart(registry: str, digests: dict[str, str] | None, out: Path) -> Path:
    """``helm package`` of a copy of the chart with the images pinned; returns the archive."""
    helm = str(helm_binary())
    with tempfile.TemporaryDirectory(prefix="signal-chart-") as scratch:
        copy = Path(scratch) / CHART.name
        shutil.copytree(CHART, copy)
        values = copy / "values.yaml"
        values.write_text(pin_values(values.read_text(), registry, digests))
        subprocess.run([helm, "lint", "--strict", str(copy)], check=True, capture_output=True, text=True)
        done = subprocess.run(
            [helm, "package", str(copy), "--destination", str(out)], check=True, capture_output=True, text=True
        )
    archive = Path(done.stdout.strip().rsplit(" ", 1)[-1])
    if not archive.is_file():
        raise ReleaseError(f"helm package wrote no archive: {done.stdout.strip()}")
    return archive


def release(registry: str, pinned: bool, out: Path = DIST) -> tuple[Path, Path]:
    digests = built_digests() if pinned else None
    out.mkdir(parents=True, exist_ok=True)
    objects = install_yaml(registry, digests)
    chart = package_chart(registry, digests, out)
    rendered = subprocess.run(
        [str(helm_binary()), "template", "signal", str(chart), "--include-crds"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    from_chart = keyed([d for d in yaml.safe_load_all(rendered) if d])
    if from_chart != keyed(objects):
        different = sorted(set(from_chart) ^ set(keyed(objects))) or "the same names, different content"
        raise ReleaseError(f"the packaged chart and install.yaml disagree ({different}): a bug in the chart")
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    pins = (
        "\n".join(f"#   {name}: {registry}/{name}@{digests[name]}" for name in IMAGE_NAMES)
        if digests
        else (
            "#   UNPINNED: images by tag only (make release RELEASE_ARGS=--unpinned); never install this in production"
        )
    )
    header = (
        f"# Project Signal {version}: the CRDs and deploy/ (kubectl apply --server-side -f install.yaml).\n"
        f"# Generated by `make release`; the chart {chart.name} renders the same objects. Images:\n{pins}\n"
    )
    install = out / "install.yaml"
    install.write_text(header + yaml.dump_all(objects, Dumper=Dumper, sort_keys=False, width=1000, explicit_start=True))
    return install, chart


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", default="projectsignal.dev", help="where the images are pushed")
    parser.add_argument("--unpinned", action="store_true", help="tag-only images (never for production)")
    parser.add_argument("--out", type=Path, default=DIST, help="output folder (default dist/)")
    args = parser.parse_args(argv)
    try:
        install, chart = release(args.registry.rstrip("/"), not args.unpinned, args.out)
    except ReleaseError as exc:
        print(f"make release: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {install} and {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
