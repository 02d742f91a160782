"""Proving that an admission policy is in force, not assuming it: send an object that the
policy must deny as a server-side dry-run (``dryRun=All``: admitted or not, nothing is
stored) and look for that policy's denial. Used at start-up by the adapter and the
controller (adapter/policy.py, controller/process/policy.py; docs/security.md).

A policy just installed takes a moment to reach the API server's admission plugin, so the
probe is repeated until ``wait_seconds`` have passed; then ``PolicyNotInForce`` says which
policy, in which namespace, what happened instead, and what to do."""

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from kubeio.client import Kube, resource_path
from kubeio.errors import ApiError, TransportError

Obj = dict[str, Any]
RETRY_SECONDS = 0.5


class PolicyNotInForce(RuntimeError):
    """An admission policy a component relies on did not deny what it must deny."""


@dataclass(frozen=True)
class Probe:
    policy: str
    """The ValidatingAdmissionPolicy expected to deny (a denial by a policy whose name starts
    with it counts: per-namespace copies carry a suffix)."""
    what: str
    """What the object is, in words (for the error message)."""
    path: str
    """The collection the object is posted to."""
    body: Obj
    manifest: str
    """Where the policy is defined (repository-relative), for the error message."""


def config_map_probe(policy: str, manifest: str, namespace: str, name: str, document: str) -> Probe:
    """A ConfigMap named like one of Signal's documents (``document``: which, in words) but
    without the Run's labels, owner and immutability: what ``policy`` must deny."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"probe": f"{document} without the Run's labels, owner or immutability"},
    }
    what = f"ConfigMap {name} ({document} without labels, owner or immutable: true)"
    return Probe(policy, what, resource_path("v1", "configmaps", namespace), body, manifest)


def denied_by(error: ApiError, policy: str) -> bool:
    return f"ValidatingAdmissionPolicy '{policy}" in error.message and error.status in (403, 422)


async def prove_denied(kube: Kube, probe: Probe, namespace: str, *, wait_seconds: float) -> None:
    """Return once ``probe.policy`` denies the probe's dry-run; raise PolicyNotInForce if it
    does not within ``wait_seconds``."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            await kube.request("POST", probe.path, body=probe.body, query={"dryRun": "All"})
            instead = "was admitted"
        except TransportError as exc:
            instead = f"got no answer ({exc})"
        except ApiError as exc:
            if denied_by(exc, probe.policy):
                return
            instead = f"was refused for another reason: HTTP {exc.status} {exc.reason}: {exc.message[:300]}"
        if time.monotonic() >= deadline:
            raise PolicyNotInForce(
                f"admission policy {probe.policy} is not in force in namespace {namespace}: a server-side "
                f"dry-run of {probe.what} {instead} (waited {wait_seconds:.0f}s). Install the "
                f"ValidatingAdmissionPolicy and its binding from {probe.manifest} (kubectl apply -k deploy/) "
                f"with the binding's namespaceSelector matching namespace {namespace}; see docs/security.md"
            )
        await asyncio.sleep(RETRY_SECONDS)


async def prove_all_denied(kube: Kube, probes: list[Probe], namespace: str, *, wait_seconds: float) -> None:
    """Every probe denied by its policy (checked one after another, sharing one deadline)."""
    deadline = time.monotonic() + wait_seconds
    for probe in probes:
        await prove_denied(kube, probe, namespace, wait_seconds=max(0.0, deadline - time.monotonic()))
