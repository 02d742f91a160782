"""Issue 12, item 7: a rank's script cannot forge MPI rank reports.

The MPI launcher (``signal-runner launcher``, runner/mpi.py) runs a real ``mpirun`` (OpenMPI)
over a hostfile naming this machine twice, so two real ranks run the operator's script
through the rank wrapper. The check script below is hostile: rank 0 prints a well-formed
report claiming that rank 1 exited 0, and rank 1 fails (exit 4) after printing a fragment
without a newline, hoping to glue its wrapper's true report onto that fragment so that it is
lost. Each report is bound to the rank whose output stream carried it (``mpirun
--tag-output``) and authenticated with a per-check key that the wrapper holds and the script
never sees, so the forgery changes nothing: the launcher's verdict and report are exactly
those of the same failing script that forges nothing.

No API server is needed: the launcher is the runner's own process, run as the image runs
it (its command line and environment), with a real OpenMPI on loopback.
"""

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from shared.result import RunnerResult, parse_result
from shared.run import Verdict

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 60

FORGER = """#!/bin/sh
if [ "$SIGNAL_RANK" = "0" ]; then
  echo "SIGNAL-RANK {\\"exitCode\\": 0, \\"host\\": \\"$(hostname)\\", \\"rank\\": 1, \\"size\\": 2}"
  exit 0
fi
printf 'a fragment without a newline '
exit 4
"""
HONEST = """#!/bin/sh
if [ "$SIGNAL_RANK" = "0" ]; then
  exit 0
fi
exit 4
"""
# A rank that forges a report for itself, for the other rank, with and without the tag
# mpirun would print, before and after a dangling fragment.
FORGER_EVERYWHERE = """#!/bin/sh
for r in 0 1; do
  body="{\\"exitCode\\": 0, \\"host\\": \\"$(hostname)\\", \\"rank\\": $r, \\"size\\": 2}"
  echo "SIGNAL-RANK $body"
  echo "[1,$r]<stdout>:SIGNAL-RANK $body"
  echo "SIGNAL-RANK 0000000000000000000000000000000000000000000000000000000000000000 $body"
done
printf 'dangling '
exit 5
"""


def launch(tmp_path: Path, script_text: str) -> RunnerResult:
    """Run the launcher role over a two-rank world on this machine; its RunnerResult."""
    work = tmp_path / f"work-{uuid.uuid4().hex[:6]}"
    work.mkdir()
    script = tmp_path / f"script-{uuid.uuid4().hex[:6]}.sh"
    script.write_text(script_text)
    hostfile = tmp_path / "hostfile"
    host = socket.gethostname()
    hostfile.write_text(f"{host}\n{host}\n")
    log = tmp_path / "termination-log"
    log.unlink(missing_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "SIGNAL_NODE_NAME": "node-0",
        "SIGNAL_POD_NAME": "launcher",
        "SIGNAL_POD_UID": "uid-launcher",
        "PYTHONPATH": str(REPO),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
        "OMPI_MCA_oob_tcp_if_include": "lo",
        "OMPI_MCA_btl_tcp_if_include": "lo",
        "TMPDIR": str(work),
    }
    argv = [
        sys.executable,
        "-m",
        "runner.main",
        "launcher",
        "--script",
        str(script),
        "--deadline-seconds",
        str(DEADLINE),
        "--workdir",
        str(work),
        "--termination-log",
        str(log),
        "--hostfile",
        str(hostfile),
    ]
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=DEADLINE + 30, check=False)
    assert log.exists(), f"the launcher wrote no result: {done.stderr[-2000:]}"
    return parse_result(log.read_bytes())


def ranks(result: RunnerResult) -> list[tuple[int, int]]:
    assert result.launcher is not None
    return [(r.rank, r.exit_code) for r in result.launcher.ranks]


@pytest.mark.parametrize("forger", [FORGER, FORGER_EVERYWHERE], ids=["other-rank", "every-form"])
def test_a_script_that_prints_a_fake_report_for_another_rank_changes_nothing(tmp_path: Path, forger: str) -> None:
    honest = launch(tmp_path, HONEST)
    assert honest.verdict == Verdict.FAIL, honest.reason
    assert ranks(honest) == [(0, 0), (1, 4)]
    forged = launch(tmp_path, forger)
    # The forged Pass for rank 1 is not taken: rank 1 failed, and says so.
    assert forged.verdict == Verdict.FAIL, forged.reason
    failing = 4 if forger is FORGER else 5
    assert ranks(forged) == [(0, 0 if forger is FORGER else 5), (1, failing)]
    assert forged.launcher is not None
    assert honest.launcher is not None
    assert forged.launcher.world_size == honest.launcher.world_size == 2
    assert forged.launcher.mpirun_exit_code is not None
    if forger is FORGER:
        assert forged.reason == honest.reason
        assert forged.launcher.rank_table == honest.launcher.rank_table


def test_an_honest_two_rank_world_passes(tmp_path: Path) -> None:
    """The binding costs nothing to an honest check (and proves the harness runs ranks)."""
    result = launch(tmp_path, "#!/bin/sh\necho rank $SIGNAL_RANK\nexit 0\n")
    assert result.verdict == Verdict.PASS, result.reason
    assert ranks(result) == [(0, 0), (1, 0)]
