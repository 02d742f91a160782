"""The configuration of the adapter's admission policy (deploy/base/adapter-admission-policy.yaml)
for a test namespace: the runner image on the Namespace's annotation (as kustomize's ``images:``
sets it), the variables ``capabilities`` and ``hostNetwork`` on the namespace's copy of the
policy, as an operator's overlay sets them (only cluster admins may write either). A changed policy reaches the admission plugin after a moment, so the
change is waited for (a dry-run Pod of the new shape, as the adapter, is admitted)."""

import asyncio
import json

from adapter.workloads import DEFAULT_RUNNER_IMAGE, backend_pod
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.install import configure_runner_image
from localcluster.kube import ApiError, KubeClient, resource_path
from tests.integration.test_deploy_manifests import default_inputs

POLICY = "signal-adapter-workloads"
ADMISSION = "admissionregistration.k8s.io/v1"


async def configure_adapter_workloads(
    cluster: LocalCluster,
    admin: KubeClient,
    namespace: str,
    *,
    runner_image: str = DEFAULT_RUNNER_IMAGE,
    capabilities: str = "",
    host_network: bool = False,
    runtime_classes: str = "",
    networks: str = "",
    shm_size_limit: str = "64Gi",
    probe: dict[str, object] | None = None,
    timeout: float = 60.0,
) -> None:
    """``probe``: the dry-run Pod that proves the new configuration in force (default: one with
    the capabilities and host network configured)."""
    path = resource_path(ADMISSION, "validatingadmissionpolicies", name=f"{POLICY}-{namespace}")
    policy = await admin.get(path)
    await configure_runner_image(admin, namespace, runner_image)
    values = {
        "capabilities": json.dumps(capabilities).replace('"', "'"),
        "hostNetwork": "true" if host_network else "false",
        "runtimeClasses": json.dumps(runtime_classes).replace('"', "'"),
        "networks": json.dumps(networks).replace('"', "'"),
        "shmSizeLimit": json.dumps(shm_size_limit).replace('"', "'"),
    }
    for variable in policy["spec"]["variables"]:
        if variable["name"] in values:
            variable["expression"] = values[variable["name"]]
    await admin.request("PUT", path, body=policy)
    workload: dict[str, object] = {"hostNetwork": host_network}
    if capabilities:
        workload["capabilities"] = [c.strip() for c in capabilities.split(",") if c.strip()]
    pod = probe or backend_pod(default_inputs(namespace, "Pod", **workload), 0, "gpu-0", runner_image)
    sa = await identities.service_account(cluster.plane, namespace, "signal-adapter", create=False)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with sa.client() as adapter:
        while True:
            try:
                await adapter.request(
                    "POST", resource_path("v1", "pods", namespace), body=pod, params={"dryRun": "All"}
                )
                return
            except ApiError as error:
                if loop.time() > deadline:
                    raise AssertionError(
                        f"the adapter policy's new configuration never took effect: {error}"
                    ) from error
            await asyncio.sleep(0.2)
