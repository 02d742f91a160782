"""Attacks on Signal's trust boundaries (issue 12; docs/security.md), each tried against the
real local API server, where RBAC and the ValidatingAdmissionPolicies of deploy/base are
enforced: no identity short of the controller may make a Node look certified.

* Forged Run evidence: a ``<run>-evidence`` document the controller did not derive is not
  adopted; the Run ends Inconclusive (EvidenceNotAdopted, an Event, a metric) and no Node,
  participant or not, is projected Pass.
* Pre-created results and evidence: an identity with the Kubeflow MPI operator's ConfigMap
  rights, or a plain namespace editor, cannot create (nor change, nor delete) anything the
  adapter or the controller reads as evidence; the adapter adopts only this check's own.
* Policies in force: with a binding deleted or bound elsewhere, the adapter and the
  controller refuse to start.
* The controller's Workflows: from its token, only the signal-adapter template's.

Policies are installed per test namespace (localcluster.install.install_policies: a
per-namespace copy of each policy and binding); a policy takes a moment to reach the
admission plugin, so each test waits, with a deadline, until a known-bad request is denied.
"""

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from controller.reconcile import metrics
from controller.reconcile.accept import accept, check_evidence_name, evidence_name
from controller.reconcile.state import Context
from controller.rules.manifests import workflow_manifest
from controller.rules.runview import run_view
from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.install import install_policies
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys, policies
from shared.evidence import CHECK_EVIDENCE_SCHEMA, RESULTS_SCHEMA, decode_document
from tests import evidence_builders as eb
from tests.adapter_support import AdapterWorld, check
from tests.attack_support import (
    ARGO,
    STARTED,
    attackers,
    attempt,
    change_binding,
    configmaps,
    denied_by,
    dry_run,
    evidence_policy_enforced,
    forged,
    node_labels,
    run_evidence_document,
    service_account_client,
    until,
    workflow_policy_enforced,
)
from tests.controller_support import ControllerProcess, install_rbac
from tests.run_builders import running_run, store, workflow_status

pytestmark = pytest.mark.asyncio(loop_scope="session")
API = keys.API_VERSION
PROFILE = "attacks"
FAIL = "#!/bin/sh\necho 'this Node is broken'\nexit 1\n"


# --- 1. forged Run evidence ---------------------------------------------------------------------


@pytest.fixture
async def acceptance(cluster: LocalCluster, namespace: str) -> AsyncIterator[Context]:
    """The controller's acceptance code in this process (as controller/reconcile/accept.py runs it),
    with an admin's client: in this namespace no evidence policy is installed, so the forged
    document can exist, as it could where the policy is missing or for a writer it admits."""
    kube = Kube(identities.admin(cluster.plane).endpoint(), field_manager="signal-controller")
    yield Context(kube, namespace, "attacks-test")
    await kube.close()


def rejected_count() -> float:
    return metrics.REGISTRY.get_sample_value("signal_evidence_rejected_total") or 0.0


@pytest.mark.parametrize("case", ["unowned-claims-a-stranger", "owned-but-not-rederivable"])
async def test_forged_run_evidence_is_not_adopted(
    acceptance: Context, cluster: LocalCluster, admin: KubeClient, namespace: str, case: str
) -> None:
    await install_rbac(admin, namespace)
    nodes = await cluster.add_nodes([SimNode(f"{namespace}-p{i}") for i in range(2)])
    (stranger,) = await cluster.add_nodes([SimNode(f"{namespace}-stranger")])
    run = await running_run(admin, namespace, nodes, PROFILE, started=STARTED)
    name = run["metadata"]["name"]
    # What really happened: every participant failed the check (stored by the adapter's rules).
    failing = eb.check_evidence(run, verdicts={0: "Fail", 1: "Fail"})
    await store(admin, namespace, check_evidence_name(name, 0), eb.config_map("x", failing))
    reported = workflow_status(run, {0: eb.digest_of(failing)})
    passing = {n["metadata"]["name"]: "Pass" for n in nodes}
    if case == "unowned-claims-a-stranger":
        # No owner at all, no check evidence, and a Node that is not a participant.
        claim = run_evidence_document(run, None, {**passing, stranger["metadata"]["name"]: "Pass"}, "Succeeded")
        body = forged(run, evidence_name(name), claim)
        body["metadata"]["ownerReferences"] = []
    else:
        # A controller ownerReference and the real (failing) check evidence embedded, but a
        # decision that does not follow from it.
        claim = run_evidence_document(run, failing, passing, "Succeeded")
        body = forged(run, evidence_name(name), claim, controller=True)
    await admin.create(configmaps(namespace), body)
    before = rejected_count()

    await accept(acceptance, run_view(run), reported, deadline_passed=False)

    done = await admin.get(resource_path(API, keys.RUN_PLURAL, namespace, name))
    status = done["status"]
    assert status["phase"] == "Inconclusive", status
    assert status["reason"] == "EvidenceNotAdopted", status
    assert f"ConfigMap {namespace}/{evidence_name(name)}" in status["message"], status["message"]
    assert "evidence" not in status  # nothing is presented as this Run's evidence
    assert rejected_count() == before + 1
    events = (await admin.get(resource_path("v1", "events", namespace)))["items"]
    assert any(
        e["reason"] == "EvidenceRejected" and e["involvedObject"]["name"] == name and e["type"] == "Warning"
        for e in events
    ), [e["reason"] for e in events]
    label = keys.certified_label(PROFILE)
    for node in nodes:
        live = await admin.get(resource_path("v1", "nodes", name=node["metadata"]["name"]))
        assert node_labels(live).get(label) == "Inconclusive"
    outsider = await admin.get(resource_path("v1", "nodes", name=stranger["metadata"]["name"]))
    assert label not in node_labels(outsider)


async def test_genuine_run_evidence_is_adopted_after_a_crash(
    acceptance: Context, cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    """The control: the controller's own document, found again by a retried acceptance (a
    crash after it was stored, before the Run's status was written), is adopted."""
    await install_rbac(admin, namespace)
    nodes = await cluster.add_nodes([SimNode(f"{namespace}-g{i}") for i in range(2)])
    run = await running_run(admin, namespace, nodes, PROFILE, started=STARTED)
    document = eb.check_evidence(run)
    await store(admin, namespace, check_evidence_name(run["metadata"]["name"], 0), eb.config_map("x", document))
    reported = workflow_status(run, {0: eb.digest_of(document)})
    await accept(acceptance, run_view(run), reported, deadline_passed=False)
    first = (await admin.get(resource_path(API, keys.RUN_PLURAL, namespace, run["metadata"]["name"])))["status"]
    before = rejected_count()
    await accept(acceptance, run_view(run), reported, deadline_passed=False)  # `run` as it was before the first
    again = (await admin.get(resource_path(API, keys.RUN_PLURAL, namespace, run["metadata"]["name"])))["status"]
    assert again["phase"] == first["phase"] == "Succeeded", again
    assert again["evidence"] == first["evidence"]
    assert rejected_count() == before
    # Once the Workflow is gone, the stored check evidence stands in for the reported digests.
    await accept(acceptance, run_view(run), None, deadline_passed=False)
    assert (await admin.get(resource_path(API, keys.RUN_PLURAL, namespace, run["metadata"]["name"])))["status"][
        "phase"
    ] == "Succeeded"


# --- 2. pre-created check results and evidence ------------------------------------------------


async def test_no_other_identity_can_write_evidence_signal_accepts(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = AdapterWorld(cluster, admin, namespace, tmp_path)
    try:
        await install_rbac(admin, namespace)  # the controller's, for its acceptance below
        run = await world.setup(2, {"fail.sh": FAIL}, [check("burn-in", "fail.sh")])  # and the policies
        name = run["metadata"]["name"]
        evidence = eb.check_evidence(
            run, scripts={"fail.sh": FAIL}
        )  # every participant passed (what the attackers claim)
        results = evidence["results"]
        participants = {p["nodeName"]: "Pass" for p in run["spec"]["participants"]}
        attempts = {
            f"{name}-c0-results": forged(run, f"{name}-c0-results", results, check_name="burn-in"),
            f"{name}-c0-evidence": forged(run, f"{name}-c0-evidence", evidence, check_name="burn-in"),
            evidence_name(name): forged(
                run,
                evidence_name(name),
                run_evidence_document(run, evidence, participants, "Succeeded"),
                controller=True,
            ),
            # The same document under a name of no evidence: smuggled past name-based rules.
            f"{name}-c0-copy": forged(run, f"{name}-c0-copy", evidence, check_name="burn-in"),
        }
        admitted, other_refusals = [], []
        async with attackers(cluster, admin, namespace) as clients:
            for who, client in clients.items():
                for cm_name, body in attempts.items():
                    error = await attempt(client.create(configmaps(namespace), body))
                    if error is None:
                        admitted.append(f"{who}: {cm_name}")
                    elif not denied_by(error, policies.EVIDENCE_POLICY):
                        other_refusals.append(f"{who}: {cm_name}: {error}")
        # Whatever got in, the check runs as it would: a real Pod per participant, which fails.
        outcome = await world.adapter(0)
        controller_sa = await identities.service_account(cluster.plane, namespace, "signal-controller", create=False)
        kube = Kube(controller_sa.endpoint(), field_manager="signal-controller")
        try:
            ctx = Context(kube, namespace, "attacks-test")
            digest = outcome.outputs.get("evidence-digest", "")
            await accept(ctx, run_view(run), workflow_status(run, {0: digest}), deadline_passed=False)
        finally:
            await kube.close()
        done = (await admin.get(resource_path(API, keys.RUN_PLURAL, namespace, name)))["status"]
        assert admitted == [], (
            f"created by an identity that is not Signal's: {admitted}; then the adapter reported "
            f"{outcome.verdict} (exit {outcome.code}) and the Run ended {done.get('phase')}"
        )
        assert other_refusals == [], other_refusals
        assert outcome.code == 0, outcome.log
        assert outcome.verdict == "Fail", f"the adapter reported {outcome.verdict}:\n{outcome.log[-2000:]}"
        stored, _ = decode_document(await world.config_map(f"{name}-c0-results"), RESULTS_SCHEMA)
        assert [p["verdict"] for p in stored["participants"]] == ["Fail", "Fail"]
        assert all(w["uid"].startswith("pod-uid-") is False for w in stored["workloads"])  # real Pods
        assert done["phase"] == "Failed", done
        for node in world.nodes:
            live = await admin.get(resource_path("v1", "nodes", name=node))
            assert node_labels(live).get(keys.certified_label("adapter-test")) == "Fail"
    finally:
        await world.cleanup()


async def test_evidence_cannot_be_changed_or_deleted_by_others(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    await install_policies(admin, namespace)
    nodes = await cluster.add_nodes([SimNode(f"{namespace}-e0")])
    run = await running_run(admin, namespace, nodes, PROFILE, started=STARTED)
    name = check_evidence_name(run["metadata"]["name"], 0)
    async with await service_account_client(cluster, namespace, "signal-adapter") as adapter:
        await adapter.create(configmaps(namespace), forged(run, name, eb.check_evidence(run), check_name="check-0"))
    changes: dict[str, Callable[[KubeClient], Awaitable[Obj]]] = {
        "relabel": lambda c: c.merge_patch(
            configmaps(namespace, name), {"metadata": {"labels": {keys.RUN_UID_LABEL: str(uuid.uuid4())}}}
        ),
        "drop-owner": lambda c: c.merge_patch(configmaps(namespace, name), {"metadata": {"ownerReferences": None}}),
        "add-finalizer": lambda c: c.merge_patch(
            configmaps(namespace, name), {"metadata": {"finalizers": ["example.com/keep"]}}
        ),
        "delete": lambda c: c.delete(configmaps(namespace, name)),
        "mark-a-plain-configmap-as-evidence": lambda c: c.merge_patch(
            configmaps(namespace, "plain"), {"metadata": {"labels": {keys.COMPONENT_LABEL: "evidence"}}}
        ),
    }
    await admin.create(configmaps(namespace), {"metadata": {"name": "plain"}, "data": {"a": "b"}})
    admitted, other_refusals = [], []
    async with attackers(cluster, admin, namespace) as clients:
        for who, client in clients.items():
            for what, change in changes.items():
                error = await attempt(change(client))
                if error is None:
                    admitted.append(f"{who}: {what}")
                elif not denied_by(error, policies.EVIDENCE_POLICY):
                    other_refusals.append(f"{who}: {what}: {error}")
    assert admitted == [], f"admitted: {admitted}"
    assert other_refusals == [], other_refusals
    kept = await admin.get(configmaps(namespace, name))
    assert kept["metadata"]["labels"][keys.RUN_UID_LABEL] == run["metadata"]["uid"]
    assert len(kept["metadata"]["ownerReferences"]) == 1
    decode_document(kept, CHECK_EVIDENCE_SCHEMA)


@pytest.mark.parametrize("case", ["another-runs-document", "another-check"])
async def test_the_adapter_adopts_only_its_checks_own_results(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path, case: str
) -> None:
    """Even results written by the adapter's own identity (the only one that may) are adopted
    only if they are this Run's and this check's."""
    world = AdapterWorld(cluster, admin, namespace, tmp_path)
    try:
        run = await world.setup(1, {"fail.sh": FAIL}, [check("burn-in", "fail.sh")])
        name = f"{run['metadata']['name']}-c0-results"
        results = eb.check_evidence(run, scripts={"fail.sh": FAIL})["results"]  # a Pass for every participant
        if case == "another-runs-document":
            # Labels and owner are this Run's (else the garbage collector removes it at once),
            # the document another Run's.
            results["run"]["uid"] = str(uuid.uuid4())
            body = forged(run, name, results, check_name="burn-in")
        else:
            results["check"]["name"] = "inventory"
            body = forged(run, name, results, check_name="inventory")
        async with await service_account_client(cluster, namespace, "signal-adapter") as adapter:
            await adapter.create(configmaps(namespace), body)
        outcome = await world.adapter(0)
        assert outcome.verdict != "Pass", f"adopted forged results:\n{outcome.log[-2000:]}"
        assert outcome.code == 2, outcome.log
        assert f"ConfigMap {namespace}/{name} is not this check's to adopt" in outcome.log, outcome.log
        assert await world.pods() == []
    finally:
        await world.cleanup()


# --- 4. the policies must be in force --------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "how"),
    [
        (policies.EVIDENCE_POLICY, "deleted"),
        (policies.EVIDENCE_POLICY, "bound-elsewhere"),
        (policies.ADAPTER_WORKLOADS_POLICY, "deleted"),
    ],
)
async def test_the_adapter_refuses_to_start_without_its_policies(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path, policy: str, how: str
) -> None:
    world = AdapterWorld(cluster, admin, namespace, tmp_path)
    try:
        run = await world.setup(1, {"fail.sh": FAIL}, [check("burn-in", "fail.sh")])
        await change_binding(admin, policy, namespace, how)
        if policy == policies.EVIDENCE_POLICY:
            await evidence_policy_enforced(admin, namespace, enforced=False)
        else:
            async with await service_account_client(cluster, namespace, "signal-adapter") as adapter:
                probe = {
                    "metadata": {"name": "probe", "namespace": namespace},
                    "spec": {"containers": [{"name": "c", "image": "x.invalid/y:0"}]},
                }

                async def admitted() -> bool:
                    return await attempt(dry_run(adapter, resource_path("v1", "pods", namespace), probe)) is None

                await until(admitted, "the adapter's workload policy to be gone")
        outcome = await world.adapter(0, SIGNAL_POLICY_WAIT_SECONDS="3")
        assert outcome.code == policies.EXIT_POLICY_NOT_IN_FORCE, outcome.log[-3000:]
        assert f"admission policy {policy} is not in force in namespace {namespace}" in outcome.log, outcome.log
        assert await world.pods() == []
        names = [c["metadata"]["name"] for c in (await admin.get(configmaps(namespace)))["items"]]
        assert not [n for n in names if n.startswith(run["metadata"]["name"]) and n.endswith(("results", "evidence"))]
    finally:
        await world.cleanup()


@pytest.mark.parametrize("policy", [policies.CONTROLLER_WORKFLOWS_POLICY, policies.EVIDENCE_POLICY])
async def test_the_controller_refuses_to_start_without_its_policies(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path, policy: str
) -> None:
    await install_rbac(admin, namespace)
    await install_policies(admin, namespace)
    async with await service_account_client(cluster, namespace, "signal-controller") as controller:
        await change_binding(admin, policy, namespace, "deleted")
        if policy == policies.EVIDENCE_POLICY:
            await evidence_policy_enforced(admin, namespace, enforced=False)
        else:
            await workflow_policy_enforced(controller, namespace, enforced=False)
    process = ControllerProcess(cluster, namespace, tmp_path, policies=False)
    try:
        await process.start(SIGNAL_POLICY_WAIT_SECONDS="3")
        code = await process.wait_exit(30)
        assert code == policies.EXIT_POLICY_NOT_IN_FORCE, process.logs()
        assert f"admission policy {policy} is not in force in namespace {namespace}" in process.logs()
        leases = (await admin.get(resource_path("coordination.k8s.io/v1", "leases", namespace)))["items"]
        assert leases == []  # it never even stood for election
    finally:
        process.stop()


# --- 5. the controller can start only Signal's Workflow ----------------------------------------


WORKFLOW_CHANGES: dict[str, Callable[[Obj], Any]] = {
    "inline-template": lambda w: w["spec"].update(
        entrypoint="main", templates=[{"name": "main", "container": {"image": "x.invalid/y:0", "command": ["sh"]}}]
    ),
    "inline-template-instead-of-the-reference": lambda w: (
        w["spec"].pop("workflowTemplateRef"),
        w["spec"].update(entrypoint="main", templates=[{"name": "main", "container": {"image": "x.invalid/y:0"}}]),
    ),
    "pod-spec-patch": lambda w: w["spec"].update(podSpecPatch='{"serviceAccountName": "signal-controller"}'),
    "service-account": lambda w: w["spec"].update(serviceAccountName="signal-controller"),
    "another-template": lambda w: w["spec"]["workflowTemplateRef"].update(name="something-else"),
    "cluster-template": lambda w: w["spec"]["workflowTemplateRef"].update(clusterScope=True),
    "parameter-from-elsewhere": lambda w: w["spec"]["arguments"]["parameters"].append(
        {"name": "run-name", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}
    ),
    "pod-metadata": lambda w: w["spec"].update(podMetadata={"labels": {"app.kubernetes.io/name": "signal-portal"}}),
    "annotation": lambda w: w["metadata"].update(annotations={"workflows.argoproj.io/description": "x"}),
}


async def test_the_controller_can_start_only_signals_workflow(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    await install_rbac(admin, namespace)
    await install_policies(admin, namespace)
    nodes = await cluster.add_nodes([SimNode(f"{namespace}-w0")])
    run = await running_run(admin, namespace, nodes, PROFILE, started=STARTED)
    path = resource_path(ARGO, "workflows", namespace)
    admitted: list[str] = []
    other_refusals: list[str] = []
    async with await service_account_client(cluster, namespace, "signal-controller") as controller:

        async def all_denied() -> bool:
            admitted.clear()
            other_refusals.clear()
            for case, change in WORKFLOW_CHANGES.items():
                workflow = workflow_manifest(run)
                change(workflow)
                error = await attempt(dry_run(controller, path, workflow))
                if error is None:
                    admitted.append(case)
                elif not denied_by(error, policies.CONTROLLER_WORKFLOWS_POLICY):
                    other_refusals.append(f"{case}: {error}")
            return not admitted and not other_refusals

        # (A policy reaches the admission plugin a moment after it is installed.)
        with contextlib.suppress(AssertionError):
            await until(all_denied, "every one of them to be denied")
        # The controller's own Workflow is admitted, and so is its cancellation; a later
        # change of anything else in the spec is not.
        created = await controller.create(path, workflow_manifest(run))
        named = f"{path}/{created['metadata']['name']}"
        sneaked = await attempt(controller.merge_patch(named, {"spec": {"podSpecPatch": "{}"}}))
        await controller.merge_patch(named, {"spec": {"shutdown": "Terminate"}})
    assert admitted == [], f"admitted from the controller's token: {admitted}"
    assert other_refusals == [], other_refusals
    assert sneaked is not None, "the controller added a podSpecPatch to its Workflow"
    assert denied_by(sneaked, policies.CONTROLLER_WORKFLOWS_POLICY), sneaked
    live = await admin.get(named)
    assert live["spec"].get("shutdown") == "Terminate"
    assert "podSpecPatch" not in live["spec"]
    # The policy binds the controller's identity only: an admin (or Argo) is not constrained.
    workflow = workflow_manifest(run)
    workflow["metadata"]["name"] = f"{workflow['metadata']['name']}-admin"
    WORKFLOW_CHANGES["pod-spec-patch"](workflow)
    await dry_run(admin, path, workflow)
