"""The real Prometheus and promtool (localcluster/prometheus/build.sh, cached by content) for the
tests of the observability pack: the rule file from deploy/monitoring/prometheusrule.yaml, and
a Prometheus on loopback with a static scrape configuration."""

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from localcluster.binaries import _build
from localcluster.controlplane import free_port
from tests.controller_support import eventually

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "localcluster" / "prometheus" / "build.sh"
RULE = REPO / "deploy" / "monitoring" / "prometheusrule.yaml"


def build_dir() -> Path:
    return _build(BUILD_SCRIPT, "Prometheus")


def promtool() -> Path:
    return build_dir() / "promtool"


def rules_file(directory: Path, spec: dict[str, Any] | None = None) -> Path:
    """The PrometheusRule's spec (its ``groups``) as a Prometheus rule file, ``signal-rules.yaml``
    in ``directory`` (the name deploy/monitoring/tests/rules-test.yaml expects)."""
    if spec is None:
        spec = yaml.safe_load(RULE.read_text())["spec"]
    path = directory / "signal-rules.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@dataclass
class Prometheus:
    """One ``prometheus`` on 127.0.0.1 scraping ``targets`` (host:port) every second, with the
    Signal rules loaded."""

    workdir: Path
    targets: list[str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        rules_file(self.workdir)
        config = {
            # 2 s: a scrape of a busy controller on a loaded two-core machine may take over 1 s,
            # and Prometheus' scrape timeout is at most the interval.
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
            "rule_files": ["signal-rules.yaml"],
            "scrape_configs": [
                {"job_name": "signal-controller", "static_configs": [{"targets": self.targets}]},
            ],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = (self.workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                str(build_dir() / "prometheus"),
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.endswith("_PROXY") and not k.endswith("_proxy")},
        )
        log.close()

    def logs(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` (HTTP API ``/api/v1/query``)."""
        async with httpx.AsyncClient(timeout=10.0) as http:
            answer = (await http.get(f"{self.url}/api/v1/query", params={"query": expr})).json()
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    async def ready(self, timeout: float = 60.0) -> None:
        async def answers() -> bool | None:
            assert self.process is not None
            assert self.process.poll() is None, self.logs()
            try:
                async with httpx.AsyncClient(timeout=5.0) as http:
                    return (await http.get(f"{self.url}/-/ready")).status_code == 200 or None
            except httpx.HTTPError:
                return None

        async def explain() -> str:
            return self.logs()

        await eventually(answers, timeout=timeout, interval=0.2, what="Prometheus ready", explain=explain)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
