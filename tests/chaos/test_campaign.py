"""The short fault campaign (issue 14): one seed, about 50 faults of every kind, on a local
cluster of its own with real Argo and two controller replicas; the history must show no
violated invariant at any point. The long campaign is ``python -m tests.chaos.campaign
--seeds 1-10`` (README)."""

import gc
from pathlib import Path

import pytest

from tests.chaos.campaign import run_seed
from tests.chaos.faults import KINDS

SEED = 1
FAULTS = 52


@pytest.mark.timeout(1500)
async def test_short_campaign_violates_no_invariant(tmp_path: Path) -> None:
    report = await run_seed(SEED, FAULTS, 180.0, tmp_path)
    # Warnings are errors here as everywhere: a socket the harness's clients leave to the garbage
    # collector fails this test (collected now, so it is found in this test and not a later one).
    # The one seen before (a request cancelled mid-TLS-handshake) is closed by localcluster/kube.py
    # since issue 46 (tests/unit/test_local_kube_cancel.py).
    gc.collect()
    print("\n".join(report.lines()))
    assert not report.violations, "\n".join(report.lines())
    injected = sum(report.faults.values())
    assert injected >= 30, report.lines()  # a fault with no target at its moment is not injected
    assert len(report.faults) >= len(KINDS) - 3, f"kinds injected: {sorted(report.faults)}"
    assert sum(report.runs.values()) >= 6, report.runs
    assert report.tally is not None
    assert report.tally.records == report.records
