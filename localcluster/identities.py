"""API identities on the local control plane: the admin, the named users of the token
file, and real ServiceAccount tokens minted with the TokenRequest API."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kubeio.transport import Endpoint
from localcluster.controlplane import ControlPlane, kubeconfig_text
from localcluster.kube import KubeClient, resource_path

if TYPE_CHECKING:
    from kubernetes_asyncio import client as k8s


@dataclass(frozen=True)
class Identity:
    """One caller: a display name and a bearer token against one control plane."""

    name: str
    token: str
    server: str
    ca_file: Path

    def client(self) -> KubeClient:
        """A raw-JSON client (caller closes it)."""
        return KubeClient(self.server, self.token, self.ca_file)

    def endpoint(self) -> Endpoint:
        """This identity's endpoint, for a ``kubeio.Kube`` (Signal's own gateway)."""
        return Endpoint.for_token(self.server, self.token, self.ca_file)

    def api_client(self) -> "k8s.ApiClient":
        """A kubernetes_asyncio ApiClient (caller closes it): tests only (the dev extra), to
        check the local control plane against a generated Kubernetes client."""
        from kubernetes_asyncio import client as k8s  # noqa: PLC0415 - a test dependency, not the demo's

        config = k8s.Configuration(host=self.server)
        config.api_key = {"BearerToken": self.token}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        config.ssl_ca_cert = str(self.ca_file)
        return k8s.ApiClient(configuration=config)

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        path.write_text(kubeconfig_text(self.server, self.ca_file, self.token, namespace))
        path.chmod(0o600)
        return path


def admin(plane: ControlPlane) -> Identity:
    return Identity("signal-admin", plane.admin_token, plane.server, plane.ca_file)


def user(plane: ControlPlane, name: str) -> Identity:
    """A named user of the static token file (see controlplane.NAMED_USERS)."""
    return Identity(name, plane.user_tokens[name], plane.server, plane.ca_file)


async def service_account(
    plane: ControlPlane, namespace: str, name: str, *, create: bool = True, seconds: int = 3600
) -> Identity:
    """A real token for ServiceAccount ``namespace/name`` from the TokenRequest API."""
    async with admin(plane).client() as kube:
        if create:
            body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
            await kube.apply(resource_path("v1", "serviceaccounts", namespace, name), body)
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        path = resource_path("v1", "serviceaccounts", namespace, name, "token")
        answer = await kube.create(path, request)
    return Identity(
        f"system:serviceaccount:{namespace}:{name}",
        answer["status"]["token"],
        plane.server,
        plane.ca_file,
    )
