"""Waiting for RBAC to take effect. The API server's authorizer reads Roles and bindings
through informers, so a process started right after they are applied can still meet a 403;
a SubjectAccessReview goes through the same authorizer, so once it allows what a binding
grants, so will the API server for that identity."""

import asyncio
import time
from collections.abc import Iterable

from localcluster.kube import KubeClient, Obj, resource_path

ROLE_KINDS = {"Role", "ClusterRole"}
BINDING_KINDS = {"RoleBinding", "ClusterRoleBinding"}


def probes(docs: Iterable[Obj]) -> list[Obj]:
    """One SubjectAccessReview spec per (binding, ServiceAccount or User subject): the first
    resource rule of the bound Role, when that Role is among ``docs``. Pure."""
    docs = [d for d in docs if d]
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ROLE_KINDS}
    specs: list[Obj] = []
    for binding in (d for d in docs if d["kind"] in BINDING_KINDS):
        role = roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"])) or {}
        rule = next((r for r in role.get("rules") or [] if r.get("resources")), None)
        if rule is None:  # the Role is elsewhere, or grants only non-resource URLs
            continue
        resource, _, subresource = rule["resources"][0].partition("/")
        attributes = {"verb": rule["verbs"][0], "group": rule["apiGroups"][0], "resource": resource}
        if subresource:
            attributes["subresource"] = subresource
        if rule.get("resourceNames"):
            attributes["name"] = rule["resourceNames"][0]
        if binding["kind"] == "RoleBinding":
            attributes["namespace"] = binding["metadata"]["namespace"]
        for subject in binding.get("subjects") or []:
            if subject["kind"] == "ServiceAccount":
                ns = subject["namespace"]
                user = f"system:serviceaccount:{ns}:{subject['name']}"
                groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
            elif subject["kind"] == "User":
                user, groups = subject["name"], ["system:authenticated"]
            else:
                continue
            specs.append({"user": user, "groups": groups, "resourceAttributes": dict(attributes)})
    return specs


async def rbac_in_effect(admin: KubeClient, docs: Iterable[Obj], timeout: float = 30.0) -> None:
    """Wait until the API server authorizes what each binding in ``docs`` grants."""
    path = resource_path("authorization.k8s.io/v1", "subjectaccessreviews")
    deadline = time.monotonic() + timeout
    for spec in probes(docs):
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        while not (await admin.create(path, review)).get("status", {}).get("allowed"):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"RBAC did not take effect within {timeout:.0f}s: {spec['user']} still may not "
                    f"{spec['resourceAttributes']}; check the applied Roles and bindings"
                )
            await asyncio.sleep(0.1)
