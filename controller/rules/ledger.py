"""The admission ledger: the single compare-and-swap point of admission. Pure.

One ConfigMap in the controller's namespace lists every live group (Run name -> profile and
Node names) and the fence of the leader allowed to write it. Every admission adds its group
with an update conditioned on the ledger's resourceVersion, so two writers (two replicas, or a
deposed leader) can never both admit from the same state; budgets and Node uniqueness are
decided against the ledger. A new leader first bumps the fence, so a deposed leader's next
write fails on the resourceVersion and any later read shows it a fence that is not its own.

A malformed ledger is an error, never an empty ledger: admission stops (fail closed)."""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

LEDGER_NAME = "signal-admission-ledger"


class LedgerError(ValueError):
    """The ledger ConfigMap cannot be parsed; admission must stop until a human looks."""


@dataclass(frozen=True)
class Group:
    profile: str
    nodes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "nodes": list(self.nodes)}


@dataclass(frozen=True)
class Ledger:
    fence: int = 0
    holder: str = ""
    groups: Mapping[str, Group] = field(default_factory=dict)
    resource_version: str = ""

    def held_nodes(self) -> set[str]:
        return {n for g in self.groups.values() for n in g.nodes}

    def all_group_nodes(self) -> list[str]:
        return [n for g in self.groups.values() for n in g.nodes]

    def with_group(self, run: str, group: Group) -> "Ledger":
        return replace(self, groups={**self.groups, run: group})

    def without(self, run: str) -> "Ledger":
        return replace(self, groups={k: v for k, v in self.groups.items() if k != run})

    def fenced(self, fence: int, holder: str) -> "Ledger":
        return replace(self, fence=fence, holder=holder)


def _group(run: str, raw: Any) -> Group:
    if not isinstance(raw, dict):
        raise LedgerError(f"group {run} is not an object")
    # runUID: written by earlier versions (always empty); still accepted, never used.
    profile, nodes, uid = raw["profile"], raw["nodes"], raw.get("runUID", "")
    if not isinstance(profile, str) or not isinstance(uid, str):
        raise LedgerError(f"group {run}: profile and runUID must be strings")
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise LedgerError(f"group {run}: nodes must be a list of Node names")
    return Group(profile, tuple(nodes))


def parse_ledger(config_map: Mapping[str, Any]) -> Ledger:
    data = config_map.get("data") or {}
    try:
        fence = int(data.get("fence", "0"))
        if data and "groups" not in data:
            raise LedgerError("groups is missing")
        raw = json.loads(data.get("groups", "{}"))
        if not isinstance(raw, dict):
            raise LedgerError("groups is not an object")
        groups = {str(run): _group(run, g) for run, g in raw.items()}
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise LedgerError(f"admission ledger {LEDGER_NAME} is malformed: {exc}") from exc
    return Ledger(fence, str(data.get("holder", "")), groups, config_map.get("metadata", {}).get("resourceVersion", ""))


def ledger_data(ledger: Ledger) -> dict[str, str]:
    groups = {run: ledger.groups[run].to_json() for run in sorted(ledger.groups)}
    return {
        "fence": str(ledger.fence),
        "holder": ledger.holder,
        "groups": json.dumps(groups, sort_keys=True, separators=(",", ":")),
    }


def ledger_object(ledger: Ledger, namespace: str) -> dict[str, Any]:
    """The ConfigMap body; carries resourceVersion so an update is a compare-and-swap."""
    metadata: dict[str, Any] = {"name": LEDGER_NAME, "namespace": namespace}
    if ledger.resource_version:
        metadata["resourceVersion"] = ledger.resource_version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": ledger_data(ledger)}
