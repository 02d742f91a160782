"""What one caller may see (decided by portal/auth.py, applied by portal/index.py). Pure."""

from dataclasses import dataclass
from typing import Final

ALL: Final = "*"


@dataclass(frozen=True)
class Sight:
    """What one caller may see."""

    workspaces: frozenset[str]
    """Visible workspaces (namespaces), or {ALL}."""
    nodes: bool = False
    """Node identity and health (the caller may list Nodes)."""
    profiles: bool = False
    """Every registered check (the caller may list profiles), not only those with visible results."""

    def workspace(self, name: str) -> bool:
        return ALL in self.workspaces or name in self.workspaces


EVERYTHING: Final = Sight(frozenset({ALL}), nodes=True, profiles=True)
