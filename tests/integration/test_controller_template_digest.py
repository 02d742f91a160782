"""Issue 42 H-A, on the real API server: the controller submits a Run's Workflow only while the
signal-adapter WorkflowTemplate has the digest it was configured with
(``--workflow-template-digest``, ``$SIGNAL_WORKFLOW_TEMPLATE_DIGEST``). With the installed
template a Run starts; with the template rewritten (here by an admin, whom the
signal-identities policy trusts: anyone else is refused by it, test_attacks_identities.py) the
next Run does not start: it ends Inconclusive (``WorkflowTemplateMismatch``) with a condition and
a Warning Event, and no Workflow of it exists."""

from pathlib import Path

import pytest

from localcluster.cluster import LocalCluster
from localcluster.install import apply_file
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from shared.digests import template_digest
from tests.controller_support import ControllerProcess, World, eventually, profile_body

pytestmark = pytest.mark.timeout(300)
API = keys.API_VERSION


async def test_a_rewritten_workflow_template_starts_no_run(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    (template,) = await apply_file(admin, "adapter-workflowtemplate.yaml", namespace)
    digest = template_digest(template)
    env = {"SIGNAL_WORKFLOW_TEMPLATE_DIGEST": digest}
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0, env=env)
    try:
        await controller.start()
        first, second = f"{namespace}-a", f"{namespace}-b"
        await world.add_nodes(world.node_names(2, "a"), requested_for=first)
        await world.add_profile(profile_body(first, namespace, 2))

        async def phase_of(profile: str) -> Obj | None:
            runs = [r for r in await world.runs() if r["spec"]["profile"]["name"] == profile]
            return runs[0] if runs and (runs[0].get("status") or {}).get("phase") not in (None, "Pending") else None

        try:
            started = await eventually(lambda: phase_of(first), what="the first Run to start")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{controller.logs()}") from None
        assert started["status"]["phase"] == "Running", started["status"]

        path = resource_path(keys.ARGO_API_VERSION, "workflowtemplates", namespace, keys.WORKFLOW_TEMPLATE)
        await admin.merge_patch(path, {"spec": {"podSpecPatch": '{"containers":[{"name":"main","image":"x"}]}'}})
        await world.add_nodes(world.node_names(2, "b"), requested_for=second)
        await world.add_profile(profile_body(second, namespace, 2))
        ended = await eventually(lambda: phase_of(second), timeout=60, what=f"the second Run\n{controller.logs()}")
        status = ended["status"]
        assert status["phase"] == "Inconclusive", status
        assert status["reason"] == "WorkflowTemplateMismatch", status
        assert digest in status["message"]
        name = ended["metadata"]["name"]
        workflows = await admin.get(resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, namespace))
        assert name not in {w["metadata"]["name"] for w in workflows["items"]}
        events = (await admin.get(resource_path("v1", "events", namespace)))["items"]
        assert any(e["reason"] == "WorkflowTemplateMismatch" and e["involvedObject"]["name"] == name for e in events), [
            e["reason"] for e in events
        ]
    finally:
        controller.stop()
        await world.cleanup()
