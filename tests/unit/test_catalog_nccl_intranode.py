"""checks/nccl-intranode: its verifier on real nccl-tests outputs (tests/data/checks/nccl-intranode,
each file's first line names its public source; excerpts are cut at their ends only), its
``--verify`` command line, and the script as the runner runs it (all_reduce_perf absent; a
stand-in printing a recorded output).

No complete single-Node run with NCCL_DEBUG=INFO channel lines and a finished table was found in
public sources, so no fixture here is a Pass: the Pass path is the absence of every reason below,
and Signal's own real-node test is where a Pass is seen."""

from pathlib import Path

import pytest

from shared.result import validate_measurements
from tests.unit.catalog_support import (
    DATA,
    EXIT,
    fixture,
    fixtures,
    load_check,
    run_check,
    stand_in,
    tool_dir,
    verify_cli,
)

CHECK, SCRIPT = "nccl-intranode", "nccl_intranode.py"
intranode = load_check(CHECK, SCRIPT)
THRESHOLD = {"minBusbwGbps": "100"}

CASES = [
    # (fixture, parameters, outcome, a reason that must appear)
    ("shm_fallback_nvswitch.log", THRESHOLD, "Fail", "via SHM/direct/direct"),
    ("a100x4_shm_and_p2p_mixed.log", THRESHOLD, "Fail", "fell back to host shared memory"),
    ("gtx_p2p_disabled_graph_warn.log", THRESHOLD, "Fail", "NCCL WARN Could not find a path"),
    (
        "gtx_p2p_disabled_graph_warn.log",
        {**THRESHOLD, "allowedWarnings": "Could not find a pat"},
        "Inconclusive",
        "did not complete",
    ),
    ("h200x8_debug_warn_complete.log", THRESHOLD, "Inconclusive", "no NCCL debug lines"),
    ("h200x8_no_debug_head.log", THRESHOLD, "Inconclusive", "did not complete"),
    ("p2p_direct_pointer_tail_cut.log", THRESHOLD, "Inconclusive", "did not complete"),
    ("two_gpus_p2p_unsupported_hang.log", THRESHOLD, "Inconclusive", "no channel lines"),
    ("single_a10g_one_rank.log", THRESHOLD, "Inconclusive", "a world of 1 rank"),
    ("rtx5090_alltoall_one_rank.log", THRESHOLD, "Inconclusive", "a world of 1 rank"),
    ("rtx4090x8_tree_head.log", THRESHOLD, "Inconclusive", "no NCCL debug lines"),
    ("rtx2080ti_nvlink_bridge_old_format_head.log", THRESHOLD, "Inconclusive", "did not complete"),
    ("two_nodes_ring_socket.log", THRESHOLD, "Inconclusive", "spans 2 hosts"),
    ("h200x8_debug_warn_complete.log", {}, "Inconclusive", "minBusbwGbps is not set"),
    ("h200x8_debug_warn_complete.log", {**THRESHOLD, "expectedGpus": "4"}, "Inconclusive", "8 rank(s), expected 4"),
]


@pytest.mark.parametrize(("name", "params", "outcome", "reason"), CASES)
def test_verifier_classifies_real_outputs(name: str, params: dict[str, str], outcome: str, reason: str) -> None:
    verdict = intranode.verify_text(fixture(CHECK, name), params)
    assert verdict.outcome == outcome, (verdict.faults, verdict.missing)
    assert any(reason in r for r in verdict.faults + verdict.missing), (verdict.faults, verdict.missing)


def test_every_fixture_names_its_source_and_is_covered() -> None:
    covered = {case[0] for case in CASES}
    for path in fixtures(CHECK):
        assert path.read_text(encoding="utf-8").startswith("# source: "), path.name
        assert path.name in covered, f"{path.name} has no case"
    assert len(covered) >= 8


def test_the_world_is_the_one_the_lines_name() -> None:
    """nccl-tests' rank list, NCCL's nranks and the ranks channels connect, whichever the log has."""
    assert (
        intranode.verify_text(fixture(CHECK, "h200x8_debug_warn_complete.log"), THRESHOLD).measurements["world_size"]
        == 8
    )
    assert intranode.verify_text(fixture(CHECK, "shm_fallback_nvswitch.log"), THRESHOLD).measurements["world_size"] == 8
    assert (
        intranode.verify_text(fixture(CHECK, "two_nodes_ring_socket.log"), THRESHOLD).measurements["world_size"] == 16
    )


def test_bandwidth_of_a_run_cut_short_is_not_judged() -> None:
    """A table cut after its first (8-byte) row is not a slow Node."""
    verdict = intranode.verify_text(fixture(CHECK, "rtx2080ti_nvlink_bridge_old_format_head.log"), THRESHOLD)
    assert verdict.faults == ()


def test_a_completed_run_below_the_threshold_is_a_fault_even_without_debug_lines() -> None:
    verdict = intranode.verify_text(fixture(CHECK, "h200x8_debug_warn_complete.log"), {"minBusbwGbps": "500"})
    assert verdict.measurements["busbw_gbps"] == 476.96
    assert any("below minBusbwGbps 500" in f for f in verdict.faults)


def test_measurements_fit_the_runner_rules() -> None:
    for path in fixtures(CHECK):
        verdict = intranode.verify_text(path.read_text(encoding="utf-8"), THRESHOLD)
        validate_measurements(dict(list(verdict.measurements.items())[:16]))


def test_verify_command_line_prints_one_json_line_and_exits_with_the_class() -> None:
    for name, outcome in (("shm_fallback_nvswitch.log", "Fail"), ("h200x8_debug_warn_complete.log", "Inconclusive")):
        code, line = verify_cli(CHECK, SCRIPT, DATA / CHECK / name, THRESHOLD)
        assert (code, line["outcome"]) == (EXIT[outcome], outcome)
        assert set(line) == {"outcome", "faults", "missing", "measurements"}


def test_run_mode_without_the_benchmark_is_inconclusive_naming_it(tmp_path: Path) -> None:
    code, line, stderr = run_check(CHECK, SCRIPT, [tool_dir(tmp_path)], THRESHOLD, tmp_path)
    assert (code, line["outcome"]) == (3, "Inconclusive")
    assert "all_reduce_perf is not on PATH" in line["missing"][0]
    assert "all_reduce_perf" in stderr


@pytest.mark.parametrize(
    ("name", "outcome"), [("shm_fallback_nvswitch.log", "Fail"), ("h200x8_debug_warn_complete.log", "Inconclusive")]
)
def test_run_mode_with_a_stand_in_benchmark_reaches_the_outputs_class(tmp_path: Path, name: str, outcome: str) -> None:
    bin_dir = tool_dir(tmp_path)
    stand_in(bin_dir, "all_reduce_perf", DATA / CHECK / name)
    code, line, _ = run_check(CHECK, SCRIPT, [bin_dir], THRESHOLD, tmp_path)
    assert (code, line["outcome"]) == (EXIT[outcome], outcome)
