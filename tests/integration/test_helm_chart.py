"""Signal's Helm chart (charts/signal, issue 45 §1) rendered with the real ``helm`` v4 (built from
the Go module proxy by localcluster/helm/build.sh), no API server:

* the chart's generated copies (files/deploy.yaml, crds/) match deploy/ and crds/;
* ``helm lint`` passes, and values.schema.json refuses malformed values before anything renders;
* ``helm template`` with default values renders exactly the objects of ``kubectl kustomize
  deploy/``, object by object, and the same settings given as values or as the repository's own
  kustomize overlays (deploy/overlays/local, the RDMA component, images pinned by digest) render
  the same objects.

On the local API server: tests/integration/test_helm_lifecycle.py."""

import importlib
import shutil
from pathlib import Path

import pytest
import yaml

from localcluster.helmchart import CHART, DEPLOY, drift, kustomize
from tests.helm_support import DIGEST, Obj, assert_same_objects, find, helm, overlay, template, variables

# --- rendering (no API server) --------------------------------------------------------------


def test_the_charts_copies_of_deploy_and_crds_are_in_sync() -> None:
    # hera (imported by the template generator) changes how yaml.SafeDumper writes multi-line
    # strings for the whole process; the generated copy must not depend on it (it did: this
    # test failed after test_deploy_manifests.py, never alone).
    importlib.import_module("adapter.workflow_template")
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
        "requests": {"cpu": "200m", "memory": "256Mi", "ephemeral-storage": "64Mi"},
        "limits": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "256Mi"},
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
    chart = CHART
    if refusal == "PrometheusRule":  # a chart version without monitoring objects
        chart = tmp_path / "signal"
        shutil.copytree(CHART, chart)
        shutil.rmtree(chart / "files" / "monitoring", ignore_errors=True)
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = helm("template", "signal", str(chart), "-f", str(path), check=False)
    assert done.returncode != 0, f"rendered despite {values}"
    assert refusal in done.stderr, done.stderr
    assert done.stdout == ""


def test_the_release_namespace_may_not_be_the_signal_namespace() -> None:
    done = helm("template", "signal", str(CHART), "-n", "signal-system", check=False)
    assert done.returncode != 0
    assert "keep the release record elsewhere" in done.stderr


def test_monitoring_objects_render_only_when_enabled_and_move_with_the_namespace(tmp_path: Path) -> None:
    """files/monitoring/ (copied from deploy/monitoring/ by the sync) as another chart version
    would carry it: each kind renders only behind its toggle, in the Signal namespace."""
    chart = tmp_path / "signal"
    shutil.copytree(CHART, chart)
    shutil.rmtree(chart / "files" / "monitoring", ignore_errors=True)  # only the objects below
    (chart / "files" / "monitoring").mkdir()
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "signal-controller", "namespace": "signal-system"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/component": "controller"}},
            "endpoints": [{"port": "metrics"}],
        },
    }
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "signal"},
        "spec": {},
    }
    (chart / "files" / "monitoring" / "objects.yaml").write_text(yaml.safe_dump_all([monitor, rule]))

    def kinds(*args: str) -> dict[str, Obj]:
        rendered = helm("template", "signal", str(chart), *args).stdout
        return {
            d["kind"]: d
            for d in yaml.safe_load_all(rendered)
            if d and d["kind"] in ("ServiceMonitor", "PrometheusRule")
        }

    assert kinds() == {}
    shown = kinds("--set", "monitoring.serviceMonitor.enabled=true", "--set", "namespace=gpu-cert")
    assert list(shown) == ["ServiceMonitor"]
    assert shown["ServiceMonitor"]["metadata"]["namespace"] == "gpu-cert"
    assert shown["ServiceMonitor"]["spec"] == monitor["spec"]
    assert set(kinds("--set", "monitoring.prometheusRule.enabled=true")) == {"PrometheusRule"}


def test_the_chart_carries_the_monitoring_pack_exactly_behind_its_toggles() -> None:
    """With both toggles on, the chart renders deploy/monitoring's ServiceMonitor and
    PrometheusRule as they are (the pack's own tests prove them against Prometheus)."""
    pack = {
        d["kind"]: d
        for name in ("servicemonitor.yaml", "prometheusrule.yaml")
        for d in yaml.safe_load_all((DEPLOY / "monitoring" / name).read_text())
        if d
    }
    on = ("--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true")
    rendered = {
        d["kind"]: d
        for d in yaml.safe_load_all(helm("template", "signal", str(CHART), *on).stdout)
        if d and d["kind"] in ("ServiceMonitor", "PrometheusRule")
    }
    assert sorted(rendered) == ["PrometheusRule", "ServiceMonitor"]
    for kind, obj in pack.items():
        assert rendered[kind]["spec"] == obj["spec"], kind
        assert rendered[kind]["metadata"]["name"] == obj["metadata"]["name"], kind
