"""Who is calling and which workspaces (namespaces) they may see.

``sar``: the caller's Bearer token goes to a TokenReview (user, groups); for each workspace a
SubjectAccessReview asks whether that user may ``list certificationruns.projectsignal.dev``
there. Answers are cached briefly (``ttl``) by a hash of the token and by (user, workspace).
``none``: every request sees every workspace (local use only). The portal's own identity
creates these reviews and nothing else.
"""

import asyncio
import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from kubeio.client import Kube
from kubeio.errors import ApiError
from portal import metrics
from shared import keys

log = structlog.get_logger("portal.auth")
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ALL = "*"


class Unauthenticated(Exception):
    """No usable credentials (HTTP 401)."""


@dataclass(frozen=True)
class Caller:
    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class Authorizer(Protocol):
    async def caller(self, authorization: str | None) -> Caller: ...

    async def visible(self, caller: Caller, workspaces: Iterable[str]) -> frozenset[str]:
        """The subset of ``workspaces`` the caller may see (or {ALL})."""
        ...


class OpenAccess:
    """``--auth none``: everyone sees everything."""

    async def caller(self, authorization: str | None) -> Caller:
        return Caller("anonymous")

    async def visible(self, caller: Caller, workspaces: Iterable[str]) -> frozenset[str]:
        return frozenset({ALL})


class ReviewAccess:
    """``--auth sar``: TokenReview and SubjectAccessReview against the API server."""

    def __init__(self, kube: Kube, *, ttl: float = 10.0, max_entries: int = 10000) -> None:
        self.kube = kube
        self.ttl = ttl
        self.max_entries = max_entries
        self._tokens: dict[str, tuple[float, Caller | None]] = {}
        self._access: dict[tuple[Caller, str], tuple[float, bool]] = {}

    def _trim(self, cache: dict[Any, Any]) -> None:
        if len(cache) > self.max_entries:
            cache.clear()

    async def caller(self, authorization: str | None) -> Caller:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > 8192:
            raise Unauthenticated("a Bearer token is required")
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._tokens.get(digest)
        if cached and cached[0] > now:
            found = cached[1]
        else:
            found = await self._review_token(token)
            self._trim(self._tokens)
            self._tokens[digest] = (now + self.ttl, found)
        if found is None:
            raise Unauthenticated("the token was not accepted")
        return found

    async def _review_token(self, token: str) -> Caller | None:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        metrics.AUTH_REVIEWS.labels("TokenReview").inc()
        answer = await self.kube.request("POST", TOKEN_REVIEWS, body=body)
        status = answer.get("status") or {}
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = tuple(sorted((k, tuple(v)) for k, v in (user.get("extra") or {}).items()))
        return Caller(str(user.get("username", "")), str(user.get("uid", "")), tuple(user.get("groups") or ()), extra)

    async def _allowed(self, caller: Caller, namespace: str) -> bool:
        now = time.monotonic()
        cached = self._access.get((caller, namespace))
        if cached and cached[0] > now:
            return cached[1]
        attributes = {"verb": "list", "group": keys.GROUP, "resource": keys.RUN_PLURAL}
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
            answer = await self.kube.request("POST", ACCESS_REVIEWS, body=body)
            allowed = bool((answer.get("status") or {}).get("allowed"))
        except ApiError as exc:
            log.warning("subject access review failed", status=exc.status)
            return False  # fail closed, and do not cache
        self._trim(self._access)
        self._access[(caller, namespace)] = (now + self.ttl, allowed)
        return allowed

    async def visible(self, caller: Caller, workspaces: Iterable[str]) -> frozenset[str]:
        if await self._allowed(caller, ALL):
            return frozenset({ALL})
        names = sorted(set(workspaces))
        answers = await asyncio.gather(*(self._allowed(caller, ns) for ns in names))
        return frozenset(ns for ns, ok in zip(names, answers, strict=True) if ok)
