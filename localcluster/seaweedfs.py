"""A real S3-compatible artifact store for the local cluster: SeaweedFS's ``weed server -s3``
(master, volume server, filer and S3 gateway in one process) on loopback ports.

LOCAL TEST INFRASTRUCTURE ONLY: built from the Go module proxy by
``localcluster/seaweedfs/build.sh``; Signal ships no SeaweedFS. Everything lives in one work
directory (data, metadata, the S3 identities, the log, the local sockets the gateways would
otherwise put in /tmp); ``stop`` ends the process and removes that directory.

Three S3 identities (``-s3.config``), as an operator would set them up (docs/operator-guide.md):
``admin`` (everything: makes the bucket, and plays the attacker who replaces an artifact),
``signer`` (the adapter's credential: ``Write`` under ``<bucket>/<prefix>/`` only, the rights its
presigned URLs carry) and ``reader`` (signalctl's: ``Read`` and ``List`` of the bucket).
"""

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import structlog

from localcluster import procs
from localcluster.binaries import _build
from localcluster.controlplane import Component, free_port
from shared.artifacts import StoreConfig

log = structlog.get_logger("localcluster")

BUILD_SCRIPT = Path(__file__).resolve().parent / "seaweedfs" / "build.sh"
BUCKET = "signal-artifacts"
PREFIX = "signal"


def seaweedfs_build_dir(*, show_progress: bool = False) -> Path:
    """The built SeaweedFS (``weed``), building it once (cached by content)."""
    return _build(BUILD_SCRIPT, "SeaweedFS", show_progress)


def _credential(name: str) -> dict[str, str]:
    return {"accessKey": f"{name}-{secrets.token_hex(6)}", "secretKey": secrets.token_hex(20)}


def identities() -> dict[str, dict[str, str]]:
    """Fresh credentials of the three identities (see the module docstring)."""
    return {name: _credential(name) for name in ("admin", "signer", "reader")}


def s3_config(credentials: dict[str, dict[str, str]], bucket: str, prefix: str) -> dict[str, Any]:
    """SeaweedFS's S3 identities document for ``credentials``."""
    actions = {
        "admin": ["Admin", "Read", "List", "Tagging", "Write"],
        "signer": [f"Write:{bucket}/{prefix}/*"],
        "reader": [f"Read:{bucket}", f"List:{bucket}"],
    }
    return {
        "identities": [
            {"name": f"signal-{name}", "credentials": [credentials[name]], "actions": actions[name]}
            for name in ("admin", "signer", "reader")
        ]
    }


@dataclass
class SeaweedFS:
    """One ``weed server -s3`` on 127.0.0.1; ``store(role)`` is the configuration a role uses."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="signal-seaweedfs-")))
    build_dir: Path | None = None
    bucket: str = BUCKET
    prefix: str = PREFIX
    component: Component | None = field(default=None, repr=False)
    credentials: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    s3_port: int = 0
    started_seconds: float = 0.0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def store(self, role: str = "signer") -> StoreConfig:
        """The artifact store's configuration with the credential of ``role``."""
        credential = self.credentials[role]
        return StoreConfig(
            endpoint=self.endpoint,
            bucket=self.bucket,
            prefix=self.prefix,
            access_key=credential["accessKey"],
            secret_key=credential["secretKey"],
        )

    def write_config(self, path: Path, role: str) -> Path:
        """``role``'s configuration as a directory of key files (the Secret's mounted layout)."""
        store = self.store(role)
        path.mkdir(parents=True, exist_ok=True)
        values = {"endpoint": store.endpoint, "bucket": store.bucket, "prefix": store.prefix}
        values |= {"accessKey": store.access_key, "secretKey": store.secret_key}
        for name, value in values.items():
            (path / name).write_text(value)
            (path / name).chmod(0o600)
        return path

    def client(self, role: str = "admin") -> Any:
        """A minio client with ``role``'s credential."""
        from minio import Minio  # noqa: PLC0415 - only the tests that use a store load it

        store = self.store(role)
        return Minio(store.host, store.access_key, store.secret_key, secure=False, region=store.region)

    async def start(self, timeout: float = 90.0) -> None:
        began = time.monotonic()
        build = self.build_dir if self.build_dir is not None else await asyncio.to_thread(seaweedfs_build_dir)
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.credentials = identities()
        config = self.workdir / "s3.json"
        config.write_text(json.dumps(s3_config(self.credentials, self.bucket, self.prefix)))
        config.chmod(0o600)
        ports = {name: free_port() for name in ("master", "master.grpc", "volume", "volume.grpc", "filer")}
        ports |= {"filer.grpc": free_port(), "s3.grpc": free_port()}
        self.s3_port = free_port()
        args = [
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            "-filer",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-s3.config={config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-s3.iam=false",
            f"-s3.localSocket={self.workdir / 's3.sock'}",
            f"-filer.localSocket={self.workdir / 'filer.sock'}",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=16",
            *(
                f"-{name}.port={port}" if "." not in name else f"-{name.split('.')[0]}.port.grpc={port}"
                for name, port in ports.items()
            ),
        ]
        component = Component("server", args, self.workdir / "weed.log")
        with component.log_path.open("ab") as handle:
            component.process = procs.popen(
                [str(build / "weed"), "server", *args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workdir)},
            )
        self.component = component
        try:
            await self._make_bucket(timeout)
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - began
        log.info("seaweedfs started", seconds=round(self.started_seconds, 1), s3_port=self.s3_port)

    async def _make_bucket(self, timeout: float) -> None:
        """Wait until the S3 gateway answers and its filer takes a bucket (it is ready then)."""
        assert self.component is not None
        deadline = time.monotonic() + timeout
        last = ""
        async with httpx.AsyncClient() as http:
            while time.monotonic() < deadline:
                if not self.component.running():
                    raise RuntimeError(f"weed exited during start-up:\n{self.component.tail(60)}")
                try:
                    await http.get(f"{self.endpoint}/", timeout=2.0)
                    client = self.client("admin")
                    if not await asyncio.to_thread(client.bucket_exists, self.bucket):
                        await asyncio.to_thread(client.make_bucket, self.bucket)
                    return
                except Exception as exc:  # not up yet: refused, or the filer not ready
                    last = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(0.3)
        raise RuntimeError(f"seaweedfs not ready after {timeout}s ({last}):\n{self.component.tail(60)}")

    def rss_bytes(self) -> int:
        """The server's resident memory now (from /proc), 0 when not running."""
        if self.component is None or self.component.process is None:
            return 0
        status = Path(f"/proc/{self.component.process.pid}/status")
        for line in status.read_text().splitlines() if status.exists() else []:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def halt(self) -> None:
        """Stop the server but keep its data (an outage; ``stop`` ends it for good)."""
        if self.component is not None:
            self.component.stop(10.0)

    def stop(self) -> None:
        """Stop the server and remove its work directory: nothing is left behind."""
        self.halt()
        shutil.rmtree(self.workdir, ignore_errors=True)
