"""The keys of the controller's work queue (controller/process/loop.py): one per Run, one per profile,
and one for the Node groups as a whole. Pure."""

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    RUN = "Run"
    PROFILE = "Profile"
    GROUPS = "NodeGroups"
    """The reservations as a whole: orphaned reservations, ledger groups, Workflows, retention."""


@dataclass(frozen=True, order=True)
class Key:
    kind: Kind
    name: str = ""

    def __str__(self) -> str:
        return f"{self.kind.value}/{self.name}" if self.name else self.kind.value


GROUPS = Key(Kind.GROUPS)
