"""``make release`` (localcluster/release.py, issue 45 §1): install.yaml and the chart package
pin the digests of the images built from this checkout, render the same objects, and nothing
is written when an image is missing or was built from other sources. A local image index of the
test's own (SIGNAL_IMAGES_DIR) stands for the built images: building four images is the system
lane's business (test_container_images.py); what is tested here is what the release does with
the index. Real kustomize and the real helm."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from localcluster.helmchart import helm_binary
from localcluster.images import INDEX, dockerfile_key
from localcluster.release import IMAGE_NAMES, REPO_ROOT, ReleaseError, release

DIGESTS = {name: "sha256:" + f"{i:x}" * 64 for i, name in enumerate(IMAGE_NAMES, start=1)}


def write_index(directory: Path, *, stale: str = "", missing: str = "") -> None:
    images = {
        name: {
            "name": name,
            "digest": DIGESTS[name],
            "key": "0" * 64 if name == stale else dockerfile_key(REPO_ROOT / f"Dockerfile.{name}", REPO_ROOT),
        }
        for name in IMAGE_NAMES
        if name != missing
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / INDEX).write_text(json.dumps({"images": images}))


def images_of(docs: list[dict[str, object]]) -> set[str]:
    text = json.dumps(docs)
    return {word for word in text.replace('"', " ").split() if "registry.example.com/" in word}


def test_the_bundle_pins_the_built_images_by_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNAL_IMAGES_DIR", str(tmp_path / "images"))
    write_index(tmp_path / "images")
    install, chart = release("registry.example.com/signal", pinned=True, out=tmp_path / "dist")
    docs = [d for d in yaml.safe_load_all(install.read_text()) if d]
    assert {d["kind"] for d in docs} >= {"CustomResourceDefinition", "Namespace", "Deployment", "WorkflowTemplate"}
    pinned = {f"registry.example.com/signal/{name}@{digest}" for name, digest in DIGESTS.items()}
    assert images_of(docs) == pinned, "every image reference, and only these, pinned by digest"
    assert "projectsignal.dev/controller:" not in install.read_text()
    for name, digest in DIGESTS.items():
        assert f"#   {name}: registry.example.com/signal/{name}@{digest}" in install.read_text()
    assert chart.name == "signal-0.1.0.tgz"
    rendered = subprocess.run(
        [str(helm_binary()), "template", "signal", str(chart), "--include-crds"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    from_chart = [d for d in yaml.safe_load_all(rendered) if d]
    assert images_of(from_chart) == pinned
    key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])  # noqa: E731
    assert sorted(from_chart, key=key) == sorted(docs, key=key)


@pytest.mark.parametrize(
    ("stale", "missing", "says"),
    [
        ("runner", "", "runner: built from other sources than this checkout's"),
        ("", "adapter", "adapter: not in the index"),
    ],
    ids=["stale-image", "missing-image"],
)
def test_no_bundle_without_every_image_built_from_these_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stale: str, missing: str, says: str
) -> None:
    monkeypatch.setenv("SIGNAL_IMAGES_DIR", str(tmp_path / "images"))
    write_index(tmp_path / "images", stale=stale, missing=missing)
    with pytest.raises(ReleaseError) as refused:
        release("registry.example.com/signal", pinned=True, out=tmp_path / "dist")
    assert says in str(refused.value)
    assert "python -m localcluster.images controller portal adapter runner" in str(refused.value)
    assert not (tmp_path / "dist").exists()


def test_an_unpinned_bundle_says_so(tmp_path: Path) -> None:
    install, _ = release("projectsignal.dev", pinned=False, out=tmp_path / "dist")
    assert "UNPINNED" in install.read_text().splitlines()[2]
