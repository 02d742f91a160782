"""Signal's Helm chart (charts/signal, issue 45 §1) with the real ``helm`` v4 (built from the Go
module proxy by localcluster/helm/build.sh):

* the chart's generated copies (files/deploy.yaml, crds/) match deploy/ and crds/;
* ``helm lint`` passes, and values.schema.json refuses malformed values before anything renders;
* ``helm template`` with default values renders exactly the objects of ``kubectl kustomize
  deploy/``, object by object, and the same settings given as values or as the repository's own
  kustomize overlays (deploy/overlays/local, the RDMA component, images pinned by digest) render
  the same objects;
* on the local API server: ``helm install``, ``helm upgrade`` to changed values (seen on the
  live objects) and ``helm uninstall`` (everything it made is gone).

Each render runs the real kustomize (the local control plane's kubectl) and the real helm."""

import contextlib
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.helmchart import CHART, DEPLOY, drift, helm_binary, kustomize
from localcluster.kube import ApiError, KubeClient, resource_path
from localcluster.rbac import rbac_in_effect
from tests.attack_support import attempt, denied_by
from tests.controller_support import eventually

Obj = dict[str, Any]
DIGEST = "sha256:" + "ab" * 32
Key = tuple[str, str, str, str]


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real helm, with its state (cache, config, data) inside the test's own folder."""
    env = {**os.environ, "HELM_CACHE_HOME": "/nonexistent/cache", "HELM_CONFIG_HOME": "/nonexistent/config"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
        env["HELM_CACHE_HOME"] = str(kubeconfig.parent / "helm-cache")
        env["HELM_CONFIG_HOME"] = str(kubeconfig.parent / "helm-config")
    done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, check=False, env=env)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)} failed (exit {done.returncode}):\n{done.stderr}"
    return done


def template(values: Obj | None = None, *extra: str, tmp_path: Path | None = None) -> list[Obj]:
    """``helm template`` of the chart (CRDs included) with ``values`` as a values file."""
    args = ["template", "signal", str(CHART), "--include-crds", *extra]
    if values:
        assert tmp_path is not None
        path = tmp_path / f"values-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]


def keyed(docs: list[Obj]) -> dict[Key, Obj]:
    found: dict[Key, Obj] = {}
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
        assert key not in found, f"{key} rendered twice"
        found[key] = doc
    return found


def assert_same_objects(chart: list[Obj], kustomized: list[Obj]) -> None:
    """Object by object: the same set of (apiVersion, kind, namespace, name), each equal."""
    ours, theirs = keyed(chart), keyed(kustomized)
    assert sorted(ours) == sorted(theirs), (
        f"only in the chart: {sorted(set(ours) - set(theirs))}; only in kustomize: {sorted(set(theirs) - set(ours))}"
    )
    for key, obj in theirs.items():
        assert ours[key] == obj, f"{key} differs:\nchart: {json.dumps(ours[key], sort_keys=True)}\n" + (
            f"kustomize: {json.dumps(obj, sort_keys=True)}"
        )


def overlay(tmp_path: Path, kustomization: Obj) -> Path:
    """A throwaway kustomize overlay; paths in ``kustomization`` are relative to the repository."""
    folder = tmp_path / f"overlay-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    for field in ("resources", "components"):
        if field in kustomization:
            kustomization[field] = [os.path.relpath(DEPLOY.parent / p, folder) for p in kustomization[field]]
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return folder


def find(docs: list[Obj], kind: str, name: str) -> Obj:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def variables(policy: Obj) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


# --- rendering (no API server) --------------------------------------------------------------


def test_the_charts_copies_of_deploy_and_crds_are_in_sync() -> None:
    assert drift() == [], "run `python -m localcluster.helmchart sync` and commit the result"


def test_helm_lint_passes_with_default_values() -> None:
    done = helm("lint", str(CHART), "--strict")
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_default_values_render_exactly_the_kustomize_base_object_by_object() -> None:
    assert_same_objects(template(), kustomize(DEPLOY))


def test_the_local_overlays_settings_as_values_render_the_same_objects(tmp_path: Path) -> None:
    one_local_replica = {
        "replicas": 1,
        "imagePullPolicy": "Never",
        "podDisruptionBudget": {"minAvailable": None, "maxUnavailable": 1},
    }
    values = {
        "controller": {**one_local_replica, "extraArgs": ["--resync=5"]},
        "portal": one_local_replica,
    }
    assert_same_objects(template(values, tmp_path=tmp_path), kustomize(DEPLOY / "overlays" / "local"))


def test_the_rdma_components_settings_as_values_render_the_same_objects(tmp_path: Path) -> None:
    rdma = overlay(tmp_path, {"resources": ["deploy"], "components": ["deploy/components/rdma"]})
    values = {"policy": {"capabilities": ["IPC_LOCK"]}, "podSecurity": {"enforce": "privileged"}}
    assert_same_objects(template(values, tmp_path=tmp_path), kustomize(rdma))


def test_images_pinned_by_digest_render_the_same_as_a_kustomize_images_overlay(tmp_path: Path) -> None:
    components = ("controller", "portal", "adapter", "runner")
    pinned = overlay(
        tmp_path,
        {
            "resources": ["deploy"],
            "images": [
                {"name": f"projectsignal.dev/{c}", "newName": f"registry.example.com/signal/{c}", "digest": DIGEST}
                for c in components
            ],
        },
    )
    values = {"images": {c: {"repository": f"registry.example.com/signal/{c}", "digest": DIGEST} for c in components}}
    chart = template(values, tmp_path=tmp_path)
    assert_same_objects(chart, kustomize(pinned))
    text = yaml.safe_dump_all(chart)
    assert "projectsignal.dev/controller" not in text
    assert "projectsignal.dev/runner:" not in text


def test_every_operator_setting_reaches_its_object(tmp_path: Path) -> None:
    """What overlays patch today, given as values: each lands where the base's consumers read it."""
    values = {
        "namespace": "gpu-cert",
        "podSecurity": {"enforce": "baseline", "version": "v1.35"},
        "images": {
            "argoExecutor": "quay.example.com/argoproj/argoexec:v4.0.5",
            "checkImages": [f"registry.example.com/gpu/diag@{DIGEST}", f"registry.example.com/gpu/dcgm@{DIGEST}"],
            "pullSecrets": ["my-registry"],
        },
        "policy": {
            "runtimeClasses": ["nvidia"],
            "networks": ["sriov-ib0", "sriov-ib1"],
            "hostNetwork": True,
            "shmSizeLimit": "16Gi",
            "installerNames": ["system:serviceaccount:flux-system:kustomize-controller", "platform-admins"],
            "argoControllers": ["system:serviceaccount:argo-workflows:argo-workflows-controller"],
        },
        "trustedNodes": {
            "label": "node-restriction.kubernetes.io/gpu-cert.trusted",
            "value": "yes",
            "extraSelector": {"pool": "system"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
        },
        "controller": {"replicas": 3, "resources": {"requests": {"cpu": "200m"}, "limits": {"memory": "2Gi"}}},
        # Helm merges maps with the defaults: null drops the default's key.
        "metrics": {
            "scraper": {"namespace": "observability", "podLabels": {"app.kubernetes.io/name": None, "app": "vmagent"}}
        },
        "portal": {"tls": {"certManager": {"enabled": True, "issuerRef": {"name": "internal-ca"}}}},
    }
    docs = template(values, tmp_path=tmp_path)
    namespaced = [d for d in docs if "namespace" in d["metadata"]]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"gpu-cert", "default"}
    namespace = find(docs, "Namespace", "gpu-cert")["metadata"]
    assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert namespace["labels"]["pod-security.kubernetes.io/audit"] == "restricted"
    assert namespace["labels"]["pod-security.kubernetes.io/warn-version"] == "v1.35"
    assert namespace["annotations"]["projectsignal.dev/argo-executor-image"] == values["images"]["argoExecutor"]  # type: ignore[index]
    assert namespace["annotations"]["projectsignal.dev/check-images"] == ",".join(values["images"]["checkImages"])  # type: ignore[index]
    for account in ("default", "signal-controller", "signal-portal", "signal-adapter"):
        assert find(docs, "ServiceAccount", account)["imagePullSecrets"] == [{"name": "my-registry"}]
    for binding in [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
        assert {s["namespace"] for s in binding["subjects"]} == {"gpu-cert"}, binding["metadata"]["name"]
    for binding in [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]:
        selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
        assert selector == {"kubernetes.io/metadata.name": "gpu-cert"}
    adapter = variables(find(docs, "ValidatingAdmissionPolicy", "signal-adapter-workloads"))
    assert (adapter["runtimeClasses"], adapter["networks"]) == ("'nvidia'", "'sriov-ib0,sriov-ib1'")
    assert (adapter["hostNetwork"], adapter["shmSizeLimit"], adapter["capabilities"]) == ("true", "'16Gi'", "''")
    identities = variables(find(docs, "ValidatingAdmissionPolicy", "signal-identities"))
    assert identities["installerNames"] == (
        "['system:serviceaccount:flux-system:kustomize-controller', 'platform-admins']"
    )
    assert identities["argoControllers"] == "['system:serviceaccount:argo-workflows:argo-workflows-controller']"
    assert identities["trustedNodeLabel"] == "'node-restriction.kubernetes.io/gpu-cert.trusted'"
    assert identities["portalCertificateWriters"] == "['system:serviceaccount:cert-manager:cert-manager']"
    workflow = find(docs, "WorkflowTemplate", "signal-adapter")["spec"]
    assert workflow["nodeSelector"] == {"node-restriction.kubernetes.io/gpu-cert.trusted": "yes", "pool": "system"}
    assert workflow["tolerations"] == values["trustedNodes"]["tolerations"]  # type: ignore[index]
    for step in [t["container"] for t in workflow["templates"] if "container" in t]:
        env = {e["name"]: e["value"] for e in step["env"]}
        assert env["SIGNAL_TRUSTED_NODE_SELECTOR"] == "node-restriction.kubernetes.io/gpu-cert.trusted=yes,pool=system"
    controller = find(docs, "Deployment", "signal-controller")["spec"]
    assert controller["replicas"] == 3
    assert controller["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "200m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }
    scraper = find(docs, "NetworkPolicy", "signal-controller-metrics")["spec"]["ingress"][0]["from"][0]
    assert scraper["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "observability"}
    assert scraper["podSelector"]["matchLabels"] == {"app": "vmagent"}
    certificate = find(docs, "Certificate", "signal-portal")
    assert certificate["metadata"]["namespace"] == "gpu-cert"
    assert certificate["spec"]["secretName"] == "signal-portal-tls"
    assert certificate["spec"]["dnsNames"] == ["signal-portal.gpu-cert.svc"]
    assert certificate["spec"]["issuerRef"] == {
        "name": "internal-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        ({"images": {"checkImages": ["registry.example.com/gpu/diag:1"]}}, "checkImages"),
        ({"images": {"runner": {"digest": "sha256:abc"}}}, "digest"),
        ({"trustedNodes": {"label": "gpu.example.com/trusted"}}, "label"),
        ({"trustedNodes": {"tolerations": [{"key": "projectsignal.dev/reserved", "operator": "Exists"}]}}, "key"),
        ({"policy": {"capabilities": ["IPC_LOCK') || true || ('"]}}, "capabilities"),
        ({"policy": {"installerNames": ["x'] + ['system:anonymous"]}}, "installerNames"),
        ({"policy": {"capabilities": ["ALL"]}}, "capabilities"),
        ({"podSecurity": {"enforce": "none"}}, "enforce"),
        ({"controller": {"replicas": 2, "extraReplicas": 1}}, "extraReplicas"),
        ({"portal": {"tls": {"certManager": {"enabled": True}}}}, "issuerRef.name"),
        ({"monitoring": {"prometheusRule": {"enabled": True}}}, "PrometheusRule"),
    ],
    ids=[
        "check-image-by-tag",
        "malformed-digest",
        "kubelet-writable-trusted-label",
        "tolerate-reservation",
        "cel-injection-capability",
        "cel-injection-installer",
        "capability-all",
        "unknown-pod-security-level",
        "unknown-value",
        "cert-manager-without-issuer",
        "monitoring-not-in-chart",
    ],
)
def test_malformed_values_are_refused_before_anything_renders(values: Obj, refusal: str, tmp_path: Path) -> None:
    if refusal == "PrometheusRule" and (DEPLOY / "monitoring").is_dir():
        pytest.skip("deploy/monitoring exists: the chart carries its PrometheusRule")
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = helm("template", "signal", str(CHART), "-f", str(path), check=False)
    assert done.returncode != 0, f"rendered despite {values}"
    assert refusal in done.stderr, done.stderr
    assert done.stdout == ""


def test_the_release_namespace_may_not_be_the_signal_namespace() -> None:
    done = helm("template", "signal", str(CHART), "-n", "signal-system", check=False)
    assert done.returncode != 0
    assert "keep the release record elsewhere" in done.stderr


# --- the real API server --------------------------------------------------------------------


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
