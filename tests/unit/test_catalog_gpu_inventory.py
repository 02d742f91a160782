"""checks/gpu-inventory: its verifier on real nvidia-smi outputs (tests/data/checks/gpu-inventory,
each file's first line names its public source; nothing in them is edited, captures cut short are
cut at an end only), its ``--verify`` command line, and the script as the runner runs it with the
tool absent and with a stand-in nvidia-smi that prints a recorded real output."""

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

CHECK, SCRIPT = "gpu-inventory", "gpu_inventory.py"
inventory = load_check(CHECK, SCRIPT)

CASES = [
    # (fixture, parameters, outcome, a reason that must appear)
    ("text_h100x8.txt", {"expectedGpuCount": "8"}, "Pass", None),
    ("text_h100x8.txt", {"expectedGpuCount": "8", "expectedDriverVersion": "565.57.01"}, "Pass", None),
    ("text_h100x8.txt", {"expectedGpuCount": "8", "expectedDriverVersion": "570.86.15"}, "Fail", "expected 570.86.15"),
    ("text_h100x8.txt", {"expectedGpuCount": "8", "expectedCudaVersion": "12.8"}, "Fail", "expectedCudaVersion"),
    ("text_h100x8.txt", {"expectedGpuCount": "16"}, "Fail", "8 GPU(s) attached, expected 16"),
    ("text_h100x8.txt", {}, "Inconclusive", "expectedGpuCount is not set"),
    ("text_h100x8_truncated.txt", {"expectedGpuCount": "8"}, "Inconclusive", "cut short"),
    ("text_a100x4.txt", {"expectedGpuCount": "4"}, "Fail", "row remapping pending"),
    ("text_h100nvlx2.txt", {"expectedGpuCount": "2"}, "Pass", None),
    ("text_l4.txt", {"expectedGpuCount": "1"}, "Pass", None),
    ("text_rtx4060tix2_persistence_off.txt", {"expectedGpuCount": "2"}, "Pass", None),
    (
        "text_rtx4060tix2_persistence_off.txt",
        {"expectedGpuCount": "2", "requirePersistenceMode": "true"},
        "Fail",
        "persistence mode is Disabled",
    ),
    ("text_a100_remap_pending_fragment.txt", {"expectedGpuCount": "8"}, "Fail", "row remapping pending"),
    ("text_h100_remap_pending_ecc_unknown.txt", {"expectedGpuCount": "8"}, "Fail", "row remapping pending"),
    ("text_sram_uncorrectable_fragment.txt", {"expectedGpuCount": "8"}, "Fail", "1 uncorrectable ECC error(s)"),
    ("text_pending_page_blacklist_fragment.txt", {"expectedGpuCount": "8"}, "Fail", "pending retirement"),
    ("text_k80_396_truncated.txt", {"expectedGpuCount": "1"}, "Inconclusive", "no ECC state"),
    ("text_k80_396_truncated.txt", {"expectedGpuCount": "8"}, "Fail", "1 GPU(s) attached, expected 8"),
    ("err_version_mismatch.txt", {"expectedGpuCount": "8"}, "Fail", "Driver/library version mismatch"),
    ("err_version_mismatch_old.txt", {"expectedGpuCount": "8"}, "Fail", "Driver/library version mismatch"),
    ("err_gpu_lost.txt", {"expectedGpuCount": "8"}, "Fail", "GPU is lost"),
    ("err_device_handle_unknown.txt", {"expectedGpuCount": "8"}, "Fail", "does not answer"),
    ("err_no_devices_vbios.txt", {"expectedGpuCount": "1"}, "Fail", "No devices were found"),
    ("xml_a10g.xml", {"expectedGpuCount": "1"}, "Pass", None),
    ("xml_tesla-t4.xml", {"expectedGpuCount": "1"}, "Pass", None),
    ("xml_rtx-4000-sff-ada-v13.xml", {"expectedGpuCount": "1"}, "Pass", None),
    ("xml_quadro-p400.xml", {"expectedGpuCount": "1"}, "Pass", None),
    ("xml_gtx-1660-ti.xml", {"expectedGpuCount": "1"}, "Pass", None),
    ("xml_a10g.xml", {"expectedGpuCount": "1", "requirePersistenceMode": "true"}, "Fail", "persistence mode"),
    ("xml_a100-sxm4-v12.xml", {"expectedGpuCount": "4"}, "Inconclusive", "4 GPU(s) attached but has 1"),
    ("xml_a100-sxm4-v12.xml", {"expectedGpuCount": "8"}, "Fail", "4 GPU(s) attached, expected 8"),
    ("xml_tesla-t4.xml", {"expectedGpuCount": "one"}, "Inconclusive", "whole number"),
]


@pytest.mark.parametrize(("name", "params", "outcome", "reason"), CASES)
def test_verifier_classifies_real_outputs(name: str, params: dict[str, str], outcome: str, reason: str | None) -> None:
    verdict = inventory.verify_text(fixture(CHECK, name), params)
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


def test_pass_needs_every_gpu_section_evidence() -> None:
    """A report whose XML is cut in the middle of a GPU does not parse: never Pass."""
    text = fixture(CHECK, "xml_tesla-t4.xml")
    cut = text[: len(text) // 2]
    verdict = inventory.verify_text(cut, {"expectedGpuCount": "1"})
    assert verdict.outcome == "Inconclusive"
    assert any("does not parse" in m for m in verdict.missing)


def test_empty_output_is_inconclusive() -> None:
    verdict = inventory.verify_text("", {"expectedGpuCount": "1"})
    assert verdict.outcome == "Inconclusive"


def test_measurements_fit_the_runner_rules() -> None:
    verdict = inventory.verify_text(fixture(CHECK, "text_h100x8.txt"), {"expectedGpuCount": "8"})
    validate_measurements(verdict.measurements)
    assert verdict.measurements["gpus"] == 8
    assert verdict.measurements["driver_version"] == "565.57.01"


def test_verify_command_line_prints_one_json_line_and_exits_with_the_class() -> None:
    for name, params, outcome in (
        ("text_l4.txt", {"expectedGpuCount": "1"}, "Pass"),
        ("err_gpu_lost.txt", {"expectedGpuCount": "1"}, "Fail"),
        ("text_l4.txt", {}, "Inconclusive"),
    ):
        code, line = verify_cli(CHECK, SCRIPT, DATA / CHECK / name, params)
        assert (code, line["outcome"]) == (EXIT[outcome], outcome)
        assert set(line) == {"outcome", "faults", "missing", "measurements"}


def test_run_mode_without_nvidia_smi_is_inconclusive_naming_the_tool(tmp_path: Path) -> None:
    code, line, stderr = run_check(CHECK, SCRIPT, [tool_dir(tmp_path)], {"expectedGpuCount": "1"}, tmp_path)
    assert (code, line["outcome"]) == (3, "Inconclusive")
    assert "nvidia-smi is not on PATH" in line["missing"][0]
    assert "nvidia-smi" in stderr


@pytest.mark.parametrize(
    ("name", "params", "outcome"),
    [
        ("text_l4.txt", {"expectedGpuCount": "1"}, "Pass"),
        ("text_a100x4.txt", {"expectedGpuCount": "4"}, "Fail"),
        ("xml_a100-sxm4-v12.xml", {"expectedGpuCount": "4"}, "Inconclusive"),
    ],
)
def test_run_mode_with_a_stand_in_tool_reaches_the_outputs_class(
    tmp_path: Path, name: str, params: dict[str, str], outcome: str
) -> None:
    bin_dir = tool_dir(tmp_path)
    stand_in(bin_dir, "nvidia-smi", DATA / CHECK / name)
    code, line, _ = run_check(CHECK, SCRIPT, [bin_dir], params, tmp_path)
    assert (code, line["outcome"]) == (EXIT[outcome], outcome)
    assert (tmp_path / "measurements.json").is_file()


def test_run_mode_counts_the_gpus_nvidia_visible_devices_lists(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path)
    stand_in(bin_dir, "nvidia-smi", DATA / CHECK / "text_h100nvlx2.txt")
    visible = {"NVIDIA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb,GPU-cccc"}
    _code, line, _ = run_check(CHECK, SCRIPT, [bin_dir], {}, tmp_path, extra=visible)
    assert line["outcome"] == "Fail"
    assert "2 GPU(s) attached, expected 3" in line["faults"][0]
