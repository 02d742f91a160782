"""localcluster/imageenv.py: Signal's services started here (simulated Nodes' Pods of Signal's
images, the tests', benchmarks' and simulated demo's local processes) import nothing that only the
development tools' distributions provide, as in their images (``pip install .`` alone)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster import imageenv, podprocess

SERVICES = "import adapter.main, controller.process.main, portal.main, signalctl.main"
LOADED = (
    "import sys, structlog.dev; print(structlog.dev.rich is None); "
    "print(','.join(sorted({m.split('.')[0] for m, v in sys.modules.items() if v is not None})))"
)


@pytest.mark.parametrize(
    ("files", "declared", "names"),
    [
        (["rich/__init__.py", "rich/console.py", "rich-14.0.dist-info/RECORD"], None, {"rich"}),
        (["six.py", "__pycache__/six.cpython-311.pyc", "six-1.17.dist-info/METADATA"], None, {"six"}),
        (["_cffi_backend.cpython-311-x86_64-linux-gnu.so"], None, {"_cffi_backend"}),
        (["../../bin/ruff", "ruff/__init__.py", "distutils-precedence.pth"], None, {"ruff"}),
        (["yaml/__init__.py", "_yaml/__init__.py"], "_yaml\nyaml\n", {"_yaml", "yaml"}),
        (["a/b.py"], "declared\n", {"declared"}),
    ],
)
def test_top_level_names(files: list[str], declared: str | None, names: set[str]) -> None:
    assert imageenv.top_level(files, declared) == names


def test_the_runtime_closure_is_the_distributions_requirements() -> None:
    closure = imageenv.runtime_closure()
    assert {"project-signal", "pydantic", "pydantic-core", "structlog", "aiohttp"} <= closure
    # hera, httpx and kubernetes_asyncio are extras (tools, local, dev): in no image (issue 45 §4).
    assert closure.isdisjoint({"pytest", "mypy", "ruff", "schemathesis", "rich", "playwright"})
    assert closure.isdisjoint({"hera", "httpx", "kubernetes-asyncio", "testcontainers"})
    absent = set(imageenv.development_only_modules())
    assert {"pytest", "mypy", "rich", "schemathesis", "hera", "httpx", "kubernetes_asyncio"} <= absent
    assert absent.isdisjoint({"pydantic", "pydantic_core", "structlog", "yaml", "aiohttp", "shared", "adapter"})


def run_python(code: str, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", f"{SERVICES}; {code}"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_services_start_as_in_their_images() -> None:
    absent = set(imageenv.development_only_modules())
    rich_absent, loaded = run_python(LOADED, {**os.environ, **imageenv.image_env()})
    assert rich_absent == "True"
    # _distutils_hack: setuptools' .pth in this environment, run by site before sitecustomize;
    # no image has it (pip and setuptools are removed there).
    assert set(loaded.split(",")) & absent <= {"_distutils_hack"}
    # Without it, this environment's structlog loads rich (what the images never pay).
    rich_absent, loaded = run_python(LOADED, dict(os.environ))
    assert rich_absent == "False"
    assert "rich" in loaded.split(",")


def test_pods_of_signals_images_get_it_and_others_do_not(tmp_path: Path) -> None:
    def env_of(image: str) -> dict[str, str]:
        pod = {"metadata": {"name": "p", "namespace": "n", "uid": "u"}, "spec": {}}
        container = {"name": "main", "image": image, "command": ["/bin/true"]}
        return podprocess.process_spec(pod, container, tmp_path, {}).env

    for image in ("projectsignal.dev/adapter:0.1.0", "projectsignal.dev/controller:0.1.0", "projectsignal.dev/portal"):
        env = env_of(image)
        assert env["PYTHONPATH"].split(os.pathsep)[0] == str(imageenv.SITE_DIR)
        assert "rich" in env[imageenv.ABSENT_ENV].split(",")
    for image in ("projectsignal.dev/runner:0.1.0", "busybox"):
        assert imageenv.ABSENT_ENV not in env_of(image)
