"""controller/rules/eligibility.py: whether one Node may join a group, and the first reason why
not, in a fixed order of precedence."""

import pytest

from controller.rules.eligibility import ineligibility
from controller.rules.requirements import per_node_requirement
from shared import keys
from shared.profile import CertificationProfile
from tests.builders import ProfileBuilder
from tests.unit.node_builders import NodeBuilder, make_node, make_profile

PROFILE = "p"
BUDGETED = make_profile(
    ProfileBuilder(PROFILE).spec(failureDomainBudget={"topologyKey": "zone", "maxNodesUnderTest": 4})
)
PLAIN = make_profile(PROFILE)
GPU = keys.GPU_RESOURCE
TOLERATE_HINT = "add it to the check's workload.tolerations if the suite may run there"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
TOLERANT = make_profile(ProfileBuilder(PROFILE).edit_check(0, workload={"tolerations": [GPU_TOLERATION]}))
TWO_CHECKS = make_profile(
    ProfileBuilder(PROFILE).edit_check(0, workload={"tolerations": [GPU_TOLERATION]}).check("burn-in", gpuCount=8)
)
REQUIREMENT = per_node_requirement(BUDGETED.spec.checks)

# Every way a Node can be ineligible, in the order of precedence the module documents.
DEFECTS = (
    "not requested",
    "selector",
    "not Ready",
    "reserved",
    "held",
    "cordoned",
    "no zone",
    "gpu taint",
    "short of gpus",
)


def _node(*defects: str) -> NodeBuilder:
    """A Node of profile ``p`` with exactly the given defects (an eligible Node without any)."""
    node = make_node("n1")
    if "not requested" not in defects:
        node.requested(PROFILE)
    node.pool("cpu" if "selector" in defects else "gpu")
    node.ready("not Ready" not in defects)
    if "reserved" in defects:
        node.reserved_by("ru-other", {"run": "other-run", "namespace": "ns", "index": 0})
    if "held" in defects:
        node.signal_taint("ru-half-admitted")
    if "cordoned" in defects:
        node.unschedulable()
    if "no zone" not in defects:
        node.label("zone", "a")
    if "gpu taint" in defects:
        node.taint(GPU, "present")
    node.gpus(4 if "short of gpus" in defects else 8)
    return node


EXPECTED = {
    "not requested": "not requested",
    "selector": "selector does not match",
    "not Ready": "not Ready",
    "reserved": "reserved by Run other-run",
    "held": "held by an admission in progress",
    "cordoned": "cordoned by someone else",
    "no zone": "no zone label for the failure-domain budget",
    "gpu taint": f"taint not tolerated: {GPU}=present:NoSchedule (check inventory); {TOLERATE_HINT}",
    "short of gpus": f"insufficient allocatable: {GPU} 4<8",
}


@pytest.mark.parametrize(
    "first",
    [pytest.param(defect, id=f"with every defect from '{defect}' on, '{defect}' is reported") for defect in DEFECTS],
)
def test_precedence(first: str) -> None:
    defects = DEFECTS[DEFECTS.index(first) :]
    assert ineligibility(_node(*defects).view(), BUDGETED, REQUIREMENT, frozenset()) == EXPECTED[first]


@pytest.mark.parametrize("defect", [pytest.param(defect, id=f"only '{defect}'") for defect in DEFECTS])
def test_each_reason_alone(defect: str) -> None:
    assert ineligibility(_node(defect).view(), BUDGETED, REQUIREMENT, frozenset()) == EXPECTED[defect]


def test_eligible() -> None:
    assert ineligibility(_node().view(), BUDGETED, REQUIREMENT, frozenset()) is None


@pytest.mark.parametrize(
    ("node", "held", "profile", "expected"),
    [
        pytest.param(
            make_node("n1").requested("other").pool("gpu").gpus(8),
            frozenset(),
            PLAIN,
            "not requested",
            id="requested for another profile",
        ),
        pytest.param(
            make_node("n1").requested(PROFILE).gpus(8),
            frozenset(),
            PLAIN,
            "selector does not match",
            id="selector label missing",
        ),
        pytest.param(
            _node().ready("Unknown"),
            frozenset(),
            PLAIN,
            "not Ready",
            id="Ready Unknown",
        ),
        pytest.param(
            _node().reserved_by("ru-bare"),
            frozenset(),
            PLAIN,
            "reserved by Run ru-bare",
            id="reservation label without annotation names the uid",
        ),
        pytest.param(
            _node().reserved_by("ru-bad", "{oops"),
            frozenset(),
            PLAIN,
            "reserved by Run ru-bad",
            id="reservation with malformed annotation is still reserved",
        ),
        pytest.param(
            _node(),
            frozenset({"n1"}),
            PLAIN,
            "held by an admission in progress",
            id="held by a live group in the ledger",
        ),
        pytest.param(
            _node(),
            frozenset({"n2", "n3"}),
            PLAIN,
            None,
            id="ledger holding other Nodes does not matter",
        ),
        pytest.param(
            _node().taint("projectsignal.dev/reserved"),
            frozenset(),
            PLAIN,
            "held by an admission in progress",
            id="Signal taint with an empty value still holds the Node",
        ),
        pytest.param(
            _node().cordon_taint(),
            frozenset(),
            PLAIN,
            "cordoned by someone else",
            id="cordoned by the unschedulable taint",
        ),
        pytest.param(
            _node().taint("ops.example/maintenance", "true", effect="PreferNoSchedule"),
            frozenset(),
            PLAIN,
            None,
            id="a PreferNoSchedule taint does not make the Node ineligible",
        ),
        pytest.param(
            _node().taint("ops.example/maintenance", "true"),
            frozenset(),
            PLAIN,
            f"taint not tolerated: ops.example/maintenance=true:NoSchedule (check inventory); {TOLERATE_HINT}",
            id="a foreign NoSchedule taint the suite does not tolerate is reported",
        ),
        pytest.param(
            _node().taint(GPU, effect="NoSchedule"),
            frozenset(),
            TOLERANT,
            None,
            id="nvidia.com/gpu:NoSchedule tolerated by the check (Exists)",
        ),
        pytest.param(
            _node().taint(GPU, effect="NoExecute"),
            frozenset(),
            TOLERANT,
            f"taint not tolerated: {GPU}:NoExecute (check inventory); {TOLERATE_HINT}",
            id="a toleration covers its own effect only",
        ),
        pytest.param(
            _node().taint(GPU, effect="NoSchedule"),
            frozenset(),
            TWO_CHECKS,
            f"taint not tolerated: {GPU}:NoSchedule (check burn-in); {TOLERATE_HINT}",
            id="every check must tolerate it, not just one",
        ),
        pytest.param(
            _node("no zone"),
            frozenset(),
            PLAIN,
            None,
            id="no topology label is fine without a budget",
        ),
        pytest.param(
            _node().label("zone", ""),
            frozenset(),
            BUDGETED,
            "no zone label for the failure-domain budget",
            id="an empty topology label value counts as missing",
        ),
        pytest.param(
            make_node("n1").requested(PROFILE).pool("gpu").label("zone", "a"),
            frozenset(),
            BUDGETED,
            f"insufficient allocatable: {GPU} 0<8",
            id="no gpus at all",
        ),
        pytest.param(
            _node().resource(GPU, "8", capacity="8").resource(GPU, "7", capacity="8"),
            frozenset(),
            BUDGETED,
            f"insufficient allocatable: {GPU} 7<8",
            id="capacity is enough but allocatable is not",
        ),
        pytest.param(
            _node().gpus(16),
            frozenset(),
            BUDGETED,
            None,
            id="more than required is eligible",
        ),
    ],
)
def test_cases(node: NodeBuilder, held: frozenset[str], profile: CertificationProfile, expected: str | None) -> None:
    assert ineligibility(node.view(), profile, REQUIREMENT, held) == expected


def test_every_shortfall_is_listed() -> None:
    profile = make_profile(
        ProfileBuilder(PROFILE).edit_check(
            0, workload={"cpu": "8", "memory": "1Gi", "extendedResources": {"rdma/ib": 1}}
        )
    )
    node = _node().cpu("4").gpus(2).view()
    reason = ineligibility(node, profile, per_node_requirement(profile.spec.checks), frozenset())
    assert reason == f"insufficient allocatable: cpu 4000<8000, memory 0<{2**30}, {GPU} 2<8, rdma/ib 0<1"


def test_selector_expressions_are_applied() -> None:
    profile = make_profile(
        ProfileBuilder(PROFILE).selector({"matchExpressions": [{"key": "maint", "operator": "DoesNotExist"}]})
    )
    requirement = per_node_requirement(profile.spec.checks)
    assert ineligibility(_node().view(), profile, requirement, frozenset()) is None
    assert (
        ineligibility(_node().label("maint", "1").view(), profile, requirement, frozenset())
        == "selector does not match"
    )
