"""How localcluster.images keys its cache and names its base (pure parts)."""

import re
from pathlib import Path

import pytest

from localcluster import images
from localcluster.buildah import ImageBuildError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", images.PROJECT_IMAGES)
def test_every_stage_of_every_dockerfile_starts_from_the_base_the_builder_passes(name: str) -> None:
    """The base is a build argument (pinned by digest: tests/unit/test_image_locks.py), or a
    stage of the same file built on it."""
    text = (REPO / f"Dockerfile.{name}").read_text()
    assert text.split("\nFROM ")[0].splitlines()[-1] == f"ARG {images.BASE_ARG}"
    bases = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert bases
    assert set(bases) == {f"${{{images.BASE_ARG}}}", images.BUILD_STAGE}
    assert images.BASE_REFERENCE not in re.findall(r"^FROM (\S+)", text, re.MULTILINE)


def test_copy_sources_are_the_context_paths_not_other_stages() -> None:
    text = "FROM x AS build\nCOPY a b ./\nCOPY --chown=1:1 c /c\nCOPY --from=build /opt /opt\nRUN echo \\\n  hi\n"
    assert images.copy_sources(text) == ["a", "b", "c"]


def test_the_key_follows_every_copied_file_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"1")
    (tmp_path / "other.txt").write_text("not copied")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM {images.BASE_REFERENCE}\nCOPY pkg /pkg\n")
    first = images.dockerfile_key(dockerfile, tmp_path)
    (tmp_path / "other.txt").write_text("changed")
    (tmp_path / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"2")
    assert images.dockerfile_key(dockerfile, tmp_path) == first
    (tmp_path / "pkg" / "mod.py").write_text("x = 2\n")
    second = images.dockerfile_key(dockerfile, tmp_path)
    assert second != first
    dockerfile.write_text(f"FROM {images.BASE_REFERENCE}\nCOPY pkg /pkg\nUSER 1\n")
    assert images.dockerfile_key(dockerfile, tmp_path) not in {first, second}


def test_a_copy_of_a_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM x\nCOPY nowhere /n\n")
    with pytest.raises(ImageBuildError, match=r"nowhere .* is not in the build context"):
        images.dockerfile_key(dockerfile, tmp_path)


def test_unknown_image_names_are_refused_before_anything_is_built(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match=r"unknown image\(s\) \['nope'\]"):
        images.Builder(tmp_path / "images").build(["nope"])
    assert not (tmp_path / "images").exists()


def test_binary_images_run_their_static_binary_as_non_root() -> None:
    text = images.binary_containerfile("mpi-operator", "65532:65532")
    assert text.splitlines()[:2] == [f"ARG {images.BASE_ARG}", f"FROM ${{{images.BASE_ARG}}}"]
    assert "USER 65532:65532" in text
    assert 'ENTRYPOINT ["/usr/local/bin/mpi-operator"]' in text


def test_the_four_dockerfiles_share_one_build_stage_built_once() -> None:
    """Their first stage is the same text (built once, each image's last stage on it)."""
    splits = [images.split_build_stage((REPO / f"Dockerfile.{n}").read_text()) for n in images.PROJECT_IMAGES]
    assert all(s is not None for s in splits)
    stages = {s[:2] for s in splits if s is not None}
    assert len(stages) == 1
    ((preamble, stage),) = stages
    assert preamble == f"ARG {images.BASE_ARG}\n"
    assert stage.startswith(f"FROM ${{{images.BASE_ARG}}} AS {images.BUILD_STAGE}\n")
    for name, split in zip(images.PROJECT_IMAGES, splits, strict=True):
        assert split is not None
        rest = split[2]
        assert rest.startswith(f"FROM {images.BUILD_STAGE} AS install\n"), name
        assert f"\nFROM ${{{images.BASE_ARG}}}\n" in rest, name
        assert "COPY --from=install /opt/signal /opt/signal" in rest, name
        assert stage + rest in (REPO / f"Dockerfile.{name}").read_text(), name


@pytest.mark.parametrize(
    "text",
    [
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN true\n",  # one stage
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE} AS tools\nRUN true\nFROM ${BASE_IMAGE}\n",  # not 'build'
        f"FROM {images.BASE_REFERENCE} AS build\nRUN true\nFROM x\n",  # a base by tag, not the argument
        "FROM elsewhere:1 AS build\nRUN true\nFROM x\n",  # another base
    ],
)
def test_other_shapes_are_built_as_they_are(text: str) -> None:
    assert images.split_build_stage(text) is None
