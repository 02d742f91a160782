"""Issue 43, item 6: the inventory of keys Signal writes on Nodes (shared/nodekeys.py) is the
one ``signalctl uninstall --clean-nodes`` removes and docs/reference.md lists, and it matches
the code: every key constant is classified (a new one fails here until it is), every key the
Node writers produce is in it, and a Node carrying all of them is clean after the plan
(signalctl/cleannodes.py), with an operator's own keys left alone."""

import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

import controller
from controller.rules.manifests import release_patch, reservation_patch
from controller.rules.projection import node_condition, projection_patch, reassert_patches, stale_condition
from shared import certified, keys
from shared.nodekeys import NODE_KEYS, node_key
from signalctl.cleannodes import plan_node

Obj = dict[str, Any]
REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
NOT_ON_NODES = {
    keys.API_VERSION: "API version",
    keys.ARGO_API_VERSION: "API version",
    keys.MPIJOB_API_VERSION: "API version",
    keys.RUN_NAME_LABEL: "on Signal's own objects (Workflows, Pods, ConfigMaps)",
    keys.RUN_UID_LABEL: "on Signal's own objects",
    keys.PROFILE_LABEL: "on Runs",
    keys.CHECK_LABEL: "on backend workloads",
    keys.PARTICIPANT_LABEL: "on backend workloads",
    keys.COMPONENT_LABEL: "on Signal's own objects",
    "projectsignal.dev/group-hash": "on Runs (controller/rules/manifests.py GROUP_HASH_LABEL)",
    keys.GPU_RESOURCE: "a resource name, read only",
    keys.ZONE_LABEL: "Kubernetes' topology label, read only",
    keys.RACK_LABEL: "the simulated fleet's (localcluster), never written on a real cluster",
    keys.ARGO_INSTANCE_LABEL: "on Workflows",
    keys.DEFAULT_RUNNER_IMAGE: "an image",
    keys.RUNNER_IMAGE_ANNOTATION: "on the Signal Namespace",
    keys.ADAPTER_IMAGE_ANNOTATION: "on the Signal Namespace",
    keys.EXECUTOR_IMAGE_ANNOTATION: "on the Signal Namespace",
    keys.NODE_RESTRICTION_PREFIX: "a prefix (the keys under it are listed)",
    keys.MPI_HOSTFILE: "a path",
    keys.RUNNER_HOME: "a path",
    keys.RUNNER_SSH_DIR: "a path",
    keys.CERTIFIED_LABEL_PREFIX: "listed as a prefix",
    certified.TRUSTED_LABEL_PREFIX: "a prefix (the keys under it are listed)",
    keys.FAILED_CONDITION_PREFIX: "listed as a prefix",
    keys.MULTUS_NETWORKS_ANNOTATION: "on backend Pods (Multus), never on Nodes",
    keys.CHECK_IMAGES_ANNOTATION: "on the Signal Namespace",
}
KEYISH = re.compile(r"^([a-z0-9.-]+/)?[A-Za-z0-9._-]+$")


def _constants() -> dict[str, str]:
    """Every string constant of shared.keys, shared.certified and the controller's modules that
    names a key under a domain (``something/name``), by where it is defined."""
    found: dict[str, str] = {}
    modules = [keys, certified]
    modules += [
        importlib.import_module(m.name)
        for m in pkgutil.walk_packages(controller.__path__, "controller.")
        if not m.ispkg
    ]
    for module in modules:
        for name, value in vars(module).items():
            if not (name.isupper() and isinstance(value, str) and "/" in value and KEYISH.match(value.rstrip("/"))):
                continue
            if value.startswith(("projectsignal.dev", "certified.", "node-restriction.")) or module is keys:
                found[f"{module.__name__}.{name}"] = value
    return found


def _in_inventory(value: str) -> bool:
    return any(k.key == value or (k.prefix and value.startswith(k.key)) for k in NODE_KEYS)


def test_every_key_constant_is_classified() -> None:
    unclassified = {
        where: value for where, value in _constants().items() if not _in_inventory(value) and value not in NOT_ON_NODES
    }
    assert not unclassified, (
        "a key constant is neither in shared/nodekeys.py (written on Nodes: uninstall removes it, "
        f"docs/reference.md lists it) nor in NOT_ON_NODES here: {unclassified}"
    )


def node(**meta: Any) -> Obj:
    return {
        "metadata": {
            "name": "gpu-1",
            "uid": "node-uid",
            "resourceVersion": "7",
            "labels": {},
            "annotations": {},
            **meta,
        },
        "spec": {},
        "status": {"conditions": []},
    }


RUN = {"metadata": {"name": "r", "namespace": "signal-system", "uid": "run-uid"}}
DETAIL = {
    "run": "r",
    "namespace": "signal-system",
    "runUID": "run-uid",
    "verdict": "Pass",
    "completionTime": "2026-12-07T06:00:00Z",
    "evidenceDigest": "sha256:" + "0" * 64,
    "runCreated": "2026-12-07T05:00:00Z",
}


def written(patches: list[Obj | None]) -> set[tuple[str, str]]:
    """(where, key) of every key the patches set (a value other than null)."""
    out: set[tuple[str, str]] = set()
    for patch in patches:
        if patch is None:
            continue
        meta = patch.get("metadata") or {}
        out |= {("label", k) for k, v in (meta.get("labels") or {}).items() if v is not None}
        out |= {("annotation", k) for k, v in (meta.get("annotations") or {}).items() if v is not None}
        out |= {("taint", t["key"]) for t in (patch.get("spec") or {}).get("taints") or []}
        out |= {
            ("condition", c["type"]) for c in (patch.get("status") or {}).get("conditions") or [] if "$patch" not in c
        }
    return out


def every_write() -> set[tuple[str, str]]:
    requested = node(labels={keys.CERTIFY_LABEL: "gpu-basic"}, annotations={keys.ATTEMPT_ANNOTATION: "gpu-basic:2"})
    reserved = reservation_patch(requested, RUN, 0)
    held = node(labels={keys.RESERVED_BY_LABEL: "run-uid"}, annotations=reserved["metadata"]["annotations"])
    held["spec"] = reserved["spec"]
    patches: list[Obj | None] = [
        reserved,
        release_patch(held, "run-uid", restore_request="gpu-basic", next_attempt=3),
        projection_patch(node(), "gpu-basic", DETAIL),
        {"status": {"conditions": [node_condition("gpu-basic", DETAIL), stale_condition("gpu-basic", DETAIL, "why")]}},
        *reassert_patches("gpu-basic", {**DETAIL, "nodeUID": "node-uid"}, {}, "7")[:2],
        *reassert_patches("gpu-basic", {**DETAIL, "nodeUID": "node-uid"}, {}, "7", stale="expired")[:2],
    ]
    return written(patches)


def test_every_key_the_node_writers_produce_is_in_the_inventory() -> None:
    found = every_write()
    assert ("taint", keys.RESERVED_TAINT_KEY) in found  # the writers were exercised
    assert ("condition", keys.certified_label("gpu-basic")) in found
    missing = sorted((where, key) for where, key in found if node_key(where, key) is None)  # type: ignore[arg-type]
    assert not missing, f"written on Nodes but not in shared/nodekeys.py: {missing}"


def full_node() -> Obj:
    """A Node carrying every key Signal writes, and an operator's own of each kind."""
    profile = "gpu-basic"
    detail = {"run": "r", "uid": "run-uid", "doNotDisrupt": [keys.KARPENTER_DO_NOT_DISRUPT]}
    labels = {
        keys.CERTIFY_LABEL: profile,
        keys.LEGACY_CERTIFY_LABEL: profile,
        keys.TRUSTED_NODE_LABEL: "true",
        keys.certified_label(profile): "Pass",
        certified.trusted_label(profile): "Pass",
        keys.RESERVED_BY_LABEL: "run-uid",
        "team.example.com/pool": "a",
    }
    annotations = {
        keys.certified_label(profile): json.dumps(DETAIL),
        keys.ATTEMPT_ANNOTATION: f"{profile}:2",
        keys.RESERVATION_ANNOTATION: json.dumps(detail),
        keys.KARPENTER_DO_NOT_DISRUPT: "true",  # added by the reservation
        keys.AUTOSCALER_SCALE_DOWN_DISABLED: "true",  # the operator's own (not in the detail)
        "team.example.com/note": "x",
    }
    obj = node(labels=labels, annotations=annotations)
    obj["spec"]["taints"] = [
        {"key": keys.RESERVED_TAINT_KEY, "value": "run-uid", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
    ]
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True"},
        {"type": keys.certified_label(profile), "status": "True"},
    ]
    return obj


def apply(obj: Obj, plan: Any) -> Obj:
    """The Node after the plan's patches (as the API server applies them)."""
    meta = obj["metadata"]
    for kind in ("labels", "annotations"):
        for key, value in ((plan.metadata_patch or {}).get("metadata", {}).get(kind) or {}).items():
            assert value is None
            meta[kind].pop(key)
    if plan.metadata_patch and "spec" in plan.metadata_patch:
        obj["spec"]["taints"] = plan.metadata_patch["spec"]["taints"] or []
    gone = {c["type"] for c in ((plan.status_patch or {}).get("status") or {}).get("conditions") or []}
    obj["status"]["conditions"] = [c for c in obj["status"]["conditions"] if c["type"] not in gone]
    return obj


def signals(obj: Obj) -> set[tuple[str, str]]:
    meta = obj["metadata"]
    found = {("label", k) for k in meta["labels"]} | {("annotation", k) for k in meta["annotations"]}
    found |= {("taint", t["key"]) for t in obj["spec"].get("taints") or []}
    found |= {("condition", c["type"]) for c in obj["status"]["conditions"]}
    return {(w, k) for w, k in found if node_key(w, k) is not None}  # type: ignore[arg-type]


def test_with_release_held_nothing_of_signals_is_left_and_nothing_of_the_operators_goes() -> None:
    plan = plan_node(full_node(), release_held=True)
    assert plan.metadata_patch is not None
    assert plan.metadata_patch["metadata"]["resourceVersion"] == "7"
    after = apply(full_node(), plan)
    assert signals(after) == {("annotation", keys.AUTOSCALER_SCALE_DOWN_DISABLED)}  # the operator's, kept
    assert after["metadata"]["labels"] == {"team.example.com/pool": "a"}
    assert after["metadata"]["annotations"] == {
        keys.AUTOSCALER_SCALE_DOWN_DISABLED: "true",
        "team.example.com/note": "x",
    }
    assert after["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert after["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert plan_node(after, release_held=True).remove == []  # again: nothing to do


def test_without_release_held_a_held_node_keeps_what_holds_it_only() -> None:
    plan = plan_node(full_node(), release_held=False)
    assert plan.held_by == "run-uid"
    after = apply(full_node(), plan)
    assert signals(after) == {
        ("label", keys.RESERVED_BY_LABEL),
        ("annotation", keys.RESERVATION_ANNOTATION),
        ("annotation", keys.KARPENTER_DO_NOT_DISRUPT),
        ("annotation", keys.AUTOSCALER_SCALE_DOWN_DISABLED),
        ("taint", keys.RESERVED_TAINT_KEY),
    }
    assert sorted(plan.keep) == sorted(
        [
            f"label {keys.RESERVED_BY_LABEL}",
            f"annotation {keys.RESERVATION_ANNOTATION}",
            f"annotation {keys.KARPENTER_DO_NOT_DISRUPT}",
            f"taint {keys.RESERVED_TAINT_KEY}",
        ]
    )


def test_a_stray_reservation_on_a_node_no_run_holds_is_removed() -> None:
    obj = node(annotations={keys.RESERVATION_ANNOTATION: "not json"})
    plan = plan_node(obj, release_held=False)
    assert plan.held_by is None
    assert plan.remove == [f"annotation {keys.RESERVATION_ANNOTATION}"]
    assert plan_node(node(), release_held=True).metadata_patch is None


@pytest.mark.parametrize("entry", NODE_KEYS, ids=lambda k: f"{k.where}-{k.key}")
def test_the_reference_lists_every_key_uninstall_removes(entry: Any) -> None:
    text = REFERENCE.read_text()
    section = text[text.index("## Keys on Nodes") :]
    suffix = "*" if entry.prefix else ""
    assert f"| {entry.where} | `{entry.key}{suffix}` |" in section, entry


def _failed_node(fail_condition: str = "True") -> Obj:
    obj = node()
    obj["spec"]["taints"] = [
        {"key": "example.com/signal-failed", "value": "burn-in", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
    ]
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True"},
        {"type": keys.failed_condition("p"), "status": fail_condition},
    ]
    return obj


def test_a_fail_taint_goes_only_when_named_and_only_from_a_node_signal_marked_failed() -> None:
    kept = apply(_failed_node(), plan_node(_failed_node(), release_held=False))
    assert [t["key"] for t in kept["spec"]["taints"]] == ["example.com/signal-failed", "nvidia.com/gpu"]
    named = frozenset({"example.com/signal-failed"})
    plan = plan_node(_failed_node(), release_held=False, fail_taints=named)
    assert "taint example.com/signal-failed" in plan.remove
    after = apply(_failed_node(), plan)
    assert after["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert after["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    # the same key on a Node Signal did not mark failed is someone else's: it stays
    passed = apply(_failed_node("False"), plan_node(_failed_node("False"), release_held=False, fail_taints=named))
    assert [t["key"] for t in passed["spec"]["taints"]] == ["example.com/signal-failed", "nvidia.com/gpu"]
