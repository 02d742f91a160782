"""The runner without pydantic (runner/document.py): for the same values it writes exactly the
bytes the pydantic models wrote (shared/result.py ``RunnerResult`` + ``render_result``, and
the former pydantic ``fit``, kept here as the reference), the adapter's strict
``parse_result`` accepts them, and no role of the runner imports pydantic at all."""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from runner import mpi
from runner.document import Identity, Result, render
from runner.execute import Outcome
from runner.report import build_result, error_result, fit
from shared.result import (
    MAX_MEASUREMENT_TEXT,
    MAX_MEASUREMENTS,
    MAX_RESULT_BYTES,
    MAX_TAIL_CHARS,
    RunnerResult,
    parse_result,
    render_result,
)
from shared.run import Verdict
from shared.timestamps import utc_text
from tests.unit.runner_builders import model

REPO = Path(__file__).resolve().parents[2]
POD = Identity(participant_index=5, node_name="gpu-005", pod_name="run-c0-p5", pod_uid="0d7c1f9a-2b1e-4e8f")
LAUNCHER = Identity(node_name="gpu-000", pod_name="job-launcher-x7k2p", pod_uid="launcher-uid", role="launcher")


def reference_fit(result: RunnerResult) -> bytes | None:
    """runner/report.py's ``fit`` as it was on the pydantic models (the reference)."""
    candidate = result
    tail = MAX_TAIL_CHARS
    while True:
        payload = render_result(candidate)
        if len(payload) <= MAX_RESULT_BYTES:
            return payload
        if tail > 0:
            tail //= 4
            update = {}
            for stream in ("stdout", "stderr"):
                output = getattr(result, stream)
                if output is not None:
                    update[stream] = output.model_copy(update={"tail": output.tail[-tail:] if tail else ""})
            candidate = candidate.model_copy(update=update)
        elif candidate.measurements:
            candidate = candidate.model_copy(
                update={
                    "measurements": {},
                    "verdict": Verdict.INCONCLUSIVE if candidate.verdict == Verdict.PASS else candidate.verdict,
                    "reason": "ResultTooLarge: measurements dropped to fit the termination message",
                }
            )
        else:
            return None


def run_result(
    tmp_path: Path, outcome: Outcome, *, stdout: bytes = b"hello\n", stderr: bytes = b"", measurements: Any = None
) -> Result:
    """What ``signal-runner run`` builds after ``outcome`` (started and finished with and
    without milliseconds)."""
    (tmp_path / "stdout").write_bytes(stdout)
    (tmp_path / "stderr").write_bytes(stderr)
    path = tmp_path / "measurements.json"
    if measurements is not None:
        path.write_bytes(measurements if isinstance(measurements, bytes) else json.dumps(measurements).encode())
    return build_result(
        POD, outcome, measurements_file=path, stdout_file=tmp_path / "stdout", stderr_file=tmp_path / "stderr"
    )


def outcome(code: int | None = 0, signal: int | None = None, timed_out: bool = False) -> Outcome:
    return Outcome(code, signal, timed_out, 1764687845.123456, 1764687905.0)


def launcher_run(tmp_path: Path) -> Result:
    """A launcher over three hostfile hosts, two slots each: rank 3 fails, rank 5 ran on a
    host that is not in the hostfile, rank 4 never reported."""
    hosts = [f"job-worker-{i}.job.signal-system.svc" for i in range(3)]
    placed = {0: "job-worker-0", 1: "job-worker-0", 2: "job-worker-1", 3: "job-worker-1", 5: "intruder-9"}
    lines = [
        f"[1,{r}]<stdout>:" + mpi.rank_line(r, 6, host, 1 if r == 3 else 0, key="k" * 64) for r, host in placed.items()
    ]
    verdict, reason, report = mpi.evaluate_launcher(hosts, mpi.reports_in(lines, "k" * 64), 1, False, slots=2)
    (tmp_path / "stdout").write_text("\n".join(lines) + "\n")
    (tmp_path / "stderr").write_text("mpirun: rank 3 exited 1\n")
    return build_result(
        LAUNCHER,
        outcome(1),
        measurements_file=tmp_path / "none.json",
        stdout_file=tmp_path / "stdout",
        stderr_file=tmp_path / "stderr",
        launcher=report,
        verdict=(verdict, reason),
    )


def big_launcher_run(tmp_path: Path) -> Result:
    """64 ranks on 64 hosts, all passing, and full tails: shrunk to fit."""
    hosts = [f"job-with-a-long-name-worker-{i}.job.signal-system.svc" for i in range(64)]
    lines = [
        f"[1,{r}]<stdout>:" + mpi.rank_line(r, 64, f"job-with-a-long-name-worker-{r}", 0, key="k") for r in range(64)
    ]
    verdict, reason, report = mpi.evaluate_launcher(hosts, mpi.reports_in(lines, "k"), 0, False)
    (tmp_path / "stdout").write_text("\n".join(lines) + "\n")
    (tmp_path / "stderr").write_text("é" * 2000)
    return build_result(
        LAUNCHER,
        outcome(0),
        measurements_file=tmp_path / "none.json",
        stdout_file=tmp_path / "stdout",
        stderr_file=tmp_path / "stderr",
        launcher=report,
        verdict=(verdict, reason),
    )


TAILS = ("x" * 3000 + "\n").encode() + "é€\U0001f600\x01".encode() * 400
MEASURED = {"bw.gbps": 412.5, "ok": True, "gpus": 8, "big": 10**30, "model": "H100 ✓", "ctl": "\x01\n\t"}
CASES: dict[str, Callable[[Path], Result]] = {
    "pass": lambda p: run_result(p, outcome(0)),
    "fail-exit-1": lambda p: run_result(p, outcome(1), stderr=b"boom\n"),
    "exit-3-inconclusive": lambda p: run_result(p, outcome(3)),
    "timeout": lambda p: run_result(p, outcome(None, 15, timed_out=True)),
    "signal": lambda p: run_result(p, outcome(None, 9)),
    "valid-measurements": lambda p: run_result(p, outcome(0), measurements=MEASURED),
    "float-forms": lambda p: run_result(p, outcome(0), measurements={"a": 1.0, "b": 1e20, "c": -0.0, "d": 1e-07}),
    "invalid-measurements": lambda p: run_result(p, outcome(0), measurements={"Bad" + "x" * 300: 1}),
    "bad-json-measurements": lambda p: run_result(p, outcome(0), measurements=b'{"a":1,"a":2}'),
    "tails-shrunk": lambda p: run_result(p, outcome(0), stdout=TAILS, stderr=TAILS, measurements=MEASURED),
    "measurements-dropped": lambda p: run_result(
        p,
        outcome(0),
        stdout=TAILS,
        stderr=TAILS,
        measurements={f"m{i:02d}": "\x01" * MAX_MEASUREMENT_TEXT for i in range(MAX_MEASUREMENTS)},
    ),
    "measurements-dropped-fail": lambda p: run_result(
        p, outcome(2), measurements={f"m{i:02d}": "\x01" * MAX_MEASUREMENT_TEXT for i in range(MAX_MEASUREMENTS)}
    ),
    "cannot-fit": lambda _: error_result(
        Identity(participant_index=0, node_name="\x01" * 253, pod_name="\x01" * 253, pod_uid="\x01" * 64),
        "\x01" * 300,
        0.0,
        1.5,
    ),
    "runner-error": lambda _: error_result(POD, "cannot read script /x: No such file" + "!" * 400, 10.7, 20.0),
    "launcher-report": launcher_run,
    "launcher-64-ranks": big_launcher_run,
}


@pytest.mark.parametrize("case", CASES)
def test_runner_bytes_equal_the_models_bytes(tmp_path: Path, case: str) -> None:
    result = CASES[case](tmp_path)
    reference = model(result)  # the same values, validated by the pydantic models
    assert render(result) == render_result(reference)
    payload = fit(result)
    assert payload == reference_fit(reference)
    if case == "cannot-fit":
        assert payload is None
        return
    assert payload is not None
    parsed = parse_result(payload)
    if payload == render_result(reference):
        assert parsed == reference


@pytest.mark.parametrize(
    ("case", "shrunk"),
    [("pass", False), ("tails-shrunk", True), ("measurements-dropped", True), ("launcher-64-ranks", True)],
)
def test_the_table_covers_shrinking(tmp_path: Path, case: str, shrunk: bool) -> None:
    # So that the equivalence above is tested on results that fit fits and on results it shrinks.
    result = CASES[case](tmp_path)
    assert (len(render(result)) > MAX_RESULT_BYTES) == shrunk


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 12, 2, 15, 4, 5, 123000, tzinfo=UTC),
        datetime(2026, 12, 2, 15, 4, 5, tzinfo=UTC),
        datetime(2026, 12, 2, 15, 4, 5, 1000, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
    ],
)
def test_utc_text_is_pydantics_json(moment: datetime) -> None:
    assert utc_text(moment) == TypeAdapter(datetime).dump_python(moment, mode="json")


def test_utc_text_refuses_other_offsets() -> None:
    with pytest.raises(ValueError, match="not a UTC time"):
        utc_text(datetime(2026, 1, 1))  # naive: no offset at all


# ---------------------------------------------------------------- no pydantic in the runner

PYDANTIC_FREE = """
import os, sys
from pathlib import Path
import runner.main, runner.mpi, runner.sshd, runner.report, runner.execute, runner.document
from runner import main, mpi, sshd

work = Path(sys.argv[1])
script = work / "check.sh"
script.write_text('#!/bin/sh\\necho ok\\necho \\'{"a": 1}\\' > "$SIGNAL_MEASUREMENTS_FILE"\\n')
hostfile = work / "hostfile"
hostfile.write_text("w-0\\n")
common = ["--script", str(script), "--deadline-seconds", "20"]
codes = [main.main(["run", *common, "--workdir", str(work / "run"), "--termination-log", str(work / "run.log")])]
codes.append(
    main.main(
        ["launcher", *common, "--workdir", str(work / "launch"), "--termination-log", str(work / "launch.log"),
         "--hostfile", str(hostfile)]
    )
)
os.environ.update(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="1", HOSTNAME="w-0", TMPDIR=str(work))
os.environ[mpi.REPORT_KEY_ENV] = "k" * 64
codes.append(main.main(["rank", *common]))
sshd.recorded_environment(["SIGNAL_POD_NAME"], work / "none.json")
heavy = ("pydantic", "pydantic_core")
loaded = [m for m in sys.modules if m.split(".")[0] in heavy or m in ("shared.result", "shared.meta", "shared.run")]
print("CODES", codes, "LOADED", loaded)
"""

FAKE_MPIRUN = """#!/bin/sh
# mpirun's stand-in: one rank (the rank command after "-x KEY"), its stdout tagged as rank 0's.
while [ "$1" != "-x" ]; do shift; done
shift 2
# The rank's interpreter is isolated (-I ignores PYTHON* variables): its imports are asked for by -X.
python="$1"
shift
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 HOSTNAME=w-0 "$python" -X importtime "$@" | sed 's/^/[1,0]<stdout>:/'
"""


def test_no_role_of_the_runner_imports_pydantic(tmp_path: Path) -> None:
    # Before the runner built its result without pydantic, ``import runner.main`` alone
    # loaded pydantic (45 modules of it) through shared.result, shared.meta and shared.run.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text(FAKE_MPIRUN)
    (bin_dir / "mpirun").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SIGNAL_NODE_NAME": "gpu-000",
        "SIGNAL_POD_NAME": "pod-0",
        "SIGNAL_POD_UID": "uid-0",
        "SIGNAL_PARTICIPANT_INDEX": "0",
        # The launcher's rank makes its scratch directory there (runner/main.py), not in /tmp.
        "TMPDIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", PYDANTIC_FREE, str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "CODES [0, 0, 0] LOADED []" in done.stdout, done.stdout + done.stderr
    # The run and launcher roles wrote results the adapter accepts; the launcher's rank (a
    # runner process of its own, started by the stand-in mpirun) imported no pydantic either.
    run = parse_result((tmp_path / "run.log").read_bytes())
    assert (run.verdict, run.measurements) == (Verdict.PASS, {"a": 1})
    launched = parse_result((tmp_path / "launch.log").read_bytes())
    assert (launched.verdict, launched.measurements) == (Verdict.PASS, {"a": 1})
    rank_imports = (tmp_path / "launch" / "stderr").read_text()
    assert "runner.report" in rank_imports
    assert "pydantic" not in rank_imports
