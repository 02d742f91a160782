"""The certificates of a local cluster with real nodes, made with the ``openssl`` command.

One CA signs everything: the API server's serving certificate (so Pods, kubelets and the test
process all verify it), the API server's client certificate towards kubelets, each kubelet's
client certificate (``system:node:<name>`` in ``system:nodes``, for the Node authorizer) and
serving certificate (its node address, so the API server verifies the kubelet behind
``logs``/``exec``), and the client certificates of kube-proxy and CoreDNS. The API server
trusts the CA for client certificates (``--client-ca-file``) and kubelets trust it for the API
server's. Nothing here is anonymous and no key leaves the cluster's work directory.
"""

import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "30"
APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"
"""The user name the API server presents to kubelets (bound to ``system:kubelet-api-admin``)."""
KUBE_PROXY_USER = "system:kube-proxy"
"""kube-proxy's user, bound to ``system:node-proxier`` by the API server's default policy."""
COREDNS_USER = "signal:coredns"
"""CoreDNS's user; ``localcluster.realnode.dns`` grants it exactly what its plugin reads."""


class PKIError(RuntimeError):
    """openssl failed to make a key or certificate."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key (PEM files)."""

    cert: Path
    key: Path


def _openssl(*args: str, stdin: str | None = None) -> None:
    result = subprocess.run(["openssl", *args], input=stdin, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PKIError(f"openssl {args[0]} failed (exit {result.returncode}): {result.stderr.strip()[-1500:]}")


def _san(ips: tuple[str, ...], names: tuple[str, ...]) -> str:
    entries = [f"IP:{ipaddress.ip_address(ip)}" for ip in ips] + [f"DNS:{name}" for name in names]
    return ",".join(entries)


@dataclass(frozen=True)
class ClusterPKI:
    """A CA in ``directory`` and the key pairs it issues (``<name>.crt``/``<name>.key``)."""

    directory: Path

    @property
    def ca(self) -> KeyPair:
        return KeyPair(self.directory / "ca.crt", self.directory / "ca.key")

    def create_ca(self) -> KeyPair:
        """Make the CA (once; an existing one is kept)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        ca = self.ca
        if not ca.cert.exists():
            _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(ca.key))
            _openssl(
                "req", "-x509", "-new", "-key", str(ca.key), "-sha256", "-days", DAYS,
                "-subj", "/CN=signal-localcluster-ca", "-out", str(ca.cert),
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            )  # fmt: skip
        return ca

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        client: bool = False,
        server: bool = False,
        ips: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
    ) -> KeyPair:
        """Sign a new key pair ``name`` for ``common_name`` (the user name of a client
        certificate) in ``organizations`` (its groups), for client and/or server use; a server
        certificate names ``ips`` and ``dns_names``."""
        if not (client or server):
            raise ValueError(f"certificate {name}: say whether it is for a client, a server or both")
        if server and not (ips or dns_names):
            raise ValueError(f"server certificate {name} needs at least one IP address or DNS name")
        pair = KeyPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        subject = "".join(f"/O={org}" for org in organizations) + f"/CN={common_name}"
        usages = ",".join(u for u, wanted in (("clientAuth", client), ("serverAuth", server)) if wanted)
        extensions = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={usages}",
        ]
        if server:
            extensions.append(f"subjectAltName={_san(ips, dns_names)}")
        extfile = self.directory / f"{name}.ext"
        extfile.write_text("\n".join(extensions) + "\n")
        csr = self.directory / f"{name}.csr"
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(pair.key))
        pair.key.chmod(0o600)
        _openssl("req", "-new", "-key", str(pair.key), "-subj", subject, "-out", str(csr))
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca.cert), "-CAkey", str(self.ca.key),
            "-CAcreateserial", "-days", DAYS, "-sha256", "-extfile", str(extfile), "-out", str(pair.cert),
        )  # fmt: skip
        csr.unlink()
        extfile.unlink()
        return pair


def client_kubeconfig(server: str, ca: Path, pair: KeyPair) -> str:
    """A kubeconfig that authenticates with the client certificate ``pair``."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n"
        f"users:\n- name: user\n  user:\n    client-certificate: {pair.cert}\n    client-key: {pair.key}\n"
        "contexts:\n- name: local\n  context:\n    cluster: local\n    user: user\n"
        "current-context: local\n"
    )
