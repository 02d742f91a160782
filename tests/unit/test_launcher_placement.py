"""A crossNode MPI launcher speaks for every participant: it runs where the adapter's step Pods
run, on Nodes an operator marked trusted with a label no kubelet can set (issue 42 H-B)."""

import pytest

from adapter import mpispec
from adapter.main import parser
from adapter.placement import TRUSTED_SELECTOR_ENV, PlacementError, parse_trusted_selector
from adapter.workflow_template import StepPlacement, build_workflow_template
from shared import keys
from tests.unit.signal_builders import make_inputs

TRUSTED = {"node-restriction.kubernetes.io/signal.trusted": "true"}


def launcher_term(trusted: dict[str, str] | None) -> dict[str, object]:
    inputs = make_inputs(2, backend="MPIJob", gpuCount=1, mpi={"scope": "crossNode"})
    (job,) = mpispec.mpijobs(inputs, "img", trusted=trusted)
    spec = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return term


def test_a_crossnode_launcher_runs_only_on_the_trusted_nodes() -> None:
    term = launcher_term(TRUSTED)
    assert term["matchExpressions"] == [
        {"key": keys.CERTIFY_LABEL, "operator": "DoesNotExist"},
        {"key": keys.RESERVED_BY_LABEL, "operator": "DoesNotExist"},
        {"key": "node-restriction.kubernetes.io/signal.trusted", "operator": "In", "values": ["true"]},
    ]
    # Without a selector: any Node not under test, as before.
    assert len(launcher_term(None)["matchExpressions"]) == 2


@pytest.mark.parametrize(
    "text",
    ["pool=system", "node-role.kubernetes.io/control-plane=", "kubernetes.io/hostname=system-1", "nonsense"],
)
def test_a_selector_a_kubelet_could_satisfy_is_refused(text: str) -> None:
    with pytest.raises(PlacementError):
        parse_trusted_selector(text)
    with pytest.raises(ValueError, match=r"node-restriction\.kubernetes\.io/"):
        StepPlacement(node_selector={"pool": "system"})


def test_the_steps_trusted_nodes_are_the_launchers() -> None:
    assert parse_trusted_selector("") == {}
    assert parse_trusted_selector("node-restriction.kubernetes.io/signal.trusted=true") == TRUSTED
    template = build_workflow_template(placement=StepPlacement(node_selector=TRUSTED))
    assert template["spec"]["nodeSelector"] == TRUSTED
    for step in template["spec"]["templates"]:
        if "container" in step:
            env = {e["name"]: e["value"] for e in step["container"]["env"]}
            assert env[TRUSTED_SELECTOR_ENV] == "node-restriction.kubernetes.io/signal.trusted=true"
    args = parser().parse_args(
        ["--run-namespace", "n", "--run-name", "r", "--run-uid", "u", "--participants-json", "[]", "--snapshot", "s"]
    )
    assert args.trusted_node_selector == ""
