"""examples/nccl-ib: a log of several Nodes is judged in the world its own lines name (issue 44),
on real logs (tests/data/checks/nccl-ib, each naming its public source on line 1): launcher rank
prefixes ('[0] ', srun's '0: ', OpenMPI's tags), NCCL's 'nRanks N nNodes M' and Init COMPLETE
lines, the 2.4-era 'Ring NN : a -> b via ...' lines, and nccl-tests lines without their '#'."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "checks" / "nccl-ib"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "nccl_ib_allreduce_world", REPO / "examples" / "nccl-ib" / "scripts" / "nccl_ib_allreduce.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("nccl_ib_allreduce_world", module)
    spec.loader.exec_module(module)
    return module


nccl = _load()
SETTINGS = nccl.Settings(threshold_gbps=40.0)


def _verdict(name: str):  # type: ignore[no-untyped-def]
    return nccl.verify_log((DATA / name).read_text(encoding="utf-8"), SETTINGS)


def test_a_rank_prefixed_log_of_three_nodes_is_read_in_its_world_of_24() -> None:
    verdict = _verdict("three_nodes_rank_prefixed.log")
    assert verdict.measurements["world_size"] == 24
    assert not any("a world of 0" in r for r in verdict.reasons), verdict.reasons
    assert verdict.outcome == "Inconclusive"  # cut before the table: no completion summary


def test_init_complete_lines_name_a_world_of_32() -> None:
    verdict = _verdict("four_servers_init_complete.log")
    assert verdict.measurements["world_size"] == 32


def test_old_ring_lines_across_two_nodes_prove_the_socket_fall_back() -> None:
    verdict = _verdict("two_nodes_socket_ring.log")
    assert verdict.measurements["world_size"] == 16
    assert verdict.outcome == "Fail"
    assert any("socket fall-back" in f for f in verdict.faults), verdict.faults


def test_nccl_tests_lines_without_their_hash_are_read() -> None:
    """nccl-tests as built by some images (and pasted by some users) prints its rank list without '#'."""
    text = (REPO / "tests" / "data" / "checks" / "nccl-intranode" / "single_a10g_one_rank.log").read_text(
        encoding="utf-8"
    )
    parsed = nccl.parse_log(text)
    assert sorted(parsed.header_ranks) == [0]
