"""The admission ledger's segments on the API server (controller/rules/ledger.py): read once
each (they are immutable and named by their digest), written before the head that names
them, and deleted once no head names them.

``known`` (digest -> segment) is the controller's copy of every segment its last head read
named: a head names about 100 bytes per group, and only segments not seen before are read."""

import asyncio
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

import structlog

from controller.rules.ledger import (
    LEDGER_NAME,
    SEGMENT_COMPONENT,
    Head,
    Ledger,
    LedgerError,
    Segment,
    assemble,
    parse_head,
    parse_segment,
    segment_name,
    segment_object,
    stored,
    unstored,
)
from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import AlreadyExists, ApiError, Conflict, NotFound
from shared import keys

log = structlog.get_logger("signal-controller")

SEGMENT_GETS = 8
"""Up to this many segments not seen before are read one GET each; more (a controller's
first read) are read with one LIST of every segment."""
SEGMENT_GRACE = timedelta(minutes=10)
"""How long a segment that no head names is kept before it is deleted: a segment is written
just before the head that names it, and a deposed leader may still be between the two."""
SEGMENT_SELECTOR = f"{keys.COMPONENT_LABEL}={SEGMENT_COMPONENT}"


def _collection(namespace: str) -> str:
    return resource_path("v1", "configmaps", namespace)


async def list_segments(kube: Kube, namespace: str) -> list[Obj]:
    """Every segment ConfigMap in ``namespace``, page by page."""
    items: list[Obj] = []
    token = ""
    while True:
        query = {"labelSelector": SEGMENT_SELECTOR, "limit": "500", **({"continue": token} if token else {})}
        page = await kube.get(_collection(namespace), **query)
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def _keep(known: dict[str, Segment], objects: Iterable[Obj], wanted: set[str]) -> None:
    """Add the wanted ones of ``objects`` to ``known``; a wanted one that does not verify
    is an error (LedgerError), one not wanted is none of this head's business."""
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if name.removeprefix(segment_name("")) in wanted:
            digest, segment = parse_segment(obj)
            known[digest] = segment


async def fetch_segments(kube: Kube, namespace: str, head: Head, known: dict[str, Segment]) -> None:
    """Read the segments ``head`` names that ``known`` lacks, and forget those it does not
    name. One missing stays missing (``assemble`` says which): never an empty group."""
    wanted = set(head.segments.values())
    for digest in [d for d in known if d not in wanted]:
        del known[digest]
    missing = wanted - known.keys()
    if len(missing) > SEGMENT_GETS:
        _keep(known, await list_segments(kube, namespace), missing)
        missing -= known.keys()  # one not listed (its label taken off) is still read by name
    path = _collection(namespace)
    got = await asyncio.gather(*(kube.get_or_none(f"{path}/{segment_name(d)}") for d in sorted(missing)))
    _keep(known, (obj for obj in got if obj is not None), missing)


LEDGER_READS = 3
"""How many times a ledger whose head changed while its segments were read is read again."""


async def read_ledger(kube: Kube, namespace: str, known: dict[str, Segment]) -> Ledger:
    """The head, then the segments it names that ``known`` lacks. A segment missing is looked
    for again under the head read again, while that head is another: its group may have been
    dropped (and the segment deleted) between the two reads. Raises NotFound without a head."""
    path = f"{_collection(namespace)}/{LEDGER_NAME}"
    head = parse_head(await kube.get(path))
    for _ in range(LEDGER_READS):
        await fetch_segments(kube, namespace, head, known)
        try:
            return assemble(head, known)
        except LedgerError:
            again = parse_head(await kube.get(path))
            if again.resource_version == head.resource_version:
                raise
            head = again
    await fetch_segments(kube, namespace, head, known)
    return assemble(head, known)


async def store_segments(kube: Kube, namespace: str, ledger: Ledger, known: dict[str, Segment]) -> Ledger:
    """Write the segments of ``ledger``'s groups not stored yet; returns it with every digest.
    Safe to repeat: a segment already there is read back and must match."""
    path = _collection(namespace)
    for segment in unstored(ledger):
        digest = segment.digest()
        try:
            await kube.create(path, segment_object(segment, namespace))
        except AlreadyExists:
            existing = await kube.get(f"{path}/{segment_name(digest)}")
            if parse_segment(existing) != (digest, segment):
                raise LedgerError(f"segment {segment_name(digest)} exists with other content") from None
        known[digest] = segment
    return stored(ledger)


async def forget_unnamed(kube: Kube, namespace: str, named: Mapping[str, str], known: dict[str, Segment]) -> bool:
    """After a head that names ``named`` (Run -> digest) was written: delete the segments
    ``known`` has that it does not name (a dropped group's). None can be named again: a
    segment is its Run's, under the fence of the leader that wrote it. One not deleted (an
    error) is left for ``delete_unnamed``; returns whether none was."""
    keep = set(named.values())
    clean = True
    for digest in sorted(d for d in known if d not in keep):
        try:
            await kube.delete(f"{_collection(namespace)}/{segment_name(digest)}")
        except NotFound:
            pass
        except ApiError as exc:
            clean = False
            log.warning(
                "a dropped group's ledger segment was not deleted; the next resync deletes it",
                segment=segment_name(digest),
                error=str(exc)[:300],
            )
        del known[digest]
    return clean


def _fence(obj: Obj) -> int:
    """The fence a listed segment was written under (0: unreadable, a stray one)."""
    try:
        return parse_segment(obj)[1].fence
    except LedgerError:
        return 0


def _age(obj: Obj, now: datetime) -> timedelta:
    created = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        return now - datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return timedelta(0)


async def delete_unnamed(
    kube: Kube, namespace: str, named: Mapping[str, str], fence: int, now: datetime
) -> tuple[int, int]:
    """Delete the segments that ``named`` (a head of ``fence``: Run -> digest) does not name,
    that are older than SEGMENT_GRACE (by this process's clock) and were written under a fence
    no newer than the head's: a deposed leader never deletes what the leader after it wrote,
    whatever the clocks say. Returns how many were deleted, and how many unnamed ones were kept
    (younger, or newer)."""
    keep = {segment_name(d) for d in named.values()}
    deleted = young = 0
    for obj in await list_segments(kube, namespace):
        meta = obj.get("metadata") or {}
        if meta.get("name") in keep:
            continue
        if _age(obj, now) < SEGMENT_GRACE or _fence(obj) > fence:
            young += 1
            continue
        try:
            await kube.delete(f"{_collection(namespace)}/{meta['name']}", uid=meta.get("uid"))
        except (NotFound, Conflict):
            continue
        deleted += 1
    if deleted:
        log.info("deleted admission ledger segments that no head names", deleted=deleted)
    return deleted, young
