"""Acceptance 5: a real ServiceAccount token without a permission gets 403; with it, success.
Named users from the token file authenticate as themselves."""

from kubernetes_asyncio import client

from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import ApiError, KubeClient, resource_path
from tests.controller_support import eventually


async def test_service_account_token_is_denied_then_allowed_by_rbac(
    cluster: LocalCluster, admin: KubeClient, namespace: str
) -> None:
    sa = await identities.service_account(cluster.plane, namespace, "reader")
    cms = resource_path("v1", "configmaps", namespace)
    async with sa.client() as kube:
        try:
            await kube.get(cms)
            raise AssertionError("listing ConfigMaps without a Role must be forbidden")
        except ApiError as exc:
            assert exc.status == 403
            assert f"system:serviceaccount:{namespace}:reader" in exc.message
        rbac = "rbac.authorization.k8s.io/v1"
        await admin.create(
            resource_path(rbac, "roles", namespace),
            {
                "metadata": {"name": "cm-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
            },
        )
        await admin.create(
            resource_path(rbac, "rolebindings", namespace),
            {
                "metadata": {"name": "cm-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "cm-reader",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
            },
        )

        async def listed() -> dict[str, object] | None:
            try:
                return await kube.get(cms)
            except ApiError as exc:
                if exc.status != 403:
                    raise
                return None  # the API server's RBAC cache has not seen the binding yet

        listing = await eventually(listed, timeout=15, what="the RoleBinding to take effect")
        assert listing["kind"] == "ConfigMapList"
        try:
            await kube.create(cms, {"metadata": {"name": "nope"}})
            raise AssertionError("creating ConfigMaps was never granted")
        except ApiError as exc:
            assert exc.status == 403


async def test_named_user_and_kubernetes_asyncio_client(cluster: LocalCluster) -> None:
    alice = identities.user(cluster.plane, "alice")
    async with alice.api_client() as api:
        review = await client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        assert review.status.user_info.username == "alice"
        assert "signal:operators" in review.status.user_info.groups
