"""Signal's Helm chart on the local API server with the real ``helm`` v4: ``helm install``,
``helm upgrade`` to changed values (seen on the live objects) and ``helm uninstall``
(everything it made is gone); the chart's cert-manager setting on the real admission policy;
a Run in flight that finishes correctly across a ``helm upgrade``."""

import contextlib
import json
import uuid
from pathlib import Path

import yaml

from localcluster import identities
from localcluster.argoworkflows import EXECUTOR_IMAGE
from localcluster.cluster import LocalCluster
from localcluster.helmchart import CHART
from localcluster.kube import ApiError, KubeClient, resource_path
from localcluster.rbac import rbac_in_effect
from shared import keys
from shared.digests import bundle_digest
from tests.attack_support import attempt, denied_by
from tests.controller_support import ControllerProcess, World, eventually, profile_body
from tests.helm_support import DIGEST, Obj, helm, template, variables


async def live(cluster: LocalCluster, doc: Obj) -> Obj | None:
    plural = {
        "Namespace": "namespaces",
        "Deployment": "deployments",
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    }
    namespace = doc["metadata"].get("namespace")
    path = resource_path(doc["apiVersion"], plural[doc["kind"]], namespace, doc["metadata"]["name"])
    try:
        return await cluster.admin.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def test_helm_install_upgrade_to_changed_values_and_uninstall(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """The release record lives in the test's namespace; the chart creates its own Signal
    namespace, with a suffix on cluster-scoped names so that the session's other tests are
    untouched. No replicas: this proves what Helm writes, not the Pods (images are not built here)."""
    kubeconfig = tmp_path / "admin.kubeconfig"
    kubeconfig.write_text(cluster.plane.admin_kubeconfig.read_text())
    signal = f"sig-{uuid.uuid4().hex[:8]}"
    base = {
        "namespace": signal,
        "clusterNameSuffix": f"-{signal}",
        "controller": {"replicas": 0},
        "portal": {"replicas": 0},
    }
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(yaml.safe_dump(base))
    changed = {
        **base,
        "podSecurity": {"enforce": "privileged"},
        "policy": {"capabilities": ["IPC_LOCK"]},
        "images": {"runner": {"repository": "registry.example.com/signal/runner", "digest": DIGEST}},
    }
    second.write_text(yaml.safe_dump(changed))
    release = f"signal-{signal}"
    common = ["-n", namespace, "--kubeconfig", str(kubeconfig)]
    ns_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": signal}}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"signal-adapter-workloads-{signal}"},
    }
    controller = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "signal-controller", "namespace": signal},
    }
    installed = False
    try:
        helm("install", release, str(CHART), "-f", str(first), *common, kubeconfig=kubeconfig)
        installed = True
        live_ns = await live(cluster, ns_obj)
        assert live_ns is not None
        assert live_ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        assert live_ns["metadata"]["annotations"]["projectsignal.dev/runner-image"] == "projectsignal.dev/runner:0.1.0"
        live_policy = await live(cluster, policy)
        assert live_policy is not None
        assert variables(live_policy)["capabilities"] == "''"
        live_controller = await live(cluster, controller)
        assert live_controller is not None
        assert live_controller["spec"]["replicas"] == 0

        helm("upgrade", release, str(CHART), "-f", str(second), *common, kubeconfig=kubeconfig)
        live_ns = await live(cluster, ns_obj)
        assert live_ns is not None
        assert live_ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
        assert live_ns["metadata"]["annotations"]["projectsignal.dev/runner-image"] == (
            f"registry.example.com/signal/runner@{DIGEST}"
        )
        live_policy = await live(cluster, policy)
        assert live_policy is not None
        assert variables(live_policy)["capabilities"] == "'IPC_LOCK'"
        history = json.loads(helm("history", release, "-o", "json", *common, kubeconfig=kubeconfig).stdout)
        assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "deployed")]

        helm("uninstall", release, "--wait", *common, kubeconfig=kubeconfig)
        installed = False
        assert await live(cluster, policy) is None

        async def namespace_going() -> bool:
            found = await live(cluster, ns_obj)
            return found is None or "deletionTimestamp" in found["metadata"]

        await eventually(namespace_going, what=f"namespace {signal} deleted by helm uninstall")
    finally:
        if installed:
            helm("uninstall", release, *common, kubeconfig=kubeconfig, check=False)


async def test_cert_managers_identity_may_write_the_portal_certificate_and_nothing_else(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """portal.tls.certManager names cert-manager's identity in signal-identities'
    portalCertificateWriters: it may write the Secret signal-portal-tls (as issuing it needs),
    and is refused the controller's ledger like anyone else; an identity not named stays
    refused the Secret. (The chart's policy, applied for the test's namespace.) Before the
    variable, the policy refused cert-manager the Secret: the Certificate the docs suggested
    could never be issued unless cert-manager was made an installer (trusted with everything)."""
    writer = f"system:serviceaccount:{namespace}:cert-manager"
    suffix = f"-{namespace}"
    values = {
        "namespace": namespace,
        "clusterNameSuffix": suffix,
        "portal": {"tls": {"certManager": {"enabled": True, "issuerRef": {"name": "ca"}, "writer": writer}}},
    }
    docs = template(values, tmp_path=tmp_path)
    policy = [
        d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy") and "identities" in d["metadata"]["name"]
    ]
    assert variables(policy[0])["portalCertificateWriters"] == f"['{writer}']"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "tls-writer", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["create"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tls-writer", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tls-writer"},
        "subjects": [
            {"kind": "ServiceAccount", "name": account, "namespace": namespace} for account in ("cert-manager", "other")
        ],
    }
    paths = {
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    }
    applied = []
    try:
        for doc in [*policy, role, binding]:
            kind = doc["kind"]
            scope = None if kind in paths else namespace
            path = resource_path(doc["apiVersion"], paths.get(kind, kind.lower() + "s"), scope, doc["metadata"]["name"])
            await admin.apply(
                path, {**doc, "metadata": {k: v for k, v in doc["metadata"].items() if k != "namespace" or scope}}
            )
            applied.append(path)
        await rbac_in_effect(admin, [binding])
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": "signal-portal-tls"},
            "data": {"tls.crt": "", "tls.key": ""},
        }
        ledger = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "signal-admission-ledger"}}
        secrets, configmaps = resource_path("v1", "secrets", namespace), resource_path("v1", "configmaps", namespace)
        identities_policy = f"signal-identities{suffix}"
        async with (
            (await identities.service_account(cluster.plane, namespace, "cert-manager")).client() as cert_manager,
            (await identities.service_account(cluster.plane, namespace, "other")).client() as other,
        ):

            async def other_refused() -> bool:
                error = await attempt(other.request("POST", secrets, body=secret, params={"dryRun": "All"}))
                return error is not None and denied_by(error, "signal-identities")

            await eventually(other_refused, what=f"{identities_policy} in force in {namespace}")
            assert await attempt(cert_manager.request("POST", secrets, body=secret, params={"dryRun": "All"})) is None
            error = await attempt(cert_manager.request("POST", configmaps, body=ledger, params={"dryRun": "All"}))
            assert error is not None
            assert denied_by(error, "signal-identities"), error.message
    finally:
        for path in applied:
            with contextlib.suppress(ApiError):
                await admin.delete(path)


SCRIPTS = {
    # Long enough that the upgrade below lands while this check runs.
    "slow.sh": '#!/bin/sh\necho "gpus on $SIGNAL_NODE_NAME"\nsleep 20\nprintf \'{"gpus": 8}\' > "$SIGNAL_MEASUREMENTS_FILE"\n',
    "nccl.sh": '#!/bin/sh\necho "rank $SIGNAL_RANK of $SIGNAL_WORLD_SIZE"\n',
}


async def test_a_run_in_flight_finishes_correctly_across_a_helm_upgrade(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Signal installed by Helm into the test's namespace (the chart adopts the namespace the
    fixture made: --take-ownership; no replicas: the controller runs as a process with the
    chart's ServiceAccount, RBAC and policies). While a Run's first check runs, ``helm upgrade``
    changes values that leave the WorkflowTemplate and the runner image alone (a policy
    variable, the controller's resources): the Run goes on and Succeeds with both checks Pass.
    (An upgrade that changes the template ends running Workflows under Argo's
    templateReferencing: Secure: docs/upgrade.md.)"""
    kubeconfig = tmp_path / "admin.kubeconfig"
    kubeconfig.write_text(cluster.plane.admin_kubeconfig.read_text())
    world = World(cluster, admin, namespace)
    release = f"signal-{namespace}"
    common = ["-n", "default", "--kubeconfig", str(kubeconfig)]
    values = {
        "namespace": namespace,
        "clusterNameSuffix": f"-{namespace}",
        "controller": {"replicas": 0},
        "portal": {"replicas": 0},
        # The test namespace's Pods (Argo's step Pods on the local cluster) are not all
        # restricted-compliant; Pod Security is not what this test is about.
        "podSecurity": {"enforce": "privileged"},
        "images": {"argoExecutor": EXECUTOR_IMAGE},
    }
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(yaml.safe_dump(values))
    second.write_text(
        yaml.safe_dump(
            {
                **values,
                "policy": {"runtimeClasses": ["nvidia"]},
                "controller": {"replicas": 0, "resources": {"limits": {"memory": "2Gi"}}},
            }
        )
    )
    helm("install", release, str(CHART), "-f", str(first), "--take-ownership", *common, kubeconfig=kubeconfig)
    controller = None
    try:
        scripts = {"metadata": {"name": "scripts"}, "data": SCRIPTS, "immutable": True}
        await admin.create(resource_path("v1", "configmaps", namespace), scripts)
        profile = f"{namespace}-helm"
        names = world.node_names(2)
        await world.add_nodes(names, requested_for=profile)
        checks = [
            {
                "name": "inventory",
                "scriptKey": "slow.sh",
                "backend": "Pod",
                "gpuCount": 1,
                "backendActiveDeadline": "90s",
            },
            {"name": "nccl", "scriptKey": "nccl.sh", "backend": "Pod", "gpuCount": 1, "backendActiveDeadline": "90s"},
        ]
        await world.add_profile(profile_body(profile, namespace, 2, digest=bundle_digest(SCRIPTS, {}), checks=checks))
        controller = ControllerProcess(
            cluster, namespace, tmp_path, resync=2.0, workflow_instance_id=cluster.workflow_instance_id, policies=False
        )
        await controller.start()

        async def first_check_running() -> Obj | None:
            pods = await admin.get(resource_path("v1", "pods", namespace), labelSelector=keys.RUN_UID_LABEL)
            running = [p for p in pods["items"] if (p.get("status") or {}).get("phase") == "Running"]
            return running[0] if running else None

        await eventually(
            first_check_running, timeout=180, interval=1.0, what=f"a running backend Pod\n{controller.logs()}"
        )
        helm("upgrade", release, str(CHART), "-f", str(second), *common, kubeconfig=kubeconfig)
        (run,) = await world.runs()
        assert run["status"]["phase"] == "Running", "the upgrade must land while the Run is in flight"
        policy = await admin.get(
            resource_path(
                "admissionregistration.k8s.io/v1",
                "validatingadmissionpolicies",
                name=f"signal-adapter-workloads-{namespace}",
            )
        )
        assert variables(policy)["runtimeClasses"] == "'nvidia'"

        async def finished() -> Obj | None:
            (current,) = await world.runs()
            return current if current["status"].get("phase") in {"Succeeded", "Failed", "Inconclusive"} else None

        done = await eventually(finished, timeout=240, interval=1.0, what=f"the Run to finish\n{controller.logs()}")
        assert done["status"]["phase"] == "Succeeded", (done["status"], controller.logs())
        assert done["status"]["checkVerdicts"] == [
            {"name": "inventory", "verdict": "Pass"},
            {"name": "nccl", "verdict": "Pass"},
        ]
    finally:
        if controller is not None:
            controller.stop()
        await world.cleanup()
        helm("uninstall", release, *common, kubeconfig=kubeconfig, check=False)
