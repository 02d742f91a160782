"""portal/evidence_cache.py: the Run evidence the portal keeps is bounded in bytes (issue 42,
Low: it grew with every Run read, at megabytes per Run of 64 participants x 32 checks)."""

from portal.evidence_cache import EvidenceCache, size_of
from shared.envelope import RunEvidence, Verification


def _evidence(payload_bytes: int) -> RunEvidence:
    return RunEvidence(Verification.VERIFIED, "", {"stdout": "x" * payload_bytes}, "sha256:" + "0" * 64)


def test_the_cache_stays_within_its_bound_and_evicts_the_least_recently_used() -> None:
    one = size_of(_evidence(1000))
    cache = EvidenceCache(max_bytes=3 * one)
    for run in range(10):
        cache.put(("uid", run), _evidence(1000))
        assert cache.bytes <= cache.max_bytes
    assert len(cache) == 3
    assert cache.get(("uid", 0)) is None, "the oldest are gone"
    assert cache.get(("uid", 7)) is not None  # now the most recently used
    cache.put(("uid", 10), _evidence(1000))
    assert cache.get(("uid", 7)) is not None
    assert cache.get(("uid", 8)) is None
    assert cache.bytes == 3 * one


def test_evidence_larger_than_the_bound_is_never_kept() -> None:
    cache = EvidenceCache(max_bytes=500)
    cache.put("small", _evidence(10))
    cache.put("huge", _evidence(10_000))
    assert cache.get("huge") is None
    assert cache.get("small") is not None


def test_retain_drops_what_no_run_uses_and_replacing_counts_once() -> None:
    cache = EvidenceCache(max_bytes=1 << 20)
    cache.put("a", _evidence(100))
    cache.put("b", _evidence(100))
    cache.put("b", _evidence(200))
    assert cache.bytes == size_of(_evidence(100)) + size_of(_evidence(200))
    cache.retain({"b"})
    assert (len(cache), cache.bytes) == (1, size_of(_evidence(200)))
