"""The NCCL-over-InfiniBand example (examples/nccl-ib/): its verifier on realistic logs, the
script as the runner runs it (its ``#!`` line, a clean environment, a stand-in
``all_reduce_perf``), and its Profile.

The logs in tests/data/nccl/ were written by hand for this project (no copied logs; hosts,
pids, addresses and bandwidths are invented, table rows computed from chosen bandwidths).
Their shapes follow NCCL's documented ``NCCL_DEBUG=INFO`` line format
(``host:pid:tid [cudaDev] NCCL INFO ...``; ``NCCL WARN`` lines carry ``file:line``), its
INIT/NET messages (``NET/IB : Using [0]mlx5_0:1/IB ; OOB ...``, ``NET/Socket : Using ...``,
``Using network IB``, ``Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA`` and the
older ``0[1b000]`` bus-id form, ``... rank 0 nranks 2 ... - Init COMPLETE``) and the
output format of NVIDIA's nccl-tests (the ``# Using devices`` rank list, the result table
``size count type redop root time algbw busbw #wrong ...``, ``# Out of bounds values : 0
OK`` and ``# Avg bus bandwidth : X``). Scenarios: IB with GDRDMA (both ranks), RoCE on NCCL
2.17, the HPC-X IBext_v8 plugin, a socket fall-back (both ranks), one channel on a socket, a
single-node run over NVLink P2P, a log cut in the middle of the table, a network error
(``NCCL WARN`` and ``Test NCCL failure``), and a slow link.
"""

import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from runner.execute import clean_environment, script_argv
from shared.profile import CertificationProfile
from shared.result import INCONCLUSIVE_EXIT_CODE, validate_measurements

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "nccl-ib"
SCRIPT = EXAMPLE / "scripts" / "nccl_ib_allreduce.py"
DATA = REPO / "tests" / "data" / "nccl"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nccl_ib_allreduce", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("nccl_ib_allreduce", module)
    spec.loader.exec_module(module)
    return module


nccl = load_script()
SETTINGS = nccl.Settings(threshold_gbps=40.0)


def log(name: str) -> str:
    return (DATA / name).read_text()


def check(name: str, *, rank: int = 0, world: int = 2, exit_code: int | None = 0, settings=SETTINGS, text=None):
    parsed = nccl.parse_log(text if text is not None else log(name))
    return nccl.verify(parsed, rank=rank, world_size=world, exit_code=exit_code, settings=settings)


def test_the_script_imports_only_the_standard_library() -> None:
    imports = re.findall(r"^(?:import|from) (\w+)", SCRIPT.read_text(), re.MULTILINE)
    assert set(imports) <= set(sys.stdlib_module_names), imports
    assert SCRIPT.read_text().startswith("#!/usr/bin/env python3\n")


def test_the_shipped_script_has_no_threshold() -> None:
    assert nccl.MIN_BUSBW_GBPS is None
    problems = nccl.config_problems(nccl.settings_from_constants())
    assert len(problems) == 1
    assert "MIN_BUSBW_GBPS is not set" in problems[0]


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        (nccl.Settings(threshold_gbps=0.0), "positive number"),
        (nccl.Settings(threshold_gbps=float("nan")), "positive number"),
        (nccl.Settings(threshold_gbps=True), "positive number"),
        (nccl.Settings(threshold_gbps=40.0, metric="peak"), "BUSBW_METRIC"),
        (nccl.Settings(threshold_gbps=40.0, expected_nodes=1), "EXPECTED_NODES"),
        (nccl.Settings(threshold_gbps=40.0, allowed_warnings=("(",)), "ALLOWED_WARNINGS"),
    ],
)
def test_bad_configuration_is_inconclusive_never_a_pass(settings, fragment: str) -> None:
    assert any(fragment in p for p in nccl.config_problems(settings))
    verdict = check("ib_gdrdma.rank0.log", settings=settings)
    assert verdict.outcome == nccl.INCONCLUSIVE
    assert verdict.exit_code == 3


def test_ib_with_gdrdma_passes_and_measures() -> None:
    parsed = nccl.parse_log(log("ib_gdrdma.rank0.log"))
    assert parsed.header_ranks == {0: ["sig-4f1c2a9b7d3e-c0-worker-0"], 1: ["sig-4f1c2a9b7d3e-c0-worker-1"]}
    assert parsed.ib_devices == [("mlx5_0:1", "IB")]
    assert [c.via for c in parsed.channels] == ["NET/IB/0/GDRDMA"] * 4
    assert {c.direction for c in parsed.channels} == {"send", "receive"}
    assert (0, 2) in parsed.init_complete
    assert parsed.nodes == 2
    assert len(parsed.rows) == 10
    assert parsed.out_of_bounds == (0, "OK")
    verdict = check("ib_gdrdma.rank0.log")
    assert verdict.outcome == nccl.PASS, verdict.reasons
    assert verdict.exit_code == 0
    m = verdict.measurements
    assert m["transport"] == "IB"
    assert m["net"] == "IB"
    assert m["gdrdma"] is True
    assert m["channels"] == 4
    assert m["hosts"] == 2
    assert m["world_size"] == 2
    assert m["busbw_gbps"] == m["busbw_largest_gbps"] == 47.43
    assert m["busbw_avg_gbps"] == pytest.approx(44.8205)
    assert m["largest_bytes"] == 4 * 1024**3
    assert m["threshold_gbps"] == 40.0
    assert m["nccl_version"] == "2.21.5"
    assert m["outcome"] == "Pass"
    assert validate_measurements(m) == m  # the runner's measurements protocol


def test_rank_1_verifies_its_own_part() -> None:
    verdict = check("ib_gdrdma.rank1.log", rank=1)
    assert verdict.passed, verdict.reasons
    # Rank 1 has no header or summary of its own: as rank 0 that log proves nothing either way.
    as_rank_0 = check("ib_gdrdma.rank1.log", rank=0)
    assert as_rank_0.outcome == nccl.INCONCLUSIVE
    assert any("did not complete" in r for r in as_rank_0.missing)


def test_roce_passes_on_an_older_nccl() -> None:
    verdict = check("roce.rank0.log", settings=nccl.Settings(threshold_gbps=20.0))
    assert verdict.passed, verdict.reasons
    assert verdict.measurements["transport"] == "RoCE"
    assert verdict.measurements["gdrdma"] is False
    assert verdict.measurements["ib_devices"] == "mlx5_0:1 mlx5_1:1"
    strict = check("roce.rank0.log", settings=nccl.Settings(threshold_gbps=20.0, require_gdrdma=True))
    assert strict.outcome == nccl.FAIL


def test_ibext_plugin_passes() -> None:
    verdict = check("ibext_v8.rank0.log", settings=nccl.Settings(threshold_gbps=85.0))
    assert verdict.passed, verdict.reasons
    assert verdict.measurements["net"] == "IBext_v8"
    assert verdict.measurements["gdrdma"] is True


@pytest.mark.parametrize(
    ("name", "rank", "world", "expected"),
    [
        ("socket_fallback.rank0.log", 0, 2, "socket fall-back: 4 channel(s) via NET/Socket"),
        ("socket_fallback.rank1.log", 1, 2, "socket fall-back"),
        ("mixed_socket.rank0.log", 0, 2, "socket fall-back: 2 channel(s) via NET/Socket"),
        ("mixed_socket.rank0.log", 0, 2, "mixed transports on one host"),
        ("combined_2x2_mixed.log", 0, 4, "mixed transports across ranks: IB (sig-7a2e91c05b3d-c0-worker-0), Socket"),
        ("libfabric.rank0.log", 0, 2, "NCCL chose network 'AWS Libfabric', not IB"),
        ("libfabric.rank0.log", 0, 2, "not via IB verbs (first: via NET/AWS Libfabric/0/GDRDMA)"),
        (
            "nccl_warn.rank0.log",
            0,
            2,
            "error line(s), first: sig-4f1c2a9b7d3e-c0-worker-0:57:75 [0] transport/net_ib.cc",
        ),
        ("ib_slow.rank0.log", 0, 2, "bus bandwidth (largest) 11.46 GB/s is below the threshold 40 GB/s"),
    ],
)
def test_proven_faults_fail(name: str, rank: int, world: int, expected: str) -> None:
    verdict = check(name, rank=rank, world=world)
    assert verdict.outcome == nccl.FAIL
    assert verdict.exit_code == 1
    assert verdict.measurements["outcome"] == "Fail"
    assert any(expected in reason for reason in verdict.faults), verdict.faults


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("single_node.rank0.log", "every rank on one host"),
        ("truncated.rank0.log", "the run did not complete"),
        ("no_debug.rank0.log", "no NCCL debug lines"),
        ("no_debug.rank0.log", "no channel lines at all"),
    ],
)
def test_logs_that_prove_nothing_are_inconclusive(name: str, expected: str) -> None:
    verdict = check(name)
    assert verdict.outcome == nccl.INCONCLUSIVE, verdict.reasons
    assert verdict.exit_code == 3
    assert verdict.faults == ()
    assert any(expected in reason for reason in verdict.missing), verdict.missing


def test_a_fault_outweighs_missing_evidence() -> None:
    cut = log("socket_fallback.rank0.log").split("# Out of bounds")[0]
    verdict = check("", text=cut)
    assert verdict.outcome == nccl.FAIL
    assert any("did not complete" in r for r in verdict.missing)


def test_socket_fallback_fails_even_with_a_tiny_threshold() -> None:
    verdict = check("socket_fallback.rank0.log", settings=nccl.Settings(threshold_gbps=0.001))
    assert verdict.outcome == nccl.FAIL
    assert verdict.measurements["transport"] == "none"
    assert verdict.measurements["channels"] == 0
    assert verdict.faults == ("socket fall-back: 4 channel(s) via NET/Socket; inter-node traffic must use NET/IB",)


def test_threshold_uses_the_chosen_metric() -> None:
    # Largest size: 47.43 GB/s; average over every size: 44.82 GB/s.
    assert check("ib_gdrdma.rank0.log", settings=nccl.Settings(threshold_gbps=46.0)).passed
    avg = check("ib_gdrdma.rank0.log", settings=nccl.Settings(threshold_gbps=46.0, metric="avg"))
    assert avg.outcome == nccl.FAIL
    assert avg.measurements["busbw_gbps"] == pytest.approx(44.8205)
    assert check("ib_gdrdma.rank0.log", settings=nccl.Settings(threshold_gbps=47.43)).passed  # at the threshold
    assert check("ib_gdrdma.rank0.log", settings=nccl.Settings(threshold_gbps=47.44)).outcome == nccl.FAIL


def test_the_run_must_be_proven_across_nodes() -> None:
    text = log("ib_gdrdma.rank0.log")
    assert check("", world=1, text=text).outcome == nccl.INCONCLUSIVE  # SIGNAL_WORLD_SIZE 1
    one_rank = "\n".join(line for line in text.splitlines() if "#  Rank  1 " not in line)
    assert any("expected 0..1" in r for r in check("", text=one_rank).missing)
    same_host = text.replace("on sig-4f1c2a9b7d3e-c0-worker-1 ", "on sig-4f1c2a9b7d3e-c0-worker-0 ")
    assert any("every rank on one host" in r for r in check("", text=same_host).missing)
    duplicate = text.replace("#  Rank  1 Group  0 Pid     49 on", "#  Rank  0 Group  0 Pid     49 on")
    assert check("", text=duplicate).outcome == nccl.INCONCLUSIVE
    wrong_world = text.replace(
        "rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x9f3e2b7c1d4a6e58 - Init COMPLETE",
        "rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 commId 0x9f3e2b7c1d4a6e58 - Init COMPLETE",
    )
    assert any("Init COMPLETE" in r for r in check("", text=wrong_world).missing)
    expected_three = nccl.Settings(threshold_gbps=40.0, expected_nodes=3)
    assert any("expected 3" in r for r in check("", text=text, settings=expected_three).missing)
    assert check("", text=text, settings=nccl.Settings(threshold_gbps=40.0, expected_nodes=2)).passed


def test_combined_mpirun_output_of_two_nodes_with_two_gpus_each_passes() -> None:
    text = log("combined_2x2_ib.log")
    parsed = nccl.parse_log(text)
    assert len(parsed.nccl_hosts) == 2
    assert {c.via for c in parsed.channels} == {"P2P/CUMEM/read", "NET/IB/0/GDRDMA"}  # intra-node P2P is fine
    verdict = check("", text=text, world=4)
    assert verdict.passed, verdict.reasons
    assert verdict.measurements["hosts"] == 2
    assert nccl.verify_log(text, SETTINGS).passed
    # mpirun --tag-output prefixes every line with [job,rank]<stream>:
    tagged = "\n".join(f"[1,{i % 4}]<stdout>:{line}" for i, line in enumerate(text.splitlines()))
    assert nccl.verify_log(tagged, SETTINGS).passed
    # A rank missing from the combined log's Init lines is not proven.
    lost = "\n".join(line for line in text.splitlines() if not ("rank 3 nranks 4" in line and "COMPLETE" in line))
    assert nccl.verify_log(lost, SETTINGS).outcome == nccl.INCONCLUSIVE


def test_other_collectives_with_in_place_n_a_pass() -> None:
    text = log("sendrecv_ib.rank0.log")
    assert all(row.wrong[1] == "N/A" for row in nccl.parse_log(text).rows)
    verdict = check("", text=text)
    assert verdict.passed, verdict.reasons
    no_validation = text.replace("      0  ", "    N/A  ")
    assert any("no data validation" in r for r in check("", text=no_validation).missing)


@pytest.mark.parametrize(
    ("old", "new", "expected", "outcome"),
    [
        (
            "# Out of bounds values : 0 OK",
            "# Out of bounds values : 3 FAILED",
            "out of bounds values: 3 FAILED",
            "Fail",
        ),
        ("  47.43      0\n", "  47.43     17\n", "wrong elements", "Fail"),
        ("   47.76      0    90562", "   47.76    N/A    90562", "no data validation", "Inconclusive"),
        ("Using network IB", "Using network GPUDirectTCPX", "NCCL chose network", "Fail"),
        ("[send] via NET/IB/0/GDRDMA", "[send] via NET/OFI/0/GDRDMA", "not via IB verbs", "Fail"),
        ("[receive] via NET/IB/0/GDRDMA", "[receive] via SHM/direct/direct", "contradicts itself", "Inconclusive"),
        (
            "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]",
            "NCCL INFO NET/IB : Using [0]mlx5_0:1/ETH [RO]",
            "no 'NET/IB : Using",
            "Inconclusive",
        ),
        (
            "# Avg bus bandwidth    : 44.8205",
            "# Avg bus bandwidth    : nan",
            "the run did not complete",
            "Inconclusive",
        ),
        ("47.76   47.76      0", "0.00    0.00      0", "zero bus bandwidth", "Fail"),
    ],
)
def test_edits_of_a_good_log(old: str, new: str, expected: str, outcome: str) -> None:
    text = log("ib_gdrdma.rank0.log")
    assert old in text
    verdict = check("", text=text.replace(old, new))
    assert verdict.outcome == outcome, verdict.reasons
    assert any(expected in r for r in verdict.reasons), verdict.reasons


def test_in_place_n_a_is_not_an_error() -> None:
    text = log("ib_gdrdma.rank0.log").replace("  47.43      0\n", "  47.43    N/A\n")
    assert check("", text=text).passed


@pytest.mark.parametrize(
    "line",
    [
        "host:1:1 [0] NCCL INFO ncclSystemError: System call (e.g. socket, malloc) or external library call failed",
        "host: Test CUDA failure common.cu:892 'out of memory'",
        "host:1:1 [0] init.cc:1234 NCCL WARN Cuda failure 'invalid device ordinal'",
        "*** Process received signal ***",
        "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD",
        "ncclInternalError: Internal check failed.",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "CUDA error at all_reduce.cu:58 code=700(cudaErrorIllegalAddress)",
    ],
)
def test_error_lines_fail(line: str) -> None:
    text = log("ib_gdrdma.rank0.log") + line + "\n"
    verdict = check("", text=text)
    assert verdict.outcome == nccl.FAIL
    assert any("error line(s)" in r for r in verdict.faults)


def test_allowed_warnings_are_the_operators_choice() -> None:
    text = (
        log("ib_gdrdma.rank0.log")
        + "sig-4f1c2a9b7d3e-c0-worker-0:57:57 [0] misc/ibvwrap.cc:90 NCCL WARN NET/IB : harmless notice\n"
    )
    assert check("", text=text).outcome == nccl.FAIL
    allowed = nccl.Settings(threshold_gbps=40.0, allowed_warnings=("harmless notice",))
    assert check("", text=text, settings=allowed).passed
    # An allow-list never excuses a nccl-tests failure.
    assert not check("", text=text + "host: Test NCCL failure common.cu:1 'x'\n", settings=allowed).passed


def test_a_failed_or_killed_benchmark() -> None:
    failed = check("ib_gdrdma.rank0.log", exit_code=1)
    assert failed.outcome == nccl.FAIL
    assert any("exited 1" in r for r in failed.faults)
    killed = check("ib_gdrdma.rank0.log", exit_code=None)
    assert killed.outcome == nccl.INCONCLUSIVE
    assert any("did not run to its end" in r for r in killed.missing)
    assert check("ib_gdrdma.rank0.log", world=3).outcome == nccl.INCONCLUSIVE


def test_openmpi_notices_are_not_result_rows() -> None:
    text = log("ib_gdrdma.rank0.log").replace(
        "# Using devices\n", "# Using devices\n  Local host:   sig-4f1c2a9b7d3e-c0-worker-0\n  Local device: mlx5_0\n"
    )
    assert check("", text=text).passed


# --- The script as the runner runs it ---------------------------------------------------------


def configured_copy(tmp_path: Path, log_name: str | None, *, threshold: str | None = "40.0", code: int = 0) -> Path:
    """The script as an operator would edit it, pointing at a stand-in all_reduce_perf that
    prints one of the test logs (and exits ``code``)."""
    fake = tmp_path / "all_reduce_perf"
    source = DATA / log_name if log_name else Path("/dev/null")
    fake.write_text(f"#!/bin/sh\ncat '{source}'\nexit {code}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    text = SCRIPT.read_text()
    text = text.replace('BENCHMARK: str = "/opt/nccl-tests/build/all_reduce_perf"', f'BENCHMARK: str = "{fake}"')
    if threshold is not None:
        text = text.replace("MIN_BUSBW_GBPS: float | None = None", f"MIN_BUSBW_GBPS: float | None = {threshold}")
    script = tmp_path / "scripts" / "nccl_ib_allreduce.py"
    script.parent.mkdir()
    script.write_text(text)
    script.chmod(0o444)  # mounted read-only, maybe without the execute bit: run by its #! line
    return script


def run_as_rank(
    script: Path, tmp_path: Path, rank: int = 0, world: int = 2
) -> tuple[subprocess.CompletedProcess, Path]:
    measurements = tmp_path / f"measurements-{rank}.json"
    work = tmp_path / f"work-{rank}"
    work.mkdir()
    inherited = {**os.environ, "OMPI_COMM_WORLD_RANK": str(rank), "SECRET_TOKEN": "x"}
    env = clean_environment(
        inherited,
        {
            "SIGNAL_RANK": str(rank),
            "SIGNAL_WORLD_SIZE": str(world),
            "SIGNAL_WORKDIR": str(work),
            "SIGNAL_MEASUREMENTS_FILE": str(measurements),
        },
        home=tmp_path,
        mpi=True,
    )
    done = subprocess.run(
        script_argv(script), env=env, cwd=work, capture_output=True, text=True, timeout=60, check=False
    )
    return done, measurements


def test_script_passes_on_an_ib_log(tmp_path: Path) -> None:
    done, measurements = run_as_rank(configured_copy(tmp_path, "ib_gdrdma.rank0.log"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "via NET/IB/0/GDRDMA" in done.stdout  # the log reaches mpirun's (digested) output
    line = next(x for x in done.stdout.splitlines() if x.startswith(nccl.RESULT_PREFIX))
    report = json.loads(line[len(nccl.RESULT_PREFIX) :])
    assert report["passed"] is True
    assert report["reasons"] == []
    written = json.loads(measurements.read_text())
    assert validate_measurements(written) == written
    assert written["busbw_gbps"] == 47.43
    assert written["transport"] == "IB"
    assert (tmp_path / "work-0" / "nccl-tests.rank0.log").read_text() == log("ib_gdrdma.rank0.log")


def test_script_fails_on_a_socket_fallback(tmp_path: Path) -> None:
    done, measurements = run_as_rank(configured_copy(tmp_path, "socket_fallback.rank0.log"), tmp_path)
    assert done.returncode == 1
    assert "FAIL: socket fall-back" in done.stderr
    assert json.loads(measurements.read_text())["outcome"] == "Fail"


def test_script_rank_1_passes_and_writes_no_measurements(tmp_path: Path) -> None:
    done, measurements = run_as_rank(configured_copy(tmp_path, "ib_gdrdma.rank1.log"), tmp_path, rank=1)
    assert done.returncode == 0, done.stderr
    assert not measurements.exists()


def test_script_fails_when_the_benchmark_fails(tmp_path: Path) -> None:
    done, _ = run_as_rank(configured_copy(tmp_path, "ib_gdrdma.rank0.log", code=3), tmp_path)
    assert done.returncode == 1
    assert "FAIL: the benchmark exited 3" in done.stderr


def test_script_is_inconclusive_without_nccl_debug_output(tmp_path: Path) -> None:
    done, measurements = run_as_rank(configured_copy(tmp_path, "no_debug.rank0.log"), tmp_path)
    assert done.returncode == INCONCLUSIVE_EXIT_CODE == 3
    assert "INCONCLUSIVE: no NCCL debug lines" in done.stderr
    assert json.loads(measurements.read_text())["outcome"] == "Inconclusive"


@pytest.mark.parametrize(
    ("log_name", "code", "expected"),
    [
        ("combined_2x2_ib.log", 0, None),
        ("combined_2x2_mixed.log", 1, "FAIL: mixed transports across ranks"),
        ("no_debug.rank0.log", 3, "INCONCLUSIVE: no NCCL debug lines"),
        ("single_node.rank0.log", 3, "INCONCLUSIVE: every rank on one host"),
    ],
)
def test_verify_a_captured_log(tmp_path: Path, log_name: str, code: int, expected: str | None) -> None:
    script = configured_copy(tmp_path, None)
    env = clean_environment(os.environ, {}, home=tmp_path)
    done = subprocess.run(
        [*script_argv(script), "--verify", str(DATA / log_name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, done.stderr
    assert done.stdout.startswith(nccl.RESULT_PREFIX)
    if expected:
        assert expected in done.stderr


def test_unconfigured_script_refuses_to_run(tmp_path: Path) -> None:
    script = configured_copy(tmp_path, "ib_gdrdma.rank0.log", threshold=None)
    done, measurements = run_as_rank(script, tmp_path)
    assert done.returncode == 3  # not a proven fault of the Node: Inconclusive
    assert "MIN_BUSBW_GBPS is not set" in done.stderr
    assert "no hardware thresholds" in done.stderr
    assert not measurements.exists()
    assert "NCCL INFO" not in done.stdout


def test_script_outside_mpi_refuses(tmp_path: Path) -> None:
    script = configured_copy(tmp_path, "ib_gdrdma.rank0.log")
    env = clean_environment(os.environ, {"SIGNAL_PARTICIPANT_INDEX": "0"}, home=tmp_path)
    done = subprocess.run(script_argv(script), env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3
    assert "backend MPIJob" in done.stderr


def test_script_cannot_start_all_reduce_perf(tmp_path: Path) -> None:
    script = configured_copy(tmp_path, None)
    (tmp_path / "all_reduce_perf").unlink()
    done, _ = run_as_rank(script, tmp_path)
    assert done.returncode == 3  # the runner image lacks nccl-tests: nothing proven about the Node
    assert "cannot start" in done.stdout + done.stderr


# --- The Profile ------------------------------------------------------------------------------


def test_profile_validates_and_names_the_script() -> None:
    document = yaml.safe_load((EXAMPLE / "profile.yaml").read_text())
    profile = CertificationProfile.model_validate(document)
    assert profile.spec.participants.count == 2
    (only,) = profile.spec.checks
    assert only.backend == "MPIJob"
    assert only.gpu_count == 1
    assert only.mpi_scope == "crossNode"  # one NCCL world across the Nodes
    assert "IPC_LOCK" in only.workload.capabilities
    assert any(k.startswith("rdma/") for k in only.workload.extended_resources)
    assert (EXAMPLE / "scripts" / only.script_key).is_file()
    assert sorted(p.name for p in (EXAMPLE / "scripts").iterdir()) == [only.script_key]
    assert profile.spec.recurrence is not None  # the portal's freshness window for this check


def test_readme_explains_threshold_and_digest() -> None:
    readme = (EXAMPLE / "README.md").read_text()
    assert "MIN_BUSBW_GBPS" in readme
    assert "deploy/tools/bundle-digest.sh" in readme
    assert (REPO / "deploy" / "tools" / "bundle-digest.sh").is_file()


def _verify(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = configured_copy(tmp_path, None)
    env = clean_environment(os.environ, {}, home=tmp_path)
    return subprocess.run(
        [*script_argv(script), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_help_says_how_to_run_it_and_what_the_exit_codes_mean(tmp_path: Path) -> None:
    done = _verify(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert "--verify LOGFILE" in done.stdout
    assert "3 Inconclusive" in done.stdout


def test_unexpected_arguments_prove_nothing(tmp_path: Path) -> None:
    """Before: any argument list but --verify FILE ran the script as a rank."""
    done = _verify(tmp_path, "--verfy", "x.log")
    assert done.returncode == INCONCLUSIVE_EXIT_CODE
    assert "unexpected arguments" in done.stderr


def test_verify_names_the_rank_the_log_is_from(tmp_path: Path) -> None:
    """Before: stderr said 'rank 0' for a rank-1 log whose JSON report said rank 1."""
    done = _verify(tmp_path, "--verify", str(DATA / "socket_fallback.rank1.log"))
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout.removeprefix(nccl.RESULT_PREFIX).splitlines()[0])
    assert report["rank"] == 1
    assert "nccl-ib: rank 1: FAIL: socket fall-back" in done.stderr
    assert "rank 0" not in done.stderr


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate mapping keys (as strict parsers do)."""


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> object:
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    duplicated = sorted({str(k) for k in keys if keys.count(k) > 1})
    if duplicated:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {duplicated}", node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*/profile.yaml")), ids=lambda p: p.parent.name)
def test_example_profiles_have_no_duplicate_keys(path: Path) -> None:
    """examples/nccl-ib/profile.yaml had `mpi:` twice (PyYAML took the last one silently)."""
    assert yaml.load(path.read_text(), Loader=_StrictLoader)
