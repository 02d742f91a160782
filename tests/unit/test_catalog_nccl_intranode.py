"""checks/nccl-intranode: its verifier on real nccl-tests outputs (tests/data/checks/nccl-intranode,
each file's first line names its public source; excerpts are cut at their ends only), its
``--verify`` command line, and the script as the runner runs it (all_reduce_perf absent; a
stand-in printing a recorded output).

The Passes are complete single-Node runs with NCCL_DEBUG=INFO found in public sources: 4x A100
all_reduce_perf (NCCL 2.20, a Markdown-indented paste) and 2x A100 sendrecv_perf (NCCL 2.22, channel
lines inside the table, as lazy connection prints them)."""

import textwrap
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
A100X4 = {"minBusbwGbps": "190", "expectedGpus": "4"}
A100X2 = {"minBusbwGbps": "70"}

CASES = [
    # (fixture, parameters, outcome, a reason that must appear; none for a Pass)
    ("a100x4_allreduce_indented_complete.log", A100X4, "Pass", ""),
    ("a100x4_allreduce_indented_complete.log", {"minBusbwGbps": "200"}, "Fail", "below minBusbwGbps 200"),
    ("a100x4_allreduce_indented_complete.log", {**A100X4, "requireNvlink": "true"}, "Inconclusive", "Pattern"),
    ("a100x2_sendrecv_p2p_direct_complete.log", A100X2, "Pass", ""),
    ("a100x2_sendrecv_p2p_direct_complete.log", {"minBusbwGbps": "80"}, "Fail", "71.74 GB/s"),
    (
        "a100x2_sendrecv_p2p_direct_complete.log",
        {**A100X2, "expectedGpus": "4"},
        "Inconclusive",
        "2 rank(s), expected 4",
    ),
    ("h800x8_nvls_unvalidated_head_cut.log", THRESHOLD, "Inconclusive", "not validated"),
    ("rtx5090x2_shm_cuda_failure.log", THRESHOLD, "Fail", "via SHM/direct/direct"),
    ("p5_nvls_expected_results_excerpt.log", THRESHOLD, "Inconclusive", "did not complete"),
    ("g4dn_t4x8_tail_no_channels.log", {"minBusbwGbps": "5"}, "Inconclusive", "no channel lines"),
    ("g4dn_t4x8_tail_no_channels.log", THRESHOLD, "Fail", "5.33 GB/s"),
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
    if outcome == "Pass":
        assert (verdict.faults, verdict.missing) == ((), ())
        assert verdict.measurements["transport"] == "P2P"
    else:
        assert any(reason in r for r in verdict.faults + verdict.missing), (verdict.faults, verdict.missing)


def test_a_pass_proves_every_rank_on_one_host_over_p2p_and_the_largest_message() -> None:
    verdict = intranode.verify_text(fixture(CHECK, "a100x4_allreduce_indented_complete.log"), A100X4)
    assert verdict.measurements == {
        "world_size": 4,
        "hosts": 1,
        "transport": "P2P",
        "nccl_version": "2.20.5",
        "largest_bytes": 536870912,
        "busbw_gbps": 193.7,
        "threshold_gbps": 190.0,
        "busbw_avg_gbps": 190.076,
        "outcome": "Pass",
    }


def test_an_indented_paste_reads_like_the_output_itself() -> None:
    """A Markdown list's code block indents every line; before, the indented NCCL lines, rank list
    and summary were not seen ('no NCCL debug lines', 'did not complete')."""
    text = fixture(CHECK, "a100x4_allreduce_indented_complete.log")
    source, body = text.split("\n", 1)
    dedented = intranode.verify_text(source + "\n" + textwrap.dedent(body), A100X4)
    assert intranode.verify_text(text, A100X4) == dedented
    assert dedented.outcome == "Pass"


def test_a_log_cut_at_its_start_and_unvalidated_is_not_a_pass() -> None:
    """The last 10 KB of an 8-GPU NVLS run with -c 0: only rank 2 connects a channel in what is left,
    and no row was validated. Before, both went unseen and it passed."""
    verdict = intranode.verify_text(fixture(CHECK, "h800x8_nvls_unvalidated_head_cut.log"), THRESHOLD)
    assert verdict.outcome == "Inconclusive"
    assert verdict.faults == ()
    assert verdict.missing == (
        "rank(s) [0, 1, 3, 4, 5, 6, 7] connect no channel in the log: their transport is not proven",
        "the results were not validated (#wrong N/A in every row: nccl-tests ran with -c 0)",
    )
    assert verdict.measurements["transport"] == "P2P+NVLS"
    assert verdict.measurements["world_size"] == 8


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
    for name, params, outcome in (
        ("shm_fallback_nvswitch.log", THRESHOLD, "Fail"),
        ("h200x8_debug_warn_complete.log", THRESHOLD, "Inconclusive"),
        ("a100x2_sendrecv_p2p_direct_complete.log", A100X2, "Pass"),
    ):
        code, line = verify_cli(CHECK, SCRIPT, DATA / CHECK / name, params)
        assert (code, line["outcome"]) == (EXIT[outcome], outcome)
        assert set(line) == {"outcome", "faults", "missing", "measurements"}


def test_run_mode_without_the_benchmark_is_inconclusive_naming_it(tmp_path: Path) -> None:
    code, line, stderr = run_check(CHECK, SCRIPT, [tool_dir(tmp_path)], THRESHOLD, tmp_path)
    assert (code, line["outcome"]) == (3, "Inconclusive")
    assert "all_reduce_perf is not on PATH" in line["missing"][0]
    assert "all_reduce_perf" in stderr


@pytest.mark.parametrize(
    ("name", "params", "outcome"),
    [
        ("shm_fallback_nvswitch.log", THRESHOLD, "Fail"),
        ("h200x8_debug_warn_complete.log", THRESHOLD, "Inconclusive"),
        ("a100x4_allreduce_indented_complete.log", A100X4, "Pass"),
    ],
)
def test_run_mode_with_a_stand_in_benchmark_reaches_the_outputs_class(
    tmp_path: Path, name: str, params: dict[str, str], outcome: str
) -> None:
    bin_dir = tool_dir(tmp_path)
    stand_in(bin_dir, "all_reduce_perf", DATA / CHECK / name)
    code, line, _ = run_check(CHECK, SCRIPT, [bin_dir], params, tmp_path)
    assert (code, line["outcome"]) == (EXIT[outcome], outcome)
