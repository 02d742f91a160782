"""Where the API server is and how to prove who we are: an ``Endpoint`` from a kubeconfig file
or from the Pod's ServiceAccount (in-cluster).

Signal's services talk raw JSON, so this module reads the kubeconfig itself instead of
importing a generated client (whose package imports every API and model: about 60 MiB and a
second at start-up). Supported, as kubectl reads them: ``server``, ``certificate-authority``
(-``data``), ``insecure-skip-tls-verify``, ``tls-server-name``; for the user ``token``,
``tokenFile``, ``client-certificate``/``client-key`` (-``data``) and ``exec`` credential
plugins that return a token. Relative paths are relative to the kubeconfig's directory.
Anything else (``auth-provider``, ``username``/``password``, a plugin returning a certificate)
is refused with a ``ConfigError`` that says so, rather than connecting without credentials."""

import asyncio
import base64
import json
import os
import ssl
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
"""A token file is read again this often (kubelet rotates projected ServiceAccount tokens)."""
EXEC_TIMEOUT = 60.0
EXEC_EXPIRY_MARGIN = 10.0
"""An exec plugin's token is renewed this many seconds before it expires."""


class ConfigError(Exception):
    """The connection could not be configured; the message says what is wrong and where."""


class Credentials(Protocol):
    async def token(self) -> str | None:
        """The bearer token to send now (None: none, e.g. client certificates only)."""
        ...


@dataclass
class StaticToken:
    value: str

    async def token(self) -> str | None:
        return self.value


@dataclass
class FileToken:
    """A token read from a file, read again every ``TOKEN_REREAD_SECONDS``."""

    path: Path
    _value: str = ""
    _read_at: float = float("-inf")

    async def token(self) -> str | None:
        now = time.monotonic()
        if now - self._read_at >= TOKEN_REREAD_SECONDS:
            try:
                value = self.path.read_text().strip()
            except OSError as exc:
                if not self._value:
                    raise ConfigError(f"cannot read the token file {self.path}: {exc}") from exc
                return self._value  # keep the last token; the next call tries again
            self._value, self._read_at = value, now
        return self._value


@dataclass
class ExecToken:
    """A client-go credential plugin (``users[].user.exec``) that prints an ExecCredential
    with ``status.token``; the token is kept until shortly before ``expirationTimestamp``."""

    command: str
    args: list[str]
    env: dict[str, str]
    api_version: str
    _value: str = ""
    _expires: float = float("-inf")
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def token(self) -> str | None:
        async with self._lock:
            if not self._value or time.time() >= self._expires:
                self._value, self._expires = await self._run()
            return self._value

    async def _run(self) -> tuple[str, float]:
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        what = f"the kubeconfig's exec credential plugin {self.command!r}"
        try:
            process = await asyncio.create_subprocess_exec(
                self.command, *self.args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await asyncio.wait_for(process.communicate(), EXEC_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            raise ConfigError(f"{what} could not be run: {exc}") from exc
        if process.returncode != 0:
            raise ConfigError(f"{what} exited {process.returncode}: {err.decode(errors='replace')[-500:]}")
        try:
            status = json.loads(out)["status"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{what} printed no ExecCredential status: {exc}") from exc
        token = status.get("token") if isinstance(status, dict) else None
        if not isinstance(token, str) or not token:
            raise ConfigError(f"{what} returned no token (client certificates from a plugin are not supported)")
        expiry = status.get("expirationTimestamp")
        expires = float("inf")
        if isinstance(expiry, str) and expiry:
            try:
                expires = datetime.fromisoformat(expiry.replace("Z", "+00:00")).timestamp() - EXEC_EXPIRY_MARGIN
            except ValueError as exc:
                raise ConfigError(f"{what} returned a malformed expirationTimestamp {expiry!r}") from exc
        return token, expires


@dataclass(frozen=True)
class Endpoint:
    """One API server and one identity: ``host`` is the base URL (no trailing slash)."""

    host: str
    ssl: ssl.SSLContext
    credentials: Credentials | None = None
    server_hostname: str | None = None

    @classmethod
    def for_token(cls, server: str, token: str, ca_file: str | Path | None = None) -> "Endpoint":
        """A bearer token against ``server``, trusting ``ca_file`` (the system's CAs if None)."""
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        return cls(server.rstrip("/"), context, StaticToken(token))


def in_cluster(environ: Mapping[str, str] = os.environ, directory: Path = SERVICE_ACCOUNT_DIR) -> Endpoint:
    """The Pod's ServiceAccount: the API server from ``KUBERNETES_SERVICE_HOST``/``_PORT``, its
    CA and token from the mounted directory (the token read again as the kubelet rotates it)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("not in a Pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set")
    if ":" in host:
        host = f"[{host}]"
    ca_file, token_file = directory / "ca.crt", directory / "token"
    for path in (ca_file, token_file):
        if not path.is_file():
            raise ConfigError(f"in-cluster configuration: {path} is missing (is a ServiceAccount token mounted?)")
    try:
        context = ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"in-cluster configuration: the CA {ca_file} is unusable: {exc}") from exc
    return Endpoint(f"https://{host}:{port}", context, FileToken(token_file))


def default_kubeconfig(environ: Mapping[str, str] = os.environ) -> Path:
    """The first existing file of ``$KUBECONFIG``, else ``~/.kube/config``."""
    for entry in environ.get("KUBECONFIG", "").split(os.pathsep):
        if entry and Path(entry).is_file():
            return Path(entry)
    return Path(environ.get("HOME", str(Path.home()))) / ".kube" / "config"


def from_kubeconfig(path: str | Path | None = None, context: str | None = None) -> Endpoint:
    """The endpoint of ``context`` (the current context if None) of the kubeconfig at ``path``
    (``default_kubeconfig()`` if None)."""
    import yaml  # noqa: PLC0415 - kubeconfig files alone: an in-cluster process (the adapter, once per check) starts without it

    file = Path(path) if path else default_kubeconfig()
    try:
        document = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read kubeconfig {file}: {exc}") from exc
    if not isinstance(document, dict):
        raise ConfigError(f"kubeconfig {file} is not a mapping")
    return _endpoint(document, file, context)


def from_document(document: dict[str, Any], file: Path, context: str | None = None) -> Endpoint:
    """The endpoint of ``context`` (the current context if None) of a kubeconfig already read
    (e.g. several merged, as signalctl does with ``$KUBECONFIG``); ``file`` names it in errors
    and anchors the relative paths left in it."""
    return _endpoint(document, file, context)


def _named(document: dict[str, Any], section: str, name: str, file: Path) -> dict[str, Any]:
    for entry in document.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            key = section.rstrip("s")
            value = entry.get(key)
            if not isinstance(value, dict):
                raise ConfigError(f"kubeconfig {file}: {section} entry {name!r} has no {key} mapping")
            return value
    raise ConfigError(f"kubeconfig {file}: no {section} entry named {name!r}")


def _endpoint(document: dict[str, Any], file: Path, context_name: str | None) -> Endpoint:
    name = context_name or document.get("current-context")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"kubeconfig {file} has no current-context; name a context")
    context = _named(document, "contexts", name, file)
    cluster = _named(document, "clusters", str(context.get("cluster", "")), file)
    user_name = context.get("user")
    user = _named(document, "users", str(user_name), file) if user_name else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise ConfigError(f"kubeconfig {file}: cluster of context {name!r} has no http(s) server URL")
    base = file.parent
    ssl_context = _ssl_context(cluster, user, base, file)
    tls_name = cluster.get("tls-server-name")
    return Endpoint(
        server.rstrip("/"),
        ssl_context,
        _credentials(user, base, file),
        server_hostname=tls_name if isinstance(tls_name, str) and tls_name else None,
    )


def _data(entry: dict[str, Any], key: str, file: Path) -> bytes | None:
    value = entry.get(f"{key}-data")
    if value is None:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError as exc:
        raise ConfigError(f"kubeconfig {file}: {key}-data is not base64") from exc


def _path(entry: dict[str, Any], key: str, base: Path) -> Path | None:
    value = entry.get(key)
    if not value:
        return None
    path = Path(str(value))
    return path if path.is_absolute() else base / path


def _ssl_context(cluster: dict[str, Any], user: dict[str, Any], base: Path, file: Path) -> ssl.SSLContext:
    try:
        ca_data = _data(cluster, "certificate-authority", file)
        ca_file = _path(cluster, "certificate-authority", base)
        if ca_data is not None:
            context = ssl.create_default_context(cadata=ca_data.decode())
        else:
            context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        if cluster.get("insecure-skip-tls-verify") is True:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        cert_data, key_data = _data(user, "client-certificate", file), _data(user, "client-key", file)
        cert_file, key_file = _path(user, "client-certificate", base), _path(user, "client-key", base)
        if cert_data is not None or key_data is not None:
            if cert_data is None or key_data is None:
                raise ConfigError(f"kubeconfig {file}: client-certificate-data and client-key-data come together")
            with tempfile.TemporaryDirectory() as scratch:  # load_cert_chain reads files only
                cert_path, key_path = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
                cert_path.write_bytes(cert_data)
                key_path.touch(mode=0o600)
                key_path.write_bytes(key_data)
                context.load_cert_chain(cert_path, key_path)
        elif cert_file is not None:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"kubeconfig {file}: TLS configuration unusable: {exc}") from exc
    return context


def _credentials(user: dict[str, Any], base: Path, file: Path) -> Credentials | None:
    for unsupported in ("auth-provider", "username", "password"):
        if user.get(unsupported):
            raise ConfigError(
                f"kubeconfig {file}: the user's {unsupported!r} is not supported; use a token, "
                "a token file, a client certificate or an exec credential plugin"
            )
    if user.get("token"):
        return StaticToken(str(user["token"]))
    token_file = _path(user, "tokenFile", base)
    if token_file is not None:
        return FileToken(token_file)
    plugin = user.get("exec")
    if isinstance(plugin, dict):
        command = plugin.get("command")
        if not isinstance(command, str) or not command:
            raise ConfigError(f"kubeconfig {file}: the user's exec plugin names no command")
        if os.sep in command and not Path(command).is_absolute():
            command = str(base / command)  # as kubectl: relative to the kubeconfig's directory
        env = {str(e.get("name")): str(e.get("value", "")) for e in plugin.get("env") or [] if isinstance(e, dict)}
        return ExecToken(
            command,
            [str(a) for a in plugin.get("args") or []],
            env,
            str(plugin.get("apiVersion") or "client.authentication.k8s.io/v1"),
        )
    return None
