"""Supply chain of the images (issue 42, Low): every Python package an image installs comes from
requirements/<image>.lock with sha256 hashes, installed by ``pip install --require-hashes
--no-deps``, and the base is taken by digest only. The Dockerfiles' own commands are run here:
pip refuses a lock whose hash does not match the file, and the base check refuses a tag."""

import base64
import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from localcluster import images

REPO = Path(__file__).resolve().parents[2]
HASH_LINE = re.compile(r"^    --hash=sha256:[0-9a-f]{64}( \\)?$")


def lock_install_command(name: str) -> list[str]:
    """The pip command Dockerfile.<name> installs its lock with (pip as ``python -m pip``)."""
    text = (REPO / f"Dockerfile.{name}").read_text()
    found = re.findall(rf"/opt/signal/bin/pip install ([^;\n\\]*-r requirements/{name}\.lock)", text)
    assert found, f"Dockerfile.{name} installs no requirements/{name}.lock"
    (args,) = found
    assert "--require-hashes" in args.split(), args
    assert "--no-deps" in args.split(), args
    return [sys.executable, "-m", "pip", "install", *args.split()]


def base_check(name: str) -> str:
    """The shell command Dockerfile.<name> refuses an unpinned base with."""
    text = (REPO / f"Dockerfile.{name}").read_text().replace("\\\n", "")
    found = [line[len("RUN ") :] for line in text.splitlines() if line.startswith("RUN ") and "BASE_IMAGE" in line]
    assert found, f"Dockerfile.{name} does not check that its base is pinned by digest"
    return found[0]


def tiny_wheel(directory: Path) -> Path:
    """A pure-Python wheel made here (no index needed): tinypkg 1.0."""
    files = {
        "tinypkg/__init__.py": b"VALUE = 1\n",
        "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files["tinypkg-1.0.dist-info/RECORD"] = ("\n".join([*record, "tinypkg-1.0.dist-info/RECORD,,"]) + "\n").encode()
    wheel = directory / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.mark.parametrize("name", images.PROJECT_IMAGES)
def test_the_dockerfile_install_refuses_a_lock_whose_hash_was_tampered_with(name: str, tmp_path: Path) -> None:
    command = lock_install_command(name)
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    digest = hashlib.sha256(tiny_wheel(wheelhouse).read_bytes()).hexdigest()
    tampered = f"{int(digest[0], 16) ^ 1:x}{digest[1:]}"
    lock = f"requirements/{name}.lock"

    def install(sha256: str, target: Path) -> subprocess.CompletedProcess[str]:
        (tmp_path / "test.lock").write_text(f"tinypkg==1.0 \\\n    --hash=sha256:{sha256}\n")
        argv = [str(tmp_path / "test.lock") if arg == lock else arg for arg in command]
        argv += ["--no-index", "--find-links", str(wheelhouse), "--target", str(target), "--quiet"]
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)

    refused = install(tampered, tmp_path / "refused")
    assert refused.returncode != 0
    assert "DO NOT MATCH THE HASHES" in refused.stderr, refused.stderr
    assert not (tmp_path / "refused" / "tinypkg").exists()
    installed = install(digest, tmp_path / "installed")
    assert installed.returncode == 0, installed.stderr
    assert (tmp_path / "installed" / "tinypkg" / "__init__.py").read_text() == "VALUE = 1\n"


@pytest.mark.parametrize("name", images.PROJECT_IMAGES)
def test_nothing_else_in_the_dockerfile_fetches_a_package_without_a_hash(name: str) -> None:
    """The build backend comes from requirements/build.lock; the distribution itself installs
    with --no-index and without build isolation (which would fetch setuptools unhashed)."""
    text = (REPO / f"Dockerfile.{name}").read_text().replace("\\\n", " ")
    installs = re.findall(r"pip install ([^;&\n]*)", text)
    assert installs
    for args in installs:
        words = args.split()
        hashed = "--require-hashes" in words and "--no-deps" in words
        local = "--no-index" in words and "--no-build-isolation" in words and "--no-deps" in words
        assert hashed or local, f"Dockerfile.{name}: pip install {args}"
    assert "-r requirements/build.lock" in text


@pytest.mark.parametrize("lock", sorted((REPO / "requirements").glob("*.lock")), ids=lambda p: p.name)
def test_every_locked_distribution_is_pinned_with_a_sha256(lock: Path) -> None:
    entries = 0
    lines = lock.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line or line.startswith("#"):
            continue
        if line.startswith(" "):
            assert HASH_LINE.match(line), f"{lock.name}:{i + 1}: {line}"
            continue
        entries += 1
        assert re.match(r"^[a-z0-9-]+==[^\s]+ \\$", line), f"{lock.name}:{i + 1}: {line}"
        assert HASH_LINE.match(lines[i + 1]), f"{lock.name}:{i + 1}: {line} has no hash"
    source = lock.with_suffix(".in").read_text()
    assert entries or not any(line.split("#")[0].strip() for line in source.splitlines())


@pytest.mark.parametrize("name", images.PROJECT_IMAGES)
def test_the_dockerfile_refuses_a_base_not_pinned_by_digest(name: str) -> None:
    check = base_check(name)

    def run(base: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sh", "-c", check],
            env={"BASE_IMAGE": base, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=False,
        )

    assert run(images.pinned_base("sha256:" + "ab" * 32)).returncode == 0
    for unpinned in ("debian:bookworm-slim", "", "debian@sha256:abc", "debian:bookworm-slim@sha256:" + "ab" * 32 + "x"):
        refused = run(unpinned)
        assert refused.returncode == 1, unpinned
        assert "is not pinned by digest" in refused.stderr
