"""checks/ib-bandwidth: its verifier on real perftest outputs (tests/data/checks/ib-bandwidth, each
file's first line names its public source; excerpts are cut at their ends only), its ``--verify``
command line, and the script as the runner runs it (ib_write_bw absent; a stand-in printing a
recorded output)."""

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

CHECK, SCRIPT = "ib-bandwidth", "ib_bandwidth.py"
ib = load_check(CHECK, SCRIPT)

CASES = [
    # (fixture, parameters, outcome, a reason that must appear or None)
    ("roce_client_98gbps.txt", {"minGbps": "90"}, "Pass", None),
    ("roce_server_98gbps.txt", {"minGbps": "90"}, "Pass", None),
    ("roce_rdma_cm_server.txt", {"minGbps": "90"}, "Pass", None),
    ("roce_client_98gbps.txt", {"minFractionOfLinkRate": "0.9", "linkRateGbps": "100"}, "Pass", None),
    (
        "roce_client_98gbps.txt",
        {"minFractionOfLinkRate": "0.9", "linkRateGbps": "200"},
        "Fail",
        "below the threshold 180",
    ),
    ("roce_client_98gbps.txt", {"minFractionOfLinkRate": "0.9"}, "Inconclusive", "rate is unknown"),
    ("roce_client_98gbps.txt", {"minGbps": "90", "expectedLinkType": "IB"}, "Fail", "link type Ethernet, expected IB"),
    ("roce_client_98gbps.txt", {"minGbps": "100"}, "Fail", "98.03 Gb/s at 65536 bytes is below"),
    ("roce_client_98gbps.txt", {}, "Inconclusive", "no hardware thresholds"),
    ("roce_send_bw_client.txt", {"minGbps": "50"}, "Pass", None),
    ("roce_post_list_8_bytes.txt", {"minGbps": "0.4"}, "Pass", None),
    ("roce_post_list_8_bytes.txt", {"minGbps": "1"}, "Fail", "0.48 Gb/s"),
    ("roce_mb_per_sec_cut.txt", {"minGbps": "50"}, "Inconclusive", "no result rows"),
    ("server_waiting_one_sided.txt", {"minGbps": "50"}, "Inconclusive", "one side only"),
    ("rdma_cm_server_waiting.txt", {"minGbps": "50"}, "Inconclusive", "no result rows"),
    ("couldnt_connect.txt", {"minGbps": "50"}, "Inconclusive", "out-of-band connection"),
    ("rdma_cm_server_exchange_failed.txt", {"minGbps": "50"}, "Inconclusive", "out-of-band connection"),
    ("no_device_in_pod.txt", {"minGbps": "50"}, "Inconclusive", "no RDMA device"),
    ("no_device_in_pod_indented.txt", {"minGbps": "50"}, "Inconclusive", "no RDMA device"),
    ("completion_error_status_12.txt", {"minGbps": "50"}, "Fail", "work completion failed"),
    ("rdma_cm_qp_rts_failed.txt", {"minGbps": "50"}, "Fail", "cannot be connected through the link"),
    ("ib_fabric_send_bidir_duration_client.txt", {"minGbps": "80", "expectedLinkType": "IB"}, "Pass", None),
    ("ib_fabric_send_bidir_duration_client.txt", {"minGbps": "100"}, "Fail", "95.65 Gb/s at 4096 bytes"),
    (
        "ib_fabric_send_bidir_duration_client.txt",
        {"minGbps": "80", "expectedLinkType": "Ethernet"},
        "Fail",
        "link type IB, expected Ethernet",
    ),
    ("efa_srd_send_bw_mib_per_sec.txt", {"minGbps": "70"}, "Pass", None),
    ("efa_srd_send_bw_mib_per_sec.txt", {"minGbps": "80"}, "Fail", "74.74 Gb/s at 8192 bytes"),
    ("efa_srd_send_bw_mib_per_sec.txt", {"minGbps": "70", "expectedLinkType": "IB"}, "Inconclusive", "LID 0"),
    ("spark_force_link_ib_4qp_client.txt", {"minGbps": "100"}, "Pass", None),
    ("spark_force_link_ib_4qp_client.txt", {"minGbps": "100", "expectedLinkType": "IB"}, "Inconclusive", "LID 0"),
    (
        "spark_force_link_ib_4qp_client.txt",
        {"minGbps": "100", "expectedLinkType": "Ethernet"},
        "Inconclusive",
        "not proven an InfiniBand port",
    ),
]


@pytest.mark.parametrize(("name", "params", "outcome", "reason"), CASES)
def test_verifier_classifies_real_outputs(name: str, params: dict[str, str], outcome: str, reason: str | None) -> None:
    verdict = ib.verify_text(fixture(CHECK, name), params)
    assert verdict.outcome == outcome, (verdict.faults, verdict.missing)
    if reason is None:
        assert verdict.faults == ()
        assert verdict.missing == ()
    else:
        assert any(reason in r for r in verdict.faults + verdict.missing), (verdict.faults, verdict.missing)


def test_link_type_ib_without_a_lid_is_not_proven_either_way() -> None:
    """perftest prints 'Link type : IB' for a port forced to it (--force-link IB on a DGX Spark's
    RoCE port) and for an EFA device; both show LID 0, which no port on an InfiniBand fabric has.
    Before: Pass with expectedLinkType IB, and 'link type IB, expected Ethernet' (a Fail) with
    Ethernet."""
    for name in ("spark_force_link_ib_4qp_client.txt", "efa_srd_send_bw_mib_per_sec.txt"):
        for expected in ("IB", "Ethernet"):
            verdict = ib.verify_text(fixture(CHECK, name), {"minGbps": "70", "expectedLinkType": expected})
            assert verdict.outcome == "Inconclusive", (name, expected, verdict.faults)
            assert verdict.faults == ()
    fabric = ib.verify_text(fixture(CHECK, "ib_fabric_send_bidir_duration_client.txt"), {"minGbps": "80"})
    assert fabric.measurements["link_type"] == "IB"


def test_every_fixture_names_its_source_and_is_covered() -> None:
    covered = {case[0] for case in CASES}
    for path in fixtures(CHECK):
        assert path.read_text(encoding="utf-8").startswith("# source: "), path.name
        assert path.name in covered, f"{path.name} has no case"
    assert len(covered) >= 8


def test_units_are_converted_to_gigabits() -> None:
    """perftest prints Gb/sec with --report_gbits, MiB/s (MB/sec or MiB/sec) otherwise."""
    assert ib._factor("Gb/sec") == 1.0
    assert ib._factor("MB/sec") == pytest.approx(0.008388608)
    assert ib._factor("MiB/sec") == pytest.approx(0.008388608)
    assert ib._factor("GB/sec") is None
    header = fixture(CHECK, "roce_mb_per_sec_cut.txt")
    assert ib.parse(header)[0].unit == "MB/sec"


def test_both_sides_of_one_run_in_one_log_are_each_judged() -> None:
    both = fixture(CHECK, "roce_server_98gbps.txt") + fixture(CHECK, "roce_client_98gbps.txt")
    verdict = ib.verify_text(both, {"minGbps": "90"})
    assert verdict.outcome == "Pass"
    assert verdict.measurements["results"] == 2


def test_a_table_without_its_closing_rule_is_not_a_pass() -> None:
    text = fixture(CHECK, "roce_client_98gbps.txt").rstrip("\n")
    cut = text[: text.rindex("\n")]
    verdict = ib.verify_text(cut, {"minGbps": "90"})
    assert verdict.outcome == "Inconclusive"
    assert any("cut short" in m for m in verdict.missing)


def test_measurements_fit_the_runner_rules() -> None:
    for path in fixtures(CHECK):
        validate_measurements(ib.verify_text(path.read_text(encoding="utf-8"), {"minGbps": "50"}).measurements)


def test_verify_command_line_prints_one_json_line_and_exits_with_the_class() -> None:
    for name, outcome in (
        ("roce_client_98gbps.txt", "Pass"),
        ("completion_error_status_12.txt", "Fail"),
        ("couldnt_connect.txt", "Inconclusive"),
    ):
        code, line = verify_cli(CHECK, SCRIPT, DATA / CHECK / name, {"minGbps": "90"})
        assert (code, line["outcome"]) == (EXIT[outcome], outcome)
        assert set(line) == {"outcome", "faults", "missing", "measurements"}


def test_run_mode_without_ib_write_bw_is_inconclusive_naming_it(tmp_path: Path) -> None:
    code, line, stderr = run_check(
        CHECK, SCRIPT, [tool_dir(tmp_path)], {"minGbps": "90"}, tmp_path, extra={"SIGNAL_RANK": "0"}
    )
    assert (code, line["outcome"]) == (3, "Inconclusive")
    assert "ib_write_bw is not on PATH" in line["missing"][0]
    assert "ib_write_bw" in stderr


def test_run_mode_client_without_a_server_is_inconclusive(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path)
    stand_in(bin_dir, "ib_write_bw", DATA / CHECK / "roce_client_98gbps.txt")
    code, line, _ = run_check(CHECK, SCRIPT, [bin_dir], {"minGbps": "90"}, tmp_path, extra={"SIGNAL_RANK": "1"})
    assert (code, line["outcome"]) == (3, "Inconclusive")
    assert "serverHost is not set" in line["missing"][0]


@pytest.mark.parametrize(
    ("name", "outcome"),
    [
        ("roce_server_98gbps.txt", "Pass"),
        ("completion_error_status_12.txt", "Fail"),
        ("no_device_in_pod.txt", "Inconclusive"),
    ],
)
def test_run_mode_with_a_stand_in_tool_reaches_the_outputs_class(tmp_path: Path, name: str, outcome: str) -> None:
    bin_dir = tool_dir(tmp_path)
    stand_in(bin_dir, "ib_write_bw", DATA / CHECK / name, 0 if outcome == "Pass" else 1)
    code, line, _ = run_check(CHECK, SCRIPT, [bin_dir], {"minGbps": "90"}, tmp_path, extra={"SIGNAL_RANK": "0"})
    assert (code, line["outcome"]) == (EXIT[outcome], outcome)
