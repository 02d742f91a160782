"""bench/requestlog.py: the cuts the admission benchmark makes in the controller's request log
(goal 7: a window holds only what it claims to measure) and where goal 1's seconds went."""

import pytest

from bench.requestlog import Request, admission_phases, running_cut
from controller.rules.ledger import LEDGER_NAME

RUN = "/apis/projectsignal.dev/v1alpha1/namespaces/bench/certificationruns"
LEDGER = f"/api/v1/namespaces/bench/configmaps/{LEDGER_NAME}"


def admission(at: float, nodes: int = 3) -> list[Request]:
    """One admission's requests, as the controller sends them, 10 ms apart from ``at``."""
    shape = [
        ("GET", "/api/v1/namespaces/bench/configmaps/scripts"),
        ("GET", LEDGER),
        ("PUT", LEDGER),
        ("POST", RUN),
        ("GET", LEDGER),
        ("POST", "/api/v1/namespaces/bench/configmaps"),
        *(("PATCH", f"/api/v1/nodes/gpu-{i}") for i in range(nodes)),
        ("POST", "/apis/argoproj.io/v1alpha1/namespaces/bench/workflows"),
        ("PATCH", f"{RUN}/bench-a-1/status"),
    ]
    return [Request(at + i * 0.01, verb, path) for i, (verb, path) in enumerate(shape)]


def test_the_running_cut_is_the_status_patch_after_the_workflows_create() -> None:
    before = [Request(0.5, "PATCH", f"{RUN}/old/status")]  # a status PATCH with no Workflow before it
    requests = before + admission(1.0)
    assert running_cut(requests, 0.0) == pytest.approx(1.0 + 10 * 0.01)
    assert running_cut(requests, 0.0, count=2) is None
    assert running_cut(requests, 2.0) is None


def test_the_phases_add_up_to_the_window_and_name_each_step() -> None:
    requests = admission(1.0)
    end = running_cut(requests, 0.9)
    assert end is not None
    phases = admission_phases(requests, 0.9, 0.95, end)
    assert list(phases) == [
        "requester's writes",
        "to the ledger write",
        "to the first Node PATCH",
        "Node PATCHes",
        "Workflow and Run status",
    ]
    assert phases["requester's writes"] == pytest.approx(0.05)
    assert phases["to the ledger write"] == pytest.approx(0.12)  # two reads, 10 ms apart, from 1.0
    assert phases["to the first Node PATCH"] == pytest.approx(0.04)
    assert phases["Node PATCHes"] == pytest.approx(0.02)
    assert phases["Workflow and Run status"] == pytest.approx(0.02)
    steps = [v for k, v in phases.items() if k != "requester's writes"]
    assert sum(steps) == pytest.approx(end - 0.9)


@pytest.mark.parametrize(
    "requests",
    [
        [],
        [r for r in admission(1.0) if r.verb != "PUT"],  # no ledger write: not an admission's window
        [r for r in admission(1.0) if "/nodes/" not in r.path],
    ],
)
def test_a_window_without_an_admission_has_no_phases(requests: list[Request]) -> None:
    assert admission_phases(requests, 0.0, 0.1, 5.0) == {}


def test_requests_outside_the_window_are_not_counted() -> None:
    requests = admission(0.0) + admission(1.0)  # an earlier admission's, before the window
    end = running_cut(requests, 0.95)
    assert end is not None
    phases = admission_phases(requests, 0.95, 1.0, end)
    assert phases["to the ledger write"] == pytest.approx(0.07)
