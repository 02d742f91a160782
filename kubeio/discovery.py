"""Whether the API server serves a resource type, and listing a type a cluster may lack (a
CRD that is not installed, such as the MPI operator's MPIJob).

A list of a type the API server does not serve is answered 404. That alone does not prove the
type absent (a proxy in the way answering 404, an aggregated API's route being rebuilt), so
``list_if_served`` asks the API server's discovery (``GET /apis/<group>/<version>``, readable
by every authenticated identity) before concluding that no object of the type exists: only
when discovery also says that the group/version or the resource is not served is the answer
"none". A 404 while discovery lists the resource is raised (fail closed: the caller retries),
and so is every other error, and a discovery document of the wrong shape
(``DiscoveryError``)."""

from typing import Any

from kubeio.client import Kube, Obj, resource_path
from kubeio.errors import NotFound


class DiscoveryError(RuntimeError):
    """The API server's discovery document is not an APIResourceList: nothing is concluded."""


def group_version_path(api_version: str) -> str:
    """The discovery path of ``api_version`` (``v1`` is the core group's ``/api/v1``)."""
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def serves(document: Any, api_version: str, plural: str) -> bool:
    """Whether the APIResourceList ``document`` lists ``plural``. Pure; raises DiscoveryError
    on a document of another shape (never read as "not served")."""
    resources = document.get("resources") if isinstance(document, dict) else None
    if not isinstance(resources, list) or not all(isinstance(r, dict) for r in resources):
        raise DiscoveryError(
            f"discovery of {api_version} is not an APIResourceList; cannot tell whether {plural} exist"
        )
    return any(r.get("name") == plural for r in resources)


async def served(kube: Kube, api_version: str, plural: str) -> bool:
    """Whether the API server serves ``plural`` in ``api_version`` now (one uncached GET)."""
    try:
        document = await kube.get(group_version_path(api_version))
    except NotFound:
        return False
    return serves(document, api_version, plural)


async def list_if_served(kube: Kube, api_version: str, plural: str, namespace: str, **query: str) -> list[Obj]:
    """The items of a list of ``plural`` in ``namespace``; ``[]`` when the API server does not
    serve the type at all (confirmed by discovery: no object of it can exist). Raises the
    list's NotFound when discovery says the type is served, and every other error."""
    try:
        listed = await kube.get(resource_path(api_version, plural, namespace), **query)
    except NotFound:
        if await served(kube, api_version, plural):
            raise
        return []
    return list(listed.get("items") or [])
