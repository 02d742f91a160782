"""Who is calling and what they may see.

``sar``: the caller's Bearer token goes to a TokenReview **for the portal's audience**
(``--audience``, default ``signal-portal``), so a token minted for the API server or for any
other audience is refused (and a token minted for the portal is useless against the API
server). For each workspace (namespace) a SubjectAccessReview asks whether that user may
``list certificationruns.projectsignal.dev`` there; two cluster-wide reviews decide whether
the caller may see Node health (``list nodes``) and the registered checks of profiles they
have no result of (``list certificationprofiles.projectsignal.dev``).

Answers are cached briefly (``ttl``) in bounded LRU caches, by a hash of the token and by
(user, question). Failed authentications are rate-limited per client address
(``FailureLimiter``; also per network and for all callers together, so rotating addresses
resets nothing): once an address has spent its budget, a token the portal has not seen
gets 429 without a TokenReview, so garbage tokens cannot flood the API server (a token the API
server accepted within the last hour is exempt: an authenticated session is never locked out
by someone else's garbage). ``none``: every request sees
everything (local use only). The portal's own identity creates these reviews and nothing else.
"""

import asyncio
import hashlib
import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import structlog

from kubeio.client import Kube
from kubeio.errors import ApiError
from portal import metrics
from portal.sight import ALL, EVERYTHING, Sight
from shared import keys

log = structlog.get_logger("portal.auth")
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
DEFAULT_AUDIENCE = "signal-portal"
MAX_TOKEN = 8192
KNOWN_TTL = 3600.0
K = TypeVar("K")
V = TypeVar("V")


class Unauthenticated(Exception):
    """No usable credentials (HTTP 401)."""


class TooManyFailures(Exception):
    """This client address failed to authenticate too often (HTTP 429)."""

    def __init__(self, retry_after: float) -> None:
        super().__init__("too many failed authentications from this address; try again later")
        self.retry_after = retry_after


@dataclass(frozen=True)
class Caller:
    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class Authorizer(Protocol):
    async def caller(self, authorization: str | None, remote: str = "") -> Caller: ...

    async def sight(self, caller: Caller, workspaces: Iterable[str]) -> Sight:
        """What the caller may see, given the workspaces that have results."""
        ...


class OpenAccess:
    """``--auth none``: everyone sees everything."""

    async def caller(self, authorization: str | None, remote: str = "") -> Caller:
        return Caller("anonymous")

    async def sight(self, caller: Caller, workspaces: Iterable[str]) -> Sight:
        return EVERYTHING


class Lru(Generic[K, V]):
    """A bounded least-recently-used map whose entries expire."""

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> tuple[bool, V | None]:
        held = self._items.get(key)
        if held is None:
            return False, None
        if held[0] <= self.clock():
            del self._items[key]
            return False, None
        self._items.move_to_end(key)
        return True, held[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        self._items[key] = (self.clock() + ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)


def network_of(remote: str) -> str:
    """The network a client address belongs to for rate limiting: its IPv4 /24 or IPv6 /64 (an
    attacker rotates addresses within what it holds); anything else stands for itself."""
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return remote
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    prefix = 24 if address.version == 4 else 64
    return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))


class FailureLimiter:
    """Token buckets of failed authentications: per client address (``burst`` failures at once,
    refilled at ``per_second``), per network of addresses (``network_factor`` times that:
    network_of) and one for all callers together (``global_factor`` times that). A failure
    spends from all three and any empty one refuses, so rotating addresses (or networks) does
    not reset the budget, and the TokenReviews garbage can cause are bounded whatever the number
    of addresses. At most ``max_addresses`` address and network buckets are kept (LRU); the
    global one is never evicted."""

    def __init__(
        self,
        *,
        burst: float = 20,
        per_second: float = 1.0,
        max_addresses: int = 10000,
        network_factor: float = 4,
        global_factor: float = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.per_second, self.clock = burst, per_second, clock
        self.factors = {"addr": 1.0, "net": network_factor, "all": global_factor}
        self._buckets: Lru[str, tuple[float, float]] = Lru(2 * max_addresses + 1, clock)

    def _keys(self, remote: str) -> list[tuple[str, float]]:
        return [
            (f"addr:{remote}", self.factors["addr"]),
            (f"net:{network_of(remote)}", self.factors["net"]),
            ("all:", self.factors["all"]),
        ]

    def _level(self, key: str, factor: float) -> float:
        found, held = self._buckets.get(key)
        if not found or held is None:
            return self.burst * factor
        level, since = held
        return min(self.burst * factor, level + (self.clock() - since) * self.per_second * factor)

    def check(self, remote: str) -> None:
        """Raise TooManyFailures when ``remote``, its network or all callers together have no
        failure left to spend."""
        waits = [
            (1 - level) / (self.per_second * factor)
            for key, factor in self._keys(remote)
            if (level := self._level(key, factor)) < 1
        ]
        if waits:
            raise TooManyFailures(max(waits))

    def failed(self, remote: str) -> None:
        for key, factor in self._keys(remote):
            level = max(0.0, self._level(key, factor) - 1)
            self._buckets.put(key, (level, self.clock()), ttl=self.burst / self.per_second + 1)


class ReviewAccess:
    """``--auth sar``: TokenReview (for ``audience``) and SubjectAccessReview against the API server."""

    def __init__(
        self,
        kube: Kube,
        *,
        audience: str = DEFAULT_AUDIENCE,
        ttl: float = 10.0,
        max_entries: int = 10000,
        limiter: FailureLimiter | None = None,
    ) -> None:
        self.kube = kube
        self.audience = audience
        self.ttl = ttl
        self.tokens: Lru[str, Caller | None] = Lru(max_entries)
        self.known: Lru[str, bool] = Lru(max_entries)
        """Hashes of tokens the API server accepted (for KNOWN_TTL): exempt from the limiter."""
        self.access: Lru[tuple[Caller, str, str], bool] = Lru(max_entries)
        self.limiter = limiter or FailureLimiter()

    async def caller(self, authorization: str | None, remote: str = "") -> Caller:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN:
            raise Unauthenticated("a Bearer token is required (Authorization: Bearer <token>)")
        digest = hashlib.sha256(token.encode()).hexdigest()
        cached, found = self.tokens.get(digest)
        if not cached:
            # Only a token never seen valid is limited: an authenticated session whose cached
            # answer expired is reviewed again even while garbage floods from its address.
            if not self.known.get(digest)[0]:
                self.limiter.check(remote)
            found = await self._review_token(token)
            self.tokens.put(digest, found, self.ttl)
            if found is None:
                self.limiter.failed(remote)
            else:
                self.known.put(digest, True, KNOWN_TTL)
        if found is None:
            raise Unauthenticated(
                f"the token was not accepted for audience {self.audience!r}; "
                f"mint one with `kubectl create token SERVICEACCOUNT --audience {self.audience}`"
            )
        return found

    async def _review_token(self, token: str) -> Caller | None:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self.audience]},
        }
        metrics.AUTH_REVIEWS.labels("TokenReview").inc()
        answer = await self.kube.request("POST", TOKEN_REVIEWS, body=body)
        status = answer.get("status") or {}
        # The API server names the audiences the token is valid for among those asked: an
        # answer without ours (an older server ignoring spec.audiences) is not an acceptance.
        if not status.get("authenticated") or self.audience not in (status.get("audiences") or []):
            return None
        user = status.get("user") or {}
        extra = tuple(sorted((k, tuple(v)) for k, v in (user.get("extra") or {}).items()))
        return Caller(str(user.get("username", "")), str(user.get("uid", "")), tuple(user.get("groups") or ()), extra)

    async def _allowed(self, caller: Caller, resource: str, namespace: str) -> bool:
        cached, answer = self.access.get((caller, resource, namespace))
        if cached:
            return bool(answer)
        group, _, plural = resource.rpartition("/")
        attributes = {"verb": "list", "group": group, "resource": plural}
        if namespace != ALL:
            attributes["namespace"] = namespace
        spec: dict[str, Any] = {
            "user": caller.user,
            "groups": list(caller.groups),
            "resourceAttributes": attributes,
        }
        if caller.uid:
            spec["uid"] = caller.uid
        if caller.extra:
            spec["extra"] = {k: list(v) for k, v in caller.extra}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        metrics.AUTH_REVIEWS.labels("SubjectAccessReview").inc()
        try:
            review = await self.kube.request("POST", ACCESS_REVIEWS, body=body)
            allowed = bool((review.get("status") or {}).get("allowed"))
        except ApiError as exc:
            log.warning("subject access review failed", status=exc.status)
            return False  # fail closed, and do not cache
        self.access.put((caller, resource, namespace), allowed, self.ttl)
        return allowed

    async def sight(self, caller: Caller, workspaces: Iterable[str]) -> Sight:
        runs = f"{keys.GROUP}/{keys.RUN_PLURAL}"
        everywhere, nodes, profiles = await asyncio.gather(
            self._allowed(caller, runs, ALL),
            self._allowed(caller, "/nodes", ALL),
            self._allowed(caller, f"{keys.GROUP}/{keys.PROFILE_PLURAL}", ALL),
        )
        if everywhere:
            return Sight(frozenset({ALL}), nodes, profiles)
        names = sorted(set(workspaces))
        answers = await asyncio.gather(*(self._allowed(caller, runs, ns) for ns in names))
        return Sight(frozenset(ns for ns, ok in zip(names, answers, strict=True) if ok), nodes, profiles)
