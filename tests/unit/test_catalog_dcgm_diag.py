"""checks/dcgm-diag: its verifier on real ``dcgmi diag`` outputs (tests/data/checks/dcgm-diag, each
file's first line names its public source; outputs cut short are cut at an end only, the way the
public copy is), its ``--verify`` command line, and the script as the runner runs it (dcgmi
absent; a stand-in dcgmi printing a recorded output)."""

import json
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

CHECK, SCRIPT = "dcgm-diag", "dcgm_diag.py"
dcgm = load_check(CHECK, SCRIPT)

CASES = [
    # (fixture, parameters, outcome, a reason that must appear)
    ("text_4.4.2_r2_pass.txt", {}, "Pass", None),
    ("text_3.3.9_r1_a10g_pass.txt", {}, "Pass", None),
    ("text_2.x_r4_pass_blacklist.txt", {}, "Pass", None),
    ("text_3.1.8_r1_persistence_fail.txt", {}, "Fail", "Persistence Mode failed"),
    ("text_3.3.9_r3_a10g_targeted_power_fail.txt", {}, "Fail", "Targeted Power failed"),
    ("text_3.3.9_r3_a10g_targeted_power_fail.txt", {"allowSkips": "EUD Test"}, "Fail", "did not reach desired power"),
    ("text_row_remap_pending_error_fragment.txt", {}, "Fail", "row remappings are pending"),
    ("text_gpu_memory_fail_thermal_fragment.txt", {}, "Fail", "Thermal violations"),
    ("text_3.3.9_r3_v100_eud_skip.txt", {}, "Inconclusive", "EUD Test: skip"),
    ("text_3.3.9_r3_v100_eud_skip.txt", {"allowSkips": "EUD Test"}, "Pass", None),
    ("text_3.3.9_r3_verbose_v100_eud_skip.txt", {}, "Inconclusive", "EUD Test: skip"),
    ("text_3.3.9_r3_verbose_v100_eud_skip.txt", {"allowSkips": "eud test, memtest"}, "Pass", None),
    ("text_3.0.4_r3_skips_truncated.txt", {}, "Inconclusive", "cut short"),
    ("text_4.2.3_warnings_truncated.txt", {}, "Inconclusive", "cut short"),
    ("text_3.3.1_r2_head_truncated.txt", {}, "Inconclusive", "cut short"),
    ("text_3.3.5_r3_autopilot_head_truncated.txt", {}, "Inconclusive", "cut short"),
    ("text_3.3.1_cuda_context_busy_middle.txt", {}, "Inconclusive", "not the Node's"),
    ("err_hostengine_unreachable.txt", {}, "Inconclusive", "Unable to connect to host engine"),
    ("err_hostengine_invalid.txt", {}, "Inconclusive", "Unable to connect to host engine"),
    ("json_3.x_r3_skips_elided.json", {}, "Inconclusive", "does not parse"),
    ("text_4.4.2_r2_pass.txt", {"level": "5"}, "Inconclusive", "level must be"),
    ("json_4.2.3_r1_gb10_persistence_fail.json", {}, "Fail", "Persistence mode for GPU 0 is disabled"),
    ("json_3.1.0_8gpu_warning_prefix_nulls.json", {}, "Inconclusive", "WARNING: THIS SHOULD NOT HAPPEN"),
    ("json_3.1.0_8gpu_warning_prefix_nulls.json", {"allowWarnings": "true"}, "Pass", None),
]


@pytest.mark.parametrize(("name", "params", "outcome", "reason"), CASES)
def test_verifier_classifies_real_outputs(name: str, params: dict[str, str], outcome: str, reason: str | None) -> None:
    verdict = dcgm.verify_text(fixture(CHECK, name), params)
    assert verdict.outcome == outcome, (verdict.faults, verdict.missing)
    if reason is None:
        assert verdict.faults == ()
        assert verdict.missing == ()
    else:
        assert any(reason in r for r in verdict.faults + verdict.missing), (verdict.faults, verdict.missing)


def test_every_fixture_names_its_source_and_is_covered() -> None:
    covered = {case[0] for case in CASES}
    for path in fixtures(CHECK):
        assert path.read_text(encoding="utf-8").startswith("# source: "), path.name
        assert path.name in covered, f"{path.name} has no case"
    assert len(covered) >= 8


def test_a_json_document_after_other_lines_is_still_read() -> None:
    """DCGM's own copy of a real 3.1.0 output prints a warning line before the document and null
    entries between tests. Before, the output was read as a table: 'no diagnostic results in the
    output', even with allowWarnings."""
    verdict = dcgm.verify_text(fixture(CHECK, "json_3.1.0_8gpu_warning_prefix_nulls.json"), {})
    assert verdict.missing == ("DCGM printed before its results: WARNING: THIS SHOULD NOT HAPPEN",)
    assert verdict.measurements["form"] == "json"
    assert verdict.measurements["tests"] == 10
    assert verdict.measurements["test_software"] == "pass"
    assert verdict.measurements["dcgm_version"] == "3.1.0"


def test_dcgm_4x_entity_results_and_metadata_are_read() -> None:
    """The document DCGM 4.2.3 emitted on a GB10: entity results under 'DCGM Diagnostic', the
    versions under 'metadata'."""
    verdict = dcgm.verify_text(fixture(CHECK, "json_4.2.3_r1_gb10_persistence_fail.json"), {})
    assert verdict.measurements["dcgm_version"] == "4.2.3"
    assert verdict.measurements["driver_version"] == "580.82.09"
    assert verdict.measurements["test_software"] == "fail"


def test_every_tests_result_is_measured() -> None:
    verdict = dcgm.verify_text(fixture(CHECK, "text_3.3.9_r3_a10g_targeted_power_fail.txt"), {})
    assert verdict.measurements["test_targeted_power"] == "fail"
    assert verdict.measurements["test_eud_test"] == "skip"
    assert verdict.measurements["test_pcie"] == "pass"
    assert verdict.measurements["dcgm_version"] == "3.3.9"
    assert verdict.measurements["tests"] == 16


def test_a_wrapped_message_is_joined_inside_words() -> None:
    verdict = dcgm.verify_text(fixture(CHECK, "text_3.1.8_r1_persistence_fail.txt"), {})
    assert "currently disabled. The DCGM diagnostic requires peristence mode" in verdict.faults[0]


def test_a_table_cut_after_a_failure_without_its_reason_is_not_a_proven_fault() -> None:
    """The last test of a cut table shows Fail but its reason was cut off: not proof of the Node."""
    text = fixture(CHECK, "text_3.3.9_r3_a10g_targeted_power_fail.txt")
    cut = text[: text.index("| Warning")]
    verdict = dcgm.verify_text(cut, {})
    assert verdict.outcome == "Inconclusive"
    assert any("stops before its reason" in m for m in verdict.missing)


def test_a_pass_table_cut_before_its_border_is_not_a_pass() -> None:
    text = fixture(CHECK, "text_4.4.2_r2_pass.txt")
    cut = text[: text.rindex("+---")]
    assert dcgm.verify_text(cut, {}).outcome == "Inconclusive"


def test_json_runtime_error_and_layouts_are_read() -> None:
    """The -j layouts are DCGM's own (testing/python3/dcgm_diag_schema.json names 4.x's keys); no
    complete real JSON capture was found in public sources, so these are the JSON wire shapes
    with one field changed at a time, never presented as captures."""
    skipped = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Stress",
                    "tests": [{"name": "Targeted Stress", "results": [{"gpu_id": "0", "status": "Skip"}]}],
                }
            ]
        }
    }
    assert dcgm.verify_text(json.dumps(skipped), {}).outcome == "Inconclusive"
    error = {"DCGM Diagnostic": {"runtime_error": "Couldn't load the diagnostic plugins", "test_categories": []}}
    verdict = dcgm.verify_text(json.dumps(error), {})
    assert verdict.outcome == "Inconclusive"
    assert "runtime_error" in verdict.missing[0]


def test_measurements_fit_the_runner_rules() -> None:
    for path in fixtures(CHECK):
        verdict = dcgm.verify_text(path.read_text(encoding="utf-8"), {})
        kept = dict(sorted(verdict.measurements.items(), key=lambda i: i[0].startswith("test_"))[:16])
        validate_measurements(kept)


def test_verify_command_line_prints_one_json_line_and_exits_with_the_class() -> None:
    for name, outcome in (
        ("text_4.4.2_r2_pass.txt", "Pass"),
        ("text_3.3.9_r3_a10g_targeted_power_fail.txt", "Fail"),
        ("err_hostengine_unreachable.txt", "Inconclusive"),
    ):
        code, line = verify_cli(CHECK, SCRIPT, DATA / CHECK / name, {})
        assert (code, line["outcome"]) == (EXIT[outcome], outcome)
        assert set(line) == {"outcome", "faults", "missing", "measurements"}


def test_run_mode_without_dcgmi_is_inconclusive_naming_the_tool(tmp_path: Path) -> None:
    code, line, stderr = run_check(CHECK, SCRIPT, [tool_dir(tmp_path)], {"level": "1"}, tmp_path)
    assert (code, line["outcome"]) == (3, "Inconclusive")
    assert "dcgmi is not on PATH" in line["missing"][0]
    assert "dcgmi" in stderr


def test_run_mode_without_a_level_is_inconclusive(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path)
    stand_in(bin_dir, "dcgmi", DATA / CHECK / "text_4.4.2_r2_pass.txt")
    code, line, _ = run_check(CHECK, SCRIPT, [bin_dir], {}, tmp_path)
    assert (code, line["outcome"]) == (3, "Inconclusive")
    assert "level is not set" in line["missing"][0]


@pytest.mark.parametrize(
    ("name", "exit_code", "outcome"),
    [
        ("text_4.4.2_r2_pass.txt", 0, "Pass"),
        # dcgmi exits non-zero when a test fails; the verdict comes from what it printed.
        ("text_3.3.9_r3_a10g_targeted_power_fail.txt", 226, "Fail"),
        ("err_hostengine_unreachable.txt", 1, "Inconclusive"),
    ],
)
def test_run_mode_with_a_stand_in_tool_reaches_the_outputs_class(
    tmp_path: Path, name: str, exit_code: int, outcome: str
) -> None:
    bin_dir = tool_dir(tmp_path)
    stand_in(bin_dir, "dcgmi", DATA / CHECK / name, exit_code)
    code, line, _ = run_check(CHECK, SCRIPT, [bin_dir], {"level": "2"}, tmp_path)
    assert (code, line["outcome"]) == (EXIT[outcome], outcome)
    kept = json.loads((tmp_path / "measurements.json").read_text())
    assert kept["outcome"] == outcome
    validate_measurements(kept)
