"""kubeio.transport: kubeconfig and in-cluster configuration read without the generated client,
and the connection it configures, over real TLS on loopback (openssl-made CA, server and client
certificates; a TLS server of the test's own that requires the client certificate)."""

import asyncio
import base64
import json
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubeio import transport
from kubeio.client import Kube
from kubeio.errors import TransportError
from kubeio.transport import ConfigError, Endpoint, ExecToken, FileToken, StaticToken, from_kubeconfig, in_cluster


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt/ca.key; server.crt for 127.0.0.1 and 'api.test'; client.crt with CN 'alice'."""
    d = tmp_path_factory.mktemp("pki")
    key = ["-newkey", "rsa:2048", "-nodes"]
    _openssl(
        "req", "-x509", *key, "-days", "2", "-subj", "/CN=test-ca", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.crt"
    )
    for name, subject, ext in (
        ("server", "/CN=api", "subjectAltName=IP:127.0.0.1,DNS:api.test"),
        ("client", "/CN=alice", "extendedKeyUsage=clientAuth"),
    ):
        _openssl("req", *key, "-subj", subject, "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr")
        (d / f"{name}.ext").write_text(ext + "\n")
        signer = ["-CA", f"{d}/ca.crt", "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-days", "2"]
        _openssl(
            "x509", "-req", "-in", f"{d}/{name}.csr", *signer, "-extfile", f"{d}/{name}.ext", "-out", f"{d}/{name}.crt"
        )
    return d


@pytest.fixture
async def server(pki: Path) -> AsyncIterator[tuple[int, list[dict[str, object]]]]:
    """An HTTPS server on loopback that requires a client certificate only when one is sent
    (CERT_OPTIONAL) and answers every request with what it saw: the client certificate's CN,
    the Authorization header, the request line."""
    seen: list[dict[str, object]] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    context.load_cert_chain(pki / "server.crt", pki / "server.key")
    context.verify_mode = ssl.CERT_OPTIONAL

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        lines = head.split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else b""
        peer = writer.get_extra_info("peercert") or {}
        cn = next((v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"), None)
        answer = {"cn": cn, "authorization": headers.get("authorization"), "line": lines[0], "body": body.decode()}
        seen.append(answer)
        payload = json.dumps(answer).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(payload))
        writer.write(payload)
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    port = srv.sockets[0].getsockname()[1]
    yield port, seen
    srv.close()
    await srv.wait_closed()


def _kubeconfig(path: Path, cluster: dict[str, object], user: dict[str, object]) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(json.dumps(document))  # JSON is YAML
    return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def _ask(endpoint: Endpoint, path: str = "/api/v1/nodes", **query: str) -> dict[str, object]:
    kube = Kube(endpoint, field_manager="test")
    try:
        return await kube.get(path, **query)
    finally:
        await kube.close()


async def test_client_certificate_from_data_is_presented(
    pki: Path, server: tuple[int, list[dict[str, object]]], tmp_path: Path
) -> None:
    port, _ = server
    config = _kubeconfig(
        tmp_path / "config",
        {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": _b64(pki / "ca.crt")},
        {"client-certificate-data": _b64(pki / "client.crt"), "client-key-data": _b64(pki / "client.key")},
    )
    answer = await _ask(from_kubeconfig(config), labelSelector="a in (b,c),!d")
    assert answer["cn"] == "alice"
    assert answer["authorization"] is None
    assert answer["line"] == "GET /api/v1/nodes?labelSelector=a+in+%28b%2Cc%29%2C%21d HTTP/1.1"


async def test_relative_files_and_a_token(pki: Path, server: tuple[int, list[dict[str, object]]]) -> None:
    port, _ = server
    config = _kubeconfig(
        pki / "relative.config",
        {"server": f"https://127.0.0.1:{port}/", "certificate-authority": "ca.crt"},
        {"client-certificate": "client.crt", "client-key": "client.key", "token": "s3cret"},
    )
    answer = await _ask(from_kubeconfig(config))
    assert (answer["cn"], answer["authorization"]) == ("alice", "Bearer s3cret")


async def test_tls_server_name_and_an_untrusted_server(
    pki: Path, server: tuple[int, list[dict[str, object]]], tmp_path: Path
) -> None:
    port, _ = server
    named = {"server": f"https://127.0.0.1:{port}", "certificate-authority": str(pki / "ca.crt")}
    good = _kubeconfig(tmp_path / "good", {**named, "tls-server-name": "api.test"}, {"token": "t"})
    assert (await _ask(from_kubeconfig(good)))["authorization"] == "Bearer t"
    wrong = _kubeconfig(tmp_path / "wrong", {**named, "tls-server-name": "other.test"}, {"token": "t"})
    with pytest.raises(TransportError, match=r"(?i)certificate"):
        await _ask(from_kubeconfig(wrong))
    untrusted = _kubeconfig(tmp_path / "untrusted", {"server": f"https://127.0.0.1:{port}"}, {"token": "t"})
    with pytest.raises(TransportError, match=r"(?i)certificate"):
        await _ask(from_kubeconfig(untrusted))
    skip = _kubeconfig(
        tmp_path / "skip", {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}, {"token": "t"}
    )
    assert (await _ask(from_kubeconfig(skip)))["authorization"] == "Bearer t"


async def test_token_file_is_read_again(
    pki: Path, server: tuple[int, list[dict[str, object]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, seen = server
    (tmp_path / "token").write_text("first\n")
    config = _kubeconfig(
        tmp_path / "config",
        {"server": f"https://127.0.0.1:{port}", "certificate-authority": str(pki / "ca.crt")},
        {"tokenFile": "token"},
    )
    kube = Kube(from_kubeconfig(config), field_manager="test")
    try:
        await kube.get("/a")
        (tmp_path / "token").write_text("second\n")
        await kube.get("/b")  # within TOKEN_REREAD_SECONDS: the token read before
        monkeypatch.setattr(transport, "TOKEN_REREAD_SECONDS", 0.0)
        await kube.get("/c")
        (tmp_path / "token").unlink()
        await kube.get("/d")  # gone now: the last token is kept
    finally:
        await kube.close()
    assert [s["authorization"] for s in seen] == ["Bearer first", "Bearer first", "Bearer second", "Bearer second"]


def _plugin(tmp_path: Path, status: dict[str, object], code: int = 0) -> Path:
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, os, pathlib, sys\n"
        f"calls = pathlib.Path({str(tmp_path / 'calls')!r})\n"
        "calls.write_text(calls.read_text() + os.environ['KUBERNETES_EXEC_INFO'] + '\\n' if calls.exists() "
        "else os.environ['KUBERNETES_EXEC_INFO'] + '\\n')\n"
        f"print(json.dumps({{'apiVersion': 'client.authentication.k8s.io/v1', 'status': {status!r}}}))\n"
        f"sys.exit({code})\n"
    )
    return script


def _calls(tmp_path: Path) -> int:
    path = tmp_path / "calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


async def test_exec_plugin_token_is_kept_until_it_expires(tmp_path: Path) -> None:
    config = _kubeconfig(
        tmp_path / "config",
        {"server": "https://127.0.0.1:1"},
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [
                    str(_plugin(tmp_path, {"token": "from-plugin", "expirationTimestamp": "2999-01-01T00:00:00Z"}))
                ],
                "env": [{"name": "EXTRA", "value": "1"}],
            }
        },
    )
    credentials = from_kubeconfig(config).credentials
    assert isinstance(credentials, ExecToken)
    assert await credentials.token() == "from-plugin"
    assert await credentials.token() == "from-plugin"
    assert _calls(tmp_path) == 1
    info = json.loads((tmp_path / "calls").read_text().splitlines()[0])
    assert info == {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }
    expired = ExecToken(
        sys.executable,
        [str(_plugin(tmp_path, {"token": "t", "expirationTimestamp": "2000-01-01T00:00:00Z"}))],
        {},
        "v1",
    )
    await expired.token()
    await expired.token()
    assert _calls(tmp_path) == 3  # an expired token is asked for again


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        ({"token": "t"}, 3, "exited 3"),
        ({"clientCertificateData": "x"}, 0, "returned no token"),
        ({"token": "t", "expirationTimestamp": "soon"}, 0, "malformed expirationTimestamp"),
    ],
)
async def test_a_failing_exec_plugin_is_an_error(
    tmp_path: Path, status: dict[str, object], code: int, message: str
) -> None:
    plugin = ExecToken(sys.executable, [str(_plugin(tmp_path, status, code))], {}, "v1")
    with pytest.raises(ConfigError, match=message):
        await plugin.token()
    missing = ExecToken(str(tmp_path / "no-such-plugin"), [], {}, "v1")
    with pytest.raises(ConfigError, match="could not be run"):
        await missing.token()


async def test_a_credential_failure_at_request_time_is_a_transport_error(tmp_path: Path) -> None:
    endpoint = Endpoint("https://127.0.0.1:1", ssl.create_default_context(), FileToken(tmp_path / "absent"))
    with pytest.raises(TransportError, match="no credentials: cannot read the token file"):
        await _ask(endpoint)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "no current-context"),
        ({"current-context": "x"}, "no contexts entry named 'x'"),
        (
            {"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]},
            "no clusters entry named 'c'",
        ),
        (
            {
                "current-context": "x",
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": {"server": "ftp://x"}}],
                "users": [{"name": "u", "user": {}}],
            },
            "no http\\(s\\) server URL",
        ),
    ],
)
def test_a_malformed_kubeconfig_names_what_is_missing(
    tmp_path: Path, document: dict[str, object], message: str
) -> None:
    path = tmp_path / "config"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=message):
        from_kubeconfig(path)


@pytest.mark.parametrize(
    "user",
    [
        {"auth-provider": {"name": "gcp"}},
        {"username": "admin", "password": "x"},
    ],
)
def test_unsupported_credentials_are_refused_not_dropped(tmp_path: Path, user: dict[str, object]) -> None:
    config = _kubeconfig(tmp_path / "config", {"server": "https://127.0.0.1:1"}, user)
    with pytest.raises(ConfigError, match="is not supported"):
        from_kubeconfig(config)


def test_half_a_client_certificate_is_refused(pki: Path, tmp_path: Path) -> None:
    config = _kubeconfig(
        tmp_path / "config", {"server": "https://127.0.0.1:1"}, {"client-certificate-data": _b64(pki / "client.crt")}
    )
    with pytest.raises(ConfigError, match="come together"):
        from_kubeconfig(config)


def test_missing_kubeconfig_and_other_contexts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read kubeconfig"):
        from_kubeconfig(tmp_path / "absent")
    config = _kubeconfig(tmp_path / "config", {"server": "https://127.0.0.1:1"}, {"token": "a"})
    assert from_kubeconfig(config).host == "https://127.0.0.1:1"
    with pytest.raises(ConfigError, match="no contexts entry named 'other'"):
        from_kubeconfig(config, "other")


async def test_in_cluster(pki: Path, tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes((pki / "ca.crt").read_bytes())
    (tmp_path / "token").write_text("sa-token\n")
    endpoint = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    assert endpoint.host == "https://[fd00::1]:443"
    assert isinstance(endpoint.credentials, FileToken)
    assert await endpoint.credentials.token() == "sa-token"
    assert in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}, tmp_path).host == (
        "https://10.0.0.1:6443"
    )
    with pytest.raises(ConfigError, match="not in a Pod"):
        in_cluster({}, tmp_path)
    (tmp_path / "token").unlink()
    with pytest.raises(ConfigError, match="token is missing"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)


async def test_static_token_and_for_token(pki: Path) -> None:
    endpoint = Endpoint.for_token("https://127.0.0.1:6443/", "abc", pki / "ca.crt")
    assert endpoint.host == "https://127.0.0.1:6443"
    assert isinstance(endpoint.credentials, StaticToken)
    assert await endpoint.credentials.token() == "abc"
