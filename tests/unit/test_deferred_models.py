"""Signal's models build their validators on first use (shared/meta.py, ``defer_build``):
every model of every package must still build, and a first use from many threads at once must
validate as strictly as any later one (a half-built model must never fall back to a laxer
parent's validator)."""

import importlib
import pkgutil
import subprocess
import sys

import pytest

from shared.meta import WireModel

PACKAGES = ("shared", "controller", "adapter", "portal", "signalctl", "kubeio", "runner")


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_every_model_builds() -> None:
    for package in PACKAGES:
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            importlib.import_module(info.name)
    models = _subclasses(WireModel)
    assert len(models) > 40, sorted(m.__name__ for m in models)
    for model in sorted(models, key=lambda m: m.__qualname__):
        model.model_rebuild()
        assert model.__pydantic_complete__, model


FIRST_USE = """
import threading
from concurrent.futures import ThreadPoolExecutor
from pydantic import ValidationError
from shared.result import RunnerIdentity

assert not RunnerIdentity.__pydantic_complete__, "imported already built: nothing deferred to race"
start = threading.Barrier(16)

def first_use(_):
    start.wait()
    try:
        RunnerIdentity.model_validate({"nodeName": "n", "podName": "p", "podUid": "u", "unexpected": 1})
    except ValidationError as exc:
        return "extra_forbidden" in str(exc)
    return False

with ThreadPoolExecutor(16) as pool:
    print(sorted(set(pool.map(first_use, range(16)))))
"""


@pytest.mark.parametrize("attempt", range(3))
def test_a_first_use_from_many_threads_is_as_strict_as_any(attempt: int) -> None:
    done = subprocess.run([sys.executable, "-c", FIRST_USE], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True]", "a thread validated with a laxer validator: " + done.stdout
