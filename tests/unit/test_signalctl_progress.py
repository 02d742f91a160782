"""signalctl/progress.py: each check of each Run advancing Node by Node (pure parts)."""

from collections.abc import Callable
from typing import Any

import pytest

from shared import keys
from shared.digests import bundle_digest
from signalctl.progress import MPI_ROLE_LABEL, CheckState, Finished, Tracker, check_states, finished_from
from tests import evidence_builders as eb
from tests.run_builders import SCRIPTS

Obj = dict[str, Any]


def run(name: str = "r1", uid: str = "u1", nodes: int = 2) -> Obj:
    return {
        "metadata": {"name": name, "uid": uid},
        "spec": {
            "participants": [{"index": i, "nodeName": f"gpu-00{i + 1}"} for i in range(nodes)],
            "checks": [{"name": "inventory", "backend": "Pod"}, {"name": "allreduce", "backend": "MPIJob"}],
        },
    }


def pod(check: str, phase: str, participant: int | None = None, role: str | None = None, uid: str = "u1") -> Obj:
    labels = {keys.RUN_UID_LABEL: uid, keys.CHECK_LABEL: check}
    if participant is not None:
        labels[keys.PARTICIPANT_LABEL] = str(participant)
    if role:
        labels[MPI_ROLE_LABEL] = role
    return {"metadata": {"labels": labels}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([], (False, 0)),
        ([pod("inventory", "Running", 0), pod("inventory", "Pending", 1)], (True, 0)),
        ([pod("inventory", "Succeeded", 0), pod("inventory", "Running", 1)], (True, 1)),
        ([pod("inventory", "Failed", 0), pod("inventory", "Succeeded", 1)], (True, 2)),
        # another Run's Pods (same check name) do not count
        ([pod("inventory", "Succeeded", 0, uid="other"), pod("inventory", "Succeeded", 1, uid="other")], (False, 0)),
    ],
)
def test_a_pod_check_counts_the_nodes_whose_pod_ended(pods: list[Obj], expected: tuple[bool, int]) -> None:
    state = check_states(run(), pods, {})[0]
    assert (state.started, state.done, state.total) == (*expected, 2)


def test_mpi_workers_never_count_and_a_world_launcher_finishes_every_node() -> None:
    pods = [pod("allreduce", "Succeeded", role="worker"), pod("allreduce", "Running", role="launcher")]
    assert check_states(run(), pods, {})[1].done == 0
    pods[1] = pod("allreduce", "Succeeded", role="launcher")
    assert check_states(run(), pods, {})[1].done == 2


def test_per_node_mpi_launchers_count_their_own_node() -> None:
    pods = [pod("allreduce", "Succeeded", 1, role="launcher"), pod("allreduce", "Running", 0, role="launcher")]
    assert check_states(run(), pods, {})[1].done == 1


def test_evidence_finishes_a_check_with_its_verdicts() -> None:
    finished = Finished("Fail", (("gpu-001", "Pass"), ("gpu-002", "Fail")), "sha256:" + "a" * 64)
    state = check_states(run(), [], {0: finished})[0]
    assert state.done == 2
    assert state.line() == (
        "Run r1: check 1/2 inventory (Pod): Fail [gpu-001 Pass, gpu-002 Fail] evidence sha256:aaaaaaaaaaaa..."
    )


def test_the_tracker_prints_each_change_once_and_not_the_waiting() -> None:
    tracker = Tracker()
    assert tracker.changes(check_states(run(), [], {})) == []
    running = check_states(run(), [pod("inventory", "Running", 0)], {})
    assert tracker.changes(running) == ["Run r1: check 1/2 inventory (Pod): 0/2 Nodes done"]
    assert tracker.changes(running) == []
    one = check_states(run(), [pod("inventory", "Succeeded", 0), pod("inventory", "Running", 1)], {})
    assert tracker.changes(one) == ["Run r1: check 1/2 inventory (Pod): 1/2 Nodes done"]


def test_a_line_names_the_run_the_check_and_the_nodes() -> None:
    state = CheckState("r", 1, 3, "burn-in", "Pod", total=4, done=3, started=True)
    assert state.line() == "Run r: check 2/3 burn-in (Pod): 3/4 Nodes done"


def test_a_check_first_seen_finished_shows_its_nodes_done_before_its_verdict() -> None:
    finished = Finished("Pass", (("gpu-001", "Pass"), ("gpu-002", "Pass")), "sha256:" + "b" * 64)
    tracker = Tracker()
    assert tracker.changes(check_states(run(), [], {})) == []  # waiting: no line
    assert tracker.changes(check_states(run(), [], {0: finished})) == [
        "Run r1: check 1/2 inventory (Pod): 2/2 Nodes done",
        "Run r1: check 1/2 inventory (Pod): Pass [gpu-001 Pass, gpu-002 Pass] evidence sha256:bbbbbbbbbbbb...",
    ]
    assert tracker.changes(check_states(run(), [], {0: finished})) == []


def test_a_check_seen_running_gets_no_second_nodes_done_line_at_its_verdict() -> None:
    finished = Finished("Pass", (("gpu-001", "Pass"), ("gpu-002", "Pass")), "sha256:" + "b" * 64)
    tracker = Tracker()
    assert tracker.changes(check_states(run(), [pod("inventory", "Running", 0)], {})) == [
        "Run r1: check 1/2 inventory (Pod): 0/2 Nodes done"
    ]
    assert tracker.changes(check_states(run(), [], {0: finished})) == [
        "Run r1: check 1/2 inventory (Pod): Pass [gpu-001 Pass, gpu-002 Pass] evidence sha256:bbbbbbbbbbbb..."
    ]


# -- a check's verdict from its evidence: re-validated, never the adapter's word -------------------


def evidence_run() -> Obj:
    return {
        "metadata": {"name": "r1", "namespace": "ns", "uid": "u1"},
        "spec": {
            "checks": [{"name": "inventory", "scriptKey": "s.sh", "backend": "Pod", "backendActiveDeadline": "1m"}],
            "source": {"digest": bundle_digest(SCRIPTS, {})},
            "participants": [{"index": i, "nodeName": f"gpu-00{i + 1}", "nodeUID": f"uid-{i}"} for i in range(2)],
        },
    }


def test_valid_evidence_gives_its_verdicts() -> None:
    run = evidence_run()
    document = eb.check_evidence(run, 0, verdicts={1: "Fail"})
    finished = finished_from(run, 0, eb.config_map("r1-c0-evidence", document))
    assert (finished.verdict, finished.participants) == ("Fail", (("gpu-001", "Pass"), ("gpu-002", "Fail")))
    assert finished.digest == eb.digest_of(document)


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda d: d.pop("results"), id="no-results"),
        pytest.param(lambda d: d["results"].update(participants=[["gpu-001", "Pass"]]), id="participants-not-objects"),
        pytest.param(lambda d: d["results"]["participants"][0].pop("nodeName"), id="participant-without-node"),
        pytest.param(lambda d: d["results"].update(participants="gpu-001"), id="participants-a-string"),
    ],
)
def test_malformed_evidence_is_inconclusive_not_a_crash(mutate: Callable[[Obj], object]) -> None:
    """The adapter's identity writes the check evidence: a canonical document of the right schema
    but the wrong shape made `signalctl request --wait` (and the demo) end in a traceback."""
    run = evidence_run()
    document = eb.check_evidence(run, 0)
    mutate(document)
    finished = finished_from(run, 0, eb.config_map("r1-c0-evidence", document, owner=run))
    assert finished.verdict == "Inconclusive"
    assert finished.participants == (("gpu-001", "Inconclusive"), ("gpu-002", "Inconclusive"))


def test_a_forged_pass_is_not_shown_as_pass() -> None:
    """The document's own verdict says Pass while its participants' results were changed after
    sealing (its results digest no longer matches): progress showed Pass, the controller then
    ends the Run Inconclusive."""
    run = evidence_run()
    document = eb.check_evidence(run, 0)
    document["results"]["participants"][0]["exitCode"] = 3
    finished = finished_from(run, 0, eb.config_map("r1-c0-evidence", document))
    assert finished.verdict == "Inconclusive"
    assert "DigestMismatch" in (finished.problem or "")
