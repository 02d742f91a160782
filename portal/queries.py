"""What the portal's API asks of the index: the checks profiles register (``RegisteredCheck``)
and the filters of a results page (``Filters``). Pure; no I/O."""

from dataclasses import dataclass
from typing import Any

from portal.entries import Entry
from shared.envelope import State


@dataclass(frozen=True)
class RegisteredCheck:
    """A check a profile registers (profile x check)."""

    profile: str
    name: str
    index: int
    backend: str
    profile_generation: int
    source_digest: str
    freshness_seconds: int

    @property
    def id(self) -> str:
        return f"{self.profile}/{self.name}"

    def to_json(self, registered: bool = True) -> dict[str, Any]:
        return {
            "id": self.id,
            "profile": self.profile,
            "name": self.name,
            "index": self.index,
            "backend": self.backend,
            "profileGeneration": self.profile_generation,
            "sourceDigest": self.source_digest,
            "freshnessSeconds": self.freshness_seconds,
            "registered": registered,
        }


@dataclass(frozen=True)
class Filters:
    node: str | None = None
    check: str | None = None
    """``profile/check``, or a bare check name."""
    state: State | None = None
    workspace: str | None = None

    def match(self, entry: Entry) -> bool:
        key = entry.key
        if self.node is not None and key[1] != self.node:
            return False
        if self.workspace is not None and key[0] != self.workspace:
            return False
        if self.state is not None and entry.state != self.state.value:
            return False
        return self.check is None or self.check in {entry.check_type, key[3]}
