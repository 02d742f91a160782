"""The runner's entrypoint (runner/launch.py): the runner started isolated and without
``site`` (``python3 -I -S``), as the image starts it and as a simulated Node starts it."""

import os
import re
import subprocess
import sys
from pathlib import Path

from localcluster import podprocess
from shared.result import parse_result
from shared.verdict import Verdict

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "runner" / "launch.py"
IDENTITY = {
    "SIGNAL_NODE_NAME": "gpu-000",
    "SIGNAL_POD_NAME": "pod-0",
    "SIGNAL_POD_UID": "uid-0",
    "SIGNAL_PARTICIPANT_INDEX": "0",
}
REPORT = """
import sys
print("SITE", "site" in sys.modules, "HOOK", any("__editable__" in m for m in sys.modules), file=sys.stderr)
"""


def role_argv(entry: list[str], role: str, tmp_path: Path, gbps: int) -> list[str]:
    """``entry`` running the runner's ``role`` over a script reporting ``gbps``, under tmp_path."""
    script = tmp_path / "check.sh"
    script.write_text(f'#!/bin/sh\necho \'{{"gbps": {gbps}}}\' > "$SIGNAL_MEASUREMENTS_FILE"\n')
    return [
        *entry,
        role,
        "--script",
        str(script),
        "--deadline-seconds",
        "20",
        "--workdir",
        str(tmp_path / "work"),
        "--termination-log",
        str(tmp_path / "result"),
    ]


def launch(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = role_argv(podprocess.IMAGE_ENTRYPOINTS["projectsignal.dev/runner"], "run", tmp_path, 1)
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_a_simulated_node_starts_the_runner_as_the_image_does() -> None:
    argv = podprocess.IMAGE_ENTRYPOINTS["projectsignal.dev/runner"]
    assert argv[1:] == ["-I", "-S", str(LAUNCH)]
    # The image: its signal-runner is a link to this file, run by its shebang.
    assert LAUNCH.read_text().splitlines()[0] == "#!/usr/bin/python3 -IS"
    dockerfile = (REPO / "Dockerfile.runner").read_text()
    final = dockerfile.rsplit("\nFROM ", 1)[1]
    assert re.search(r"ln -sf \"\.\./\$\{launch#/opt/signal/\}\" /opt/signal/bin/signal-runner", final)
    assert "site-packages/runner/launch.py" in final
    assert re.search(r'^ENTRYPOINT \["signal-runner"\]$', final, re.MULTILINE)


def test_the_launched_runner_passes_from_any_directory_and_ignores_python_variables(tmp_path: Path) -> None:
    # A hostile Pod environment: PYTHONPATH puts a ``runner`` package of its own first, and
    # PYTHONSTARTUP/PYTHONINSPECT would run code of its own. Isolated mode ignores all of it.
    hostile = tmp_path / "hostile"
    (hostile / "runner").mkdir(parents=True)
    (hostile / "runner" / "__init__.py").write_text("raise SystemExit('the Pod environment chose the runner')\n")
    (hostile / "runner" / "main.py").write_text("raise SystemExit('the Pod environment chose the runner')\n")
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(hostile),
        "PYTHONSTARTUP": str(hostile / "runner" / "main.py"),
        "PYTHONINSPECT": "1",
        **IDENTITY,
    }
    done = launch(tmp_path, env)
    assert done.returncode == 0, done.stderr
    result = parse_result((tmp_path / "result").read_bytes())
    assert (result.verdict, result.measurements) == (Verdict.PASS, {"gbps": 1})


def test_the_launched_runner_loads_neither_site_nor_the_editable_hook(tmp_path: Path) -> None:
    # The same interpreter and flags, asked what it loaded: no ``site`` (no site-packages scan,
    # no .pth hooks such as this checkout's editable-install finder), only the package root.
    flags = podprocess.IMAGE_ENTRYPOINTS["projectsignal.dev/runner"][:3]
    probe = tmp_path / "probe.py"
    probe.write_text(REPORT)
    done = subprocess.run([*flags, str(probe)], capture_output=True, text=True, timeout=60, check=True)
    assert "SITE False HOOK False" in done.stderr
    # Without the flags, this checkout's interpreter loads both: the probe can tell.
    plain = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=60, check=True)
    assert "SITE True" in plain.stderr


FAKE_MPIRUN = """#!/bin/sh
# mpirun's stand-in: one rank (the rank command after "-x KEY"), its stdout tagged as rank 0's.
while [ "$1" != "-x" ]; do shift; done
shift 2
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 HOSTNAME=w-0 "$@" | sed 's/^/[1,0]<stdout>:/'
"""


def test_the_launched_launcher_starts_its_ranks_the_same_way(tmp_path: Path) -> None:
    # Before: the launcher started each rank as ``python -m runner.main``, which an isolated
    # interpreter without site cannot find (No module named runner): the MPIJob checks on real
    # nodes failed with it. Started as the image starts it (its shebang: Debian's python3, which
    # has no path to this checkout), as this checkout's interpreter would hide it (its site does).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text(FAKE_MPIRUN)
    (bin_dir / "mpirun").chmod(0o755)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("w-0\n")
    shebang = LAUNCH.read_text().splitlines()[0].removeprefix("#!").split()
    argv = [*role_argv([*shebang, str(LAUNCH)], "launcher", tmp_path, 2), "--hostfile", str(hostfile)]
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path), **IDENTITY}
    del env["SIGNAL_PARTICIPANT_INDEX"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)
    result = parse_result((tmp_path / "result").read_bytes())
    assert (result.verdict, result.measurements) == (Verdict.PASS, {"gbps": 2}), done.stderr
    assert done.returncode == 0
