"""The images built without Docker (localcluster/images.py): valid OCI archives with the
entrypoint and user we expect, pinned by the digest the index records; and the runner
image's sshd serving an ssh login as uid 65532 from a read-only root filesystem, with no
capability, inside a network namespace this test creates."""

import contextlib
import hashlib
import json
import os
import subprocess
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import images
from localcluster.buildah import Buildah
from runner import sshd
from tests.import_graph import SERVICES, normalize, pins, reachable

EXPECTED = {
    "controller": (["signal-controller"], "65532:65532"),
    "adapter": (["signal-adapter"], "65532:65532"),
    "portal": (["signal-portal"], "65532:65532"),
    "runner": (["signal-runner"], "65532:65532"),
    "argoexec": (["/usr/local/bin/argoexec"], "8737"),
    "workflow-controller": (["/usr/local/bin/workflow-controller"], "8737"),
    "mpi-operator": (["/usr/local/bin/mpi-operator"], "65532:65532"),
}
# A cold build of every image (base layers, Go binaries, the runner's packages) took over the
# suite's default 300 s on this two-core machine once the build cache was gone; since each image
# installs its own lock, a cold build of the four project images took 1822 s on it while seven
# other test runs shared it (base 7 min, build stage 338 s, images 200-618 s).
pytestmark = pytest.mark.timeout(2700)


@pytest.fixture(scope="module")
def built() -> dict[str, images.Image]:
    """Every image (cached by content: only what changed is rebuilt)."""
    return images.Builder().build([])


def _blob(tar: tarfile.TarFile, digest: str) -> bytes:
    algorithm, _, hexdigest = digest.partition(":")
    assert algorithm == "sha256"
    member = tar.extractfile(f"blobs/sha256/{hexdigest}")
    assert member is not None, digest
    data = member.read()
    assert hashlib.sha256(data).hexdigest() == hexdigest, f"blob {digest} does not match its digest"
    return data


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_image_is_a_valid_oci_archive_pinned_by_its_recorded_digest(
    built: dict[str, images.Image], name: str
) -> None:
    image = built[name]
    archive = images.images_dir() / image.archive
    with tarfile.open(archive) as tar:
        layout = tar.extractfile("oci-layout")
        assert layout is not None
        assert json.load(layout)["imageLayoutVersion"] == "1.0.0"
        index_file = tar.extractfile("index.json")
        assert index_file is not None
        (entry,) = json.load(index_file)["manifests"]
        assert entry["digest"] == image.digest
        assert entry["annotations"]["org.opencontainers.image.ref.name"] == image.reference
        manifest = json.loads(_blob(tar, entry["digest"]))
        assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
        config = json.loads(_blob(tar, manifest["config"]["digest"]))
        for layer in manifest["layers"]:
            _blob(tar, layer["digest"])
    entrypoint, user = EXPECTED[name]
    assert config["os"] == "linux"
    assert config["architecture"] == "amd64"
    assert config["config"]["Entrypoint"] == entrypoint == image.entrypoint
    assert config["config"]["User"] == user == image.user
    assert len(config["rootfs"]["diff_ids"]) == len(manifest["layers"])
    assert image.pinned == f"{image.reference}@{image.digest}"
    # Built on the base by digest: the one recorded when the base was made (issue 42).
    base = images.Builder().base_digest()
    assert base is not None
    assert image.base_digest == base
    assert config["config"]["Labels"][images.BASE_DIGEST_LABEL] == base
    assert config["config"]["Labels"][images.BASE_NAME_LABEL] == images.BASE_REFERENCE


def test_a_warm_build_rebuilds_nothing(built: dict[str, images.Image]) -> None:
    again = images.Builder().build([])
    assert {n: i.digest for n, i in again.items()} == {n: i.digest for n, i in built.items()}
    assert {n: i.key for n, i in again.items()} == {n: i.key for n, i in built.items()}


@contextlib.contextmanager
def mounted(image: images.Image) -> Iterator[Path]:
    """An image's root filesystem, from its OCI archive (what nodes import), as a buildah
    working container; removed afterwards with the image it loaded."""
    directory = images.images_dir()
    buildah = Buildah(directory / "storage", directory / "run")
    archive = directory / image.archive
    container = buildah("from", f"oci-archive:{archive}", what=f"{image.name} container").strip()
    try:
        yield Path(buildah("mount", container, what=f"mounting the {image.name} container").strip())
    finally:
        buildah("umount", container, what=f"unmounting the {image.name} container")
        buildah("rm", container, what=f"removing the {image.name} container")
        buildah.remove_image(image.reference)


@pytest.fixture
def runner_rootfs(built: dict[str, images.Image]) -> Iterator[Path]:
    with mounted(built["runner"]) as root:
        yield root


IMPORT_ALL = """
import importlib, json, sys
from importlib.metadata import distributions
for module in sys.argv[1:]:
    importlib.import_module(module)
print(json.dumps(sorted({d.metadata["Name"] for d in distributions()})))
"""


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_each_image_imports_its_service_with_only_its_lock_installed(built: dict[str, images.Image], name: str) -> None:
    """Issue 45 §4: every module its entry point can reach imports in the image, where only
    requirements/<name>.lock (and the distribution itself) is installed, and pip is gone."""
    modules, _ = reachable(SERVICES[name])
    with mounted(built[name]) as root:
        done = subprocess.run(
            ["chroot", str(root), "/opt/signal/bin/python3", "-I", "-c", IMPORT_ALL, *sorted(modules)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    installed = {normalize(n) for n in json.loads(done.stdout)}
    assert installed == set(pins(images.REPO / "requirements" / f"{name}.lock")) | {"project-signal"}


# Runs as PID 1 of new mount, network and PID namespaces (everything it starts dies with it):
# the image's root read-only, an emptyDir-like tmpfs at the scratch volume, the MPI
# operator's key files (root-owned, 0644, like its non-root Secret mount) at ~/.ssh.
SCRIPT = textwrap.dedent(
    """\
    set -eu
    ip link set lo up
    mount --make-rprivate /
    R=$WORK/root
    mkdir -p "$R"
    mkdir -p "$ROOTFS/signal/work" "$ROOTFS/proc"
    mount --bind "$ROOTFS" "$R"
    mount -o remount,bind,ro "$R"
    mount -t tmpfs -o mode=0777,size=64m work "$R/signal/work"
    mount --bind "$WORK/ssh" "$R/home/signal/.ssh"
    mount -o remount,bind,ro "$R/home/signal/.ssh"
    mount -t proc proc "$R/proc"
    mount -t tmpfs -o mode=0755 dev "$R/dev"
    for d in null zero random urandom; do touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
    as_runner() { chroot "$R" /usr/bin/setpriv --reuid=65532 --regid=65532 --clear-groups \\
        --inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"; }
    as_runner /usr/bin/env -i PATH=/opt/signal/bin:/usr/bin:/bin TMPDIR=/signal/work \\
        signal-runner worker --sshd /usr/sbin/sshd > "$WORK/sshd.log" 2>&1 &
    i=0
    until as_runner test -s /signal/work/sshd/sshd.pid; do
        i=$((i+1)); [ $i -lt 300 ] || { echo "sshd did not start"; cat "$WORK/sshd.log"; exit 1; }
        sleep 0.1
    done
    echo "sshd-uid=$(awk '/^Uid:/ {print $2}' $R/proc/$(cat "$R/signal/work/sshd/sshd.pid")/status)"
    as_runner /usr/sbin/sshd -t -f /etc/ssh/signal/sshd_config && echo "sshd-config=ok"
    as_runner /usr/bin/env -i HOME=/home/signal PATH=/usr/bin:/bin \\
        ssh 127.0.0.1 'echo "login-uid=$(id -u)"; echo "login-tmpdir=$TMPDIR"'
    bare_ssh() { as_runner /usr/bin/env -i HOME=/home/signal PATH=/usr/bin:/bin ssh -F /dev/null -p 2222 \\
        -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes "$@"; }
    bare_ssh -i /home/signal/.ssh/id_rsa 127.0.0.1 true && echo "same-options-right-key=accepted"
    if bare_ssh -i /signal/work/sshd/ssh_host_ed25519_key 127.0.0.1 true 2>/dev/null; then
        echo "wrong-key=accepted"
    else
        echo "wrong-key=refused"
    fi
    """
)


def test_runner_sshd_serves_an_ssh_login_as_65532_read_only_without_capabilities(
    runner_rootfs: Path, tmp_path: Path
) -> None:
    ssh_dir = tmp_path / "ssh"
    ssh_dir.mkdir()
    # The MPI operator's key: ECDSA P-521 in PEM, as it generates; files as its Secret mount.
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "", "-f", str(ssh_dir / "id_rsa")],
        check=True,
    )
    (ssh_dir / "authorized_keys").write_bytes((ssh_dir / "id_rsa.pub").read_bytes())
    for path in ssh_dir.iterdir():
        path.chmod(0o644)
    ssh_dir.chmod(0o755)
    tmp_path.chmod(0o755)
    env = {**os.environ, "WORK": str(tmp_path), "ROOTFS": str(runner_rootfs)}
    done = subprocess.run(
        ["unshare", "--mount", "--net", "--pid", "--fork", "--", "bash", "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log = (tmp_path / "sshd.log").read_text(errors="replace") if (tmp_path / "sshd.log").exists() else ""
    report = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}\nsshd log:\n{log}"
    assert done.returncode == 0, report
    lines = set(done.stdout.splitlines())
    assert "sshd-uid=65532" in lines, report
    assert "sshd-config=ok" in lines, report
    assert "login-uid=65532" in lines, report
    assert f"login-tmpdir={sshd.WORKDIR}" in lines, report
    assert "same-options-right-key=accepted" in lines, report
    assert "wrong-key=refused" in lines, report
    assert f"Server listening on 0.0.0.0 port {sshd.SSHD_PORT}" in log, report
