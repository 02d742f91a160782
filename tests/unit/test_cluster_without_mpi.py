"""Issue 41, part 3, the pure decisions: which Runs list MPIJobs (shared/run.may_have_mpijobs),
what discovery says (kubeio/discovery.serves), when a profile is held back for a missing MPIJob
API (controller/rules/prerequisites.py), and when and how a failing Run's streak is reported
(controller/reconcile/failing.py). On the real API server: tests/integration/test_without_mpi_operator.py."""

from datetime import UTC, datetime
from typing import Any

import pytest

from controller.reconcile.failing import announce, failing_conditions, failure_message, recovered_conditions
from controller.rules.prerequisites import missing_mpijob_api, mpijob_checks
from controller.rules.runview import run_view
from kubeio.discovery import DiscoveryError, group_version_path, serves
from shared import keys
from shared.profile import CertificationProfile
from shared.run import may_have_mpijobs
from tests.builders import ProfileBuilder, run_manifest

NOW = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
POD = {"name": "a", "backend": "Pod"}
MPI = {"name": "b", "backend": "MPIJob"}


@pytest.mark.parametrize(
    ("checks", "expected"),
    [
        pytest.param([POD], False, id="one Pod check"),
        pytest.param([POD, dict(POD, name="c")], False, id="Pod checks only"),
        pytest.param([], False, id="no checks: nothing can exist"),
        pytest.param([POD, MPI], True, id="an MPIJob check"),
        pytest.param([{"name": "x"}], True, id="no backend: fail closed"),
        pytest.param([{"name": "x", "backend": "pod"}], True, id="another spelling: fail closed"),
        pytest.param(["Pod"], True, id="a check that is not an object: fail closed"),
        pytest.param(None, True, id="no list: fail closed"),
        pytest.param({"backend": "Pod"}, True, id="an object, not a list: fail closed"),
    ],
)
def test_which_runs_may_have_mpijobs(checks: Any, expected: bool) -> None:
    assert may_have_mpijobs(checks) is expected


def test_run_view_carries_it() -> None:
    pods = run_manifest("r")
    assert run_view(pods).may_have_mpijobs is False
    pods["spec"]["checks"].append({**pods["spec"]["checks"][0], "name": "nccl", "backend": "MPIJob"})
    assert run_view(pods).may_have_mpijobs is True


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param({"kind": "APIResourceList", "resources": [{"name": "mpijobs"}]}, True, id="served"),
        pytest.param(
            {"resources": [{"name": "mpijobs/status"}, {"name": "mpijobs"}]}, True, id="served with subresources"
        ),
        pytest.param({"resources": [{"name": "other"}]}, False, id="group served, resource not"),
        pytest.param({"resources": []}, False, id="empty group"),
        pytest.param({"resources": [{"name": "mpijobs/status"}]}, False, id="a subresource alone is not the type"),
    ],
)
def test_discovery_document(document: Any, expected: bool) -> None:
    assert serves(document, keys.MPIJOB_API_VERSION, keys.MPIJOB_PLURAL) is expected


@pytest.mark.parametrize(
    "document",
    [
        pytest.param({}, id="no resources"),
        pytest.param({"resources": None}, id="resources null"),
        pytest.param({"resources": "mpijobs"}, id="resources not a list"),
        pytest.param({"resources": ["mpijobs"]}, id="entries not objects"),
        pytest.param([], id="not an object"),
        pytest.param("", id="a string"),
    ],
)
def test_a_malformed_discovery_document_is_never_read_as_not_served(document: Any) -> None:
    with pytest.raises(DiscoveryError, match="not an APIResourceList"):
        serves(document, keys.MPIJOB_API_VERSION, keys.MPIJOB_PLURAL)


def test_group_version_paths() -> None:
    assert group_version_path("v1") == "/api/v1"
    assert group_version_path(keys.MPIJOB_API_VERSION) == "/apis/kubeflow.org/v2beta1"


def _profile(*backends: str) -> CertificationProfile:
    builder = ProfileBuilder("p").checks([])
    for i, backend in enumerate(backends):
        builder.check(f"c{i}", backend=backend)
    return CertificationProfile.model_validate(builder.build())


@pytest.mark.parametrize(
    ("backends", "served", "held"),
    [
        pytest.param(("Pod",), None, False, id="Pod-only, not asked"),
        pytest.param(("Pod",), False, False, id="Pod-only never held, whatever discovery says"),
        pytest.param(("Pod", "MPIJob"), True, False, id="MPIJob check, served"),
        pytest.param(("Pod", "MPIJob"), False, True, id="MPIJob check, not served: held"),
        pytest.param(("MPIJob", "MPIJob"), False, True, id="two MPIJob checks, not served"),
        pytest.param(("Pod", "MPIJob"), None, False, id="not asked: nothing concluded"),
    ],
)
def test_profile_held_back_for_a_missing_mpijob_api(backends: tuple[str, ...], served: bool | None, held: bool) -> None:
    message = missing_mpijob_api(_profile(*backends), served)
    assert (message is not None) is held
    if message is not None:
        assert keys.MPIJOB_CRD in message
        assert keys.MPIJOB_API_VERSION in message
        for name in mpijob_checks(_profile(*backends)):
            assert name in message
        assert "install the MPI operator" in message


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        (0, False),
        (1, True),
        (2, True),
        (3, False),
        (4, True),
        (5, False),
        (7, False),
        (8, True),
        (64, True),
        (96, False),
    ],
)
def test_failures_announced_at_powers_of_two(failures: int, expected: bool) -> None:
    assert announce(failures) is expected


def test_announcements_grow_with_the_log_of_the_failures() -> None:
    # An hour at the backoff's cap of one a minute, after the ramp: seven reports, not sixty.
    assert sum(announce(n) for n in range(1, 61)) == 6
    assert sum(announce(n) for n in range(1, 1025)) == 11


def test_failing_condition_carries_the_error_and_the_count() -> None:
    kept = {"type": "Released", "status": "False", "reason": "X", "message": "", "lastTransitionTime": "t"}
    written = failing_conditions([kept], 4, "Forbidden", "Forbidden: GET /api/v1/pods: HTTP 403", 3, NOW)
    assert written[0] == kept
    failing = written[-1]
    assert (failing["type"], failing["status"], failing["reason"], failing["observedGeneration"]) == (
        "ReconcileFailing",
        "True",
        "Forbidden",
        3,
    )
    assert "failed 4 times in a row" in failing["message"]
    assert "HTTP 403" in failing["message"]
    assert "failed once" in failure_message(1, "e")


def test_recovery_turns_the_condition_false_once() -> None:
    failing = failing_conditions([], 2, "NotFound", "NotFound: 404", None, NOW)
    cleared = recovered_conditions(failing, None, NOW)
    assert cleared is not None
    assert (cleared[-1]["status"], cleared[-1]["reason"]) == ("False", "Reconciled")
    assert "NotFound" in cleared[-1]["message"]
    assert recovered_conditions(cleared, None, NOW) is None, "already False: nothing to write"
    assert recovered_conditions([], None, NOW) is None, "never failed: nothing to write"
