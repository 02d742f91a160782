"""``signalctl completion bash|zsh|fish`` (generated from the parser, so every subcommand is
completed), ``version``'s pure parts, ``source push``'s bundle, and the services' --log-level.
The bash script is exercised in a real bash: COMP_WORDS in, COMPREPLY out."""

import argparse
import io
import json
import shutil
import subprocess
import sys
import tomllib
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import structlog
import yaml
from prometheus_client import generate_latest

from controller.reconcile.metrics import REGISTRY
from kubeio.logs import configure_logging
from shared.digests import bundle_digest, bundle_digest_of_files
from shared.version import VERSION
from signalctl import completion, source
from signalctl import version as versioncmd
from signalctl.commands import build_parser
from signalctl.kubectx import CommandError

ROOT = Path(__file__).resolve().parents[2]


def script(shell: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        args = build_parser().parse_args(["completion", shell])
        assert args.offline(args) == 0
    return out.getvalue()


def complete_in_bash(words: list[str]) -> list[str]:
    """What bash offers after ``words`` (the last one is the word being completed)."""
    program = (
        script("bash")
        + f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        + '_signalctl; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    # PATH without signalctl: the names of runs/nodes come from no cluster here, silently.
    answer = subprocess.run(
        ["bash", "--norc", "-c", program], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}
    )
    return [w for w in answer.stdout.splitlines() if w]


@pytest.mark.parametrize(
    ("words", "expected", "absent"),
    [
        (["signalctl", ""], {"get", "describe", "request", "source", "version", "completion", "demo"}, {"runs"}),
        (["signalctl", "g"], {"get"}, {"describe"}),
        (["signalctl", "get", ""], {"runs", "profiles", "nodes"}, {"get"}),
        (["signalctl", "get", "nodes", "--"], {"--profile", "--output", "--no-headers", "--context"}, {"--dry-run"}),
        (["signalctl", "-n", "ns", "get", "runs", "-"], {"-A", "-o", "--no-headers"}, set()),
        (["signalctl", "get", "runs", "-o", ""], {"json", "yaml", "name", "wide"}, {"-A"}),
        (["signalctl", "request", "--"], {"--dry-run", "--force", "--wait"}, set()),
        (["signalctl", "source", "push", "--"], {"--profile", "--source-namespace"}, set()),
        (["kubectl-signal", "completion", ""], {"bash", "zsh", "fish"}, set()),
    ],
)
def test_bash_completes_commands_options_and_choices(words: list[str], expected: set[str], absent: set[str]) -> None:
    offered = set(complete_in_bash(words))
    assert expected <= offered, offered
    assert not (absent & offered), offered


def test_every_command_path_of_the_parser_is_in_every_script() -> None:
    paths = completion.tree(build_parser())
    assert {"get runs", "get profiles", "get nodes", "describe node", "source push", "version"} <= set(paths)
    for shell in completion.SHELLS:
        text = script(shell)
        for path in paths:
            if path:
                assert f"{path}" in text, (shell, path)
        for name in completion.NAMES:
            assert name in text


def test_a_command_registered_later_is_completed_without_an_edit_to_completion() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    extra = commands.add_parser("frobnicate")
    extra.add_argument("--level", choices=["low", "high"])
    text = completion.bash(completion.tree(parser))
    assert '"frobnicate") words="-h --help --level" ;;' in text
    assert 'COMPREPLY=($(compgen -W "low high" -- "$cur")); return ;;' in text


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_parse(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here; its script is checked for content only")
    subprocess.run([shell, "-n", "-c", script(shell)], check=True)


def test_zsh_and_fish_scripts_offer_the_same_commands() -> None:
    zsh, fish = script("zsh"), script("fish")
    assert '("get") compadd -- runs run profiles profile nodes node -h --help ;;' in zsh
    assert "(-o) compadd -- wide json yaml name; return ;;" in zsh
    assert "compdef _signalctl signalctl kubectl-signal" in zsh
    assert (
        'complete -c signalctl -n "test (__signalctl_path) = \'get\'" -a "runs run profiles profile nodes node"' in fish
    )
    assert (
        'complete -c signalctl -n "test (__signalctl_path) = \'get runs\'" -l output -r -a "wide json yaml name"'
        in fish
    )


def test_the_version_is_pyprojects() -> None:
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == VERSION


@pytest.mark.parametrize(
    ("image", "tag"),
    [
        ("projectsignal.dev/controller:0.1.0", "0.1.0"),
        ("registry:5000/signal/controller:1.2.3@sha256:abc", "1.2.3"),
        ("registry:5000/signal/controller@sha256:abc", None),
        ("controller", None),
    ],
)
def test_image_tag(image: str, tag: str | None) -> None:
    assert versioncmd.image_tag(image) == tag


def test_controller_version_prefers_the_version_label_and_lists_what_pods_run() -> None:
    deployment = {
        "metadata": {"name": "signal-controller", "namespace": "ns", "labels": {}},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "controller", "image": "r/c:0.1.0"}]}}},
        "status": {"readyReplicas": 1},
    }
    pod = {
        "metadata": {"name": "p1"},
        "status": {"containerStatuses": [{"name": "controller", "imageID": "r/c@sha256:1"}]},
    }
    found = versioncmd.controller_version(deployment, [pod])
    assert found == {
        "deployment": "ns/signal-controller",
        "version": "0.1.0",
        "image": "r/c:0.1.0",
        "readyReplicas": 1,
        "replicas": 2,
        "pods": [{"pod": "p1", "imageID": "r/c@sha256:1"}],
    }
    deployment["metadata"]["labels"] = {versioncmd.VERSION_LABEL: "0.2.0"}
    assert versioncmd.controller_version(deployment, [])["version"] == "0.2.0"
    assert versioncmd.text("0.1.0", found).splitlines() == [
        "Client Version: 0.1.0",
        "Controller Version: 0.1.0 (Deployment ns/signal-controller, image r/c:0.1.0, 1/2 ready)",
        "  Pod p1: r/c@sha256:1",
    ]


def test_version_client_needs_no_cluster() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        args = build_parser().parse_args(["version", "--client", "-o", "json"])
        assert args.offline(args) == 0
    assert json.loads(out.getvalue()) == {"clientVersion": {"version": VERSION}}


def test_source_bundle_and_its_digest_are_the_controllers(tmp_path: Path) -> None:
    (tmp_path / "inventory.sh").write_text("#!/bin/sh\necho é\n")
    (tmp_path / "blob.bin").write_bytes(b"\xff\x00\x01")
    data, binary = source.bundle(tmp_path)
    assert data == {"inventory.sh": "#!/bin/sh\necho é\n"}
    assert binary == {"blob.bin": "/wAB"}
    files = {"inventory.sh": "#!/bin/sh\necho é\n".encode(), "blob.bin": b"\xff\x00\x01"}
    assert bundle_digest(data, binary) == bundle_digest_of_files(files)
    name = source.source_name("gpu", bundle_digest(data, binary))
    assert name == f"gpu-source-{bundle_digest(data, binary)[7:19]}"
    assert len(source.source_name("p" * 253, "sha256:" + "a" * 64)) == source.MAX_NAME
    assert not name.endswith("-scripts")  # the controller's snapshots' suffix (the scripts admission policy)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda d: (d / "sub").mkdir(), "is a directory; a source is flat"),
        (lambda d: (d / "bad name").write_text("x"), "is not a valid ConfigMap key"),
        (lambda d: None, "holds no file"),
    ],
)
def test_source_bundle_refusals(tmp_path: Path, make: object, error: str) -> None:
    make(tmp_path)  # type: ignore[operator]
    with pytest.raises(CommandError, match=error):
        source.bundle(tmp_path)
    with pytest.raises(CommandError, match="is not a directory"):
        source.bundle(tmp_path / "absent")


def test_missing_script_keys_are_named() -> None:
    profile = {"spec": {"checks": [{"name": "a", "scriptKey": "a.sh"}, {"name": "b", "scriptKey": "b.sh"}]}}
    assert source.missing_keys(profile, {"a.sh": ""}, {}) == ["b.sh (check b)"]


@pytest.mark.parametrize(("level", "shown"), [("debug", 4), ("info", 3), ("warning", 2), ("error", 1)])
def test_log_level(capsys: pytest.CaptureFixture[str], level: str, shown: int) -> None:
    configure_logging("json", level)
    try:
        log = structlog.get_logger()
        log.debug("d")
        log.info("i")
        log.warning("w")
        log.error("e")
        lines = capsys.readouterr().err.splitlines()
        assert [json.loads(line)["event"] for line in lines] == ["d", "i", "w", "e"][4 - shown :]
    finally:
        configure_logging("json")
    with pytest.raises(ValueError, match="is not one of"):
        configure_logging("json", "loud")


def test_krew_manifest_names_the_plugin_its_binary_and_this_version() -> None:
    manifest = yaml.safe_load((ROOT / "deploy" / "krew" / "signal.yaml").read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == "signal"  # `kubectl signal`, as signalctl.main.program_name expects
    spec = manifest["spec"]
    assert spec["version"] == f"v{VERSION}"
    assert spec["shortDescription"]
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert platform["bin"] == "kubectl-signal"
        assert f"v{VERSION}" in platform["uri"]
        assert platform["uri"].startswith("https://")
        assert len(platform["sha256"]) == 64
        assert int(platform["sha256"], 16) >= 0
        assert {"from": "kubectl-signal", "to": "."} in platform["files"]


def test_bash_asks_the_cluster_for_names_with_the_connection_typed_so_far(tmp_path: Path) -> None:
    fake = tmp_path / "signalctl"  # stands for the real one: prints its arguments as one name
    fake.write_text('#!/bin/sh\necho "certificationrun.projectsignal.dev/$*" | tr " " "_"\n')
    fake.chmod(0o755)
    words = ["signalctl", "--context", "lab", "-n", "ns1", "describe", "run", ""]
    program = (
        script("bash")
        + f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        + '_signalctl; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    answer = subprocess.run(
        ["bash", "--norc", "-c", program],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
    )
    assert "get_runs_-o_name_--context_lab_-n_ns1" in answer.stdout.split()


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here")
def test_fish_completes_commands_and_choices() -> None:
    def offered(line: str) -> set[str]:
        program = script("fish") + f"complete -C '{line}'\n"
        answer = subprocess.run(["fish", "--no-config", "-c", program], capture_output=True, text=True, check=True)
        return {row.split("\t")[0] for row in answer.stdout.splitlines()}

    assert {"get", "describe", "source", "completion"} <= offered("signalctl ")
    assert {"runs", "profiles", "nodes"} <= offered("signalctl get ")
    assert {"json", "yaml", "name", "wide"} <= offered("signalctl get runs --output ")
    assert "--dry-run" in offered("signalctl request --")


@pytest.mark.parametrize("service", ["signal-controller", "signal-adapter", "signal-portal"])
def test_each_service_takes_log_level(service: str) -> None:
    binary = Path(sys.executable).parent / service
    answer = subprocess.run([str(binary), "--help"], capture_output=True, text=True, check=True)
    assert "--log-level {debug,info,warning,error}" in answer.stdout
    assert "default info" in answer.stdout


def test_the_controller_exposes_its_version_as_build_info() -> None:
    assert f'signal_build_info{{version="{VERSION}"}} 1.0' in generate_latest(REGISTRY).decode()
