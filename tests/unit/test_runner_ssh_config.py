"""The runner image's sshd and ssh client configurations (runner/ssh/) agree with the
constants the runner and the adapter use, and sshd's host key is made as the worker expects."""

import stat
import subprocess
from pathlib import Path

import pytest

from adapter import workloads
from runner import sshd

SSH_DIR = Path(__file__).resolve().parents[2] / "runner" / "ssh"


def options(path: Path) -> dict[str, list[str]]:
    """Keyword (lower case) -> values of an OpenSSH configuration file (first Host block)."""
    found: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            key, _, value = line.partition(" ")
            found.setdefault(key.lower(), []).append(value.strip())
    return found


def test_sshd_listens_above_1024_with_its_state_in_the_scratch_volume() -> None:
    config = options(SSH_DIR / "sshd_config")
    assert config["port"] == [str(sshd.SSHD_PORT)]
    assert sshd.SSHD_PORT > 1024
    assert config["hostkey"] == [f"{sshd.STATE_DIR}/{sshd.HOST_KEY_NAME}"]
    assert config["pidfile"] == [f"{sshd.STATE_DIR}/sshd.pid"]
    assert sshd.WORKDIR == workloads.WORKDIR
    assert sshd.STATE_DIR.startswith(workloads.WORKDIR + "/")
    assert config["setenv"] == [f"TMPDIR={workloads.WORKDIR}"]


def test_sshd_accepts_only_the_operators_key_for_the_runner_user() -> None:
    config = options(SSH_DIR / "sshd_config")
    assert config["authorizedkeysfile"] == [f"{sshd.RUNNER_SSH_DIR}/authorized_keys"]
    assert config["strictmodes"] == ["no"]
    assert config["allowusers"] == ["signal"]
    for off in ("passwordauthentication", "kbdinteractiveauthentication", "permitrootlogin", "usepam"):
        assert config[off] == ["no"], off
    for off in ("allowtcpforwarding", "x11forwarding", "permittunnel", "allowagentforwarding"):
        assert config[off] == ["no"], off


def test_ssh_client_is_non_interactive_on_the_sshd_port() -> None:
    config = options(SSH_DIR / "ssh_config")
    assert config["port"] == [str(sshd.SSHD_PORT)]
    assert config["batchmode"] == ["yes"]
    assert config["stricthostkeychecking"] == ["no"]
    assert config["userknownhostsfile"] == ["/dev/null"]
    assert config["identityfile"] == [f"{sshd.RUNNER_SSH_DIR}/id_rsa"]


def test_the_runner_image_installs_both_configurations_where_sshd_and_ssh_read_them() -> None:
    text = (SSH_DIR.parents[1] / "Dockerfile.runner").read_text()
    assert f"COPY runner/ssh/sshd_config {sshd.SSHD_CONFIG}" in text
    assert f"COPY runner/ssh/ssh_config {sshd.SSH_CLIENT_CONFIG}" in text
    assert sshd.sshd_argv("/usr/sbin/sshd") == ["/usr/sbin/sshd", "-D", "-e", "-f", sshd.SSHD_CONFIG]


def test_host_key_is_private_to_the_worker_and_kept_across_restarts(tmp_path: Path) -> None:
    state = tmp_path / "work" / "sshd"
    key = sshd.prepare_host_key(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", str(key)], capture_output=True, text=True, check=True)
    assert "ED25519" in fingerprint.stdout
    before = key.read_bytes()
    assert sshd.prepare_host_key(state) == key
    assert key.read_bytes() == before


def test_host_key_errors_name_the_directory_and_the_fix(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(sshd.SshdError, match=r"cannot make sshd's state directory .*mount a writable volume"):
        sshd.prepare_host_key(blocked / "sshd")
    with pytest.raises(sshd.SshdError, match="cannot run /nonexistent/ssh-keygen"):
        sshd.prepare_host_key(tmp_path / "sshd", keygen="/nonexistent/ssh-keygen")
