"""Signal's services started here run as in their images: without the development tools' packages.

The images hold the distribution and its runtime dependencies alone (``Dockerfile.*``: each
image's ``requirements/<image>.lock``, a part of them, then the distribution; pip and setuptools
removed); this checkout's virtual environment also holds the
development tools (pytest, mypy, schemathesis, playwright...) and what they pull in. A runtime
package may import an optional one when it is there: structlog imports rich (and greenlet), about
90 ms of every service's start on this machine that no image pays, counted in the benchmarks'
windows until now (issue 15 goal 7: a window holds only what it claims to measure).

``image_env()`` is what a service process started here adds to its environment: this package's
``imagesite`` directory first on PYTHONPATH, whose ``sitecustomize`` makes every top-level module
that only development distributions provide unimportable (``SIGNAL_LOCAL_ABSENT_MODULES``). Used
for the Pods of Signal's images on simulated Nodes (localcluster/podprocess.py) and for the
services the tests, benchmarks and the simulated demo start as local processes. A service that
needed a development-only package would fail here as it would in its image.
"""

import functools
import os
import re
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "project-signal"
SITE_DIR = Path(__file__).resolve().parent / "imagesite"
ABSENT_ENV = "SIGNAL_LOCAL_ABSENT_MODULES"


def normalise(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalise(re.split(r"[\s;<>=!~\[(@]", requirement.strip(), maxsplit=1)[0])


def runtime_closure(distribution: str = DISTRIBUTION) -> set[str]:
    """``distribution`` and, recursively, every requirement without an extra (markers are not
    evaluated: a superset, so that nothing a service may need is ever taken away)."""
    seen: set[str] = set()
    todo = [normalise(distribution)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        todo += [requirement_name(r) for r in requires if "extra ==" not in r.replace('"', "").replace("'", "")]
    return seen


def top_level(files: Iterable[str], declared: str | None = None) -> set[str]:
    """The top-level import names of a distribution: its ``top_level.txt`` when it has one, else
    the first part of each installed path (packages, modules, extension modules), leaving out its
    metadata, scripts and ``.pth`` files."""
    if declared:
        return {line.strip() for line in declared.splitlines() if line.strip()}
    names: set[str] = set()
    for file in files:
        parts = Path(file).parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith((".dist-info", ".egg-info", ".data")):
            continue
        head = parts[0]
        if len(parts) > 1:
            names.add(head)
        elif head.endswith(".py"):
            names.add(head.removesuffix(".py"))
        elif head.endswith(".so"):
            names.add(head.split(".", 1)[0])
    return names


@functools.cache
def development_only_modules() -> tuple[str, ...]:
    """Top-level modules that only distributions outside the runtime closure provide here."""
    runtime = runtime_closure()
    provided: dict[str, set[str]] = {}
    for dist in metadata.distributions():
        name = normalise(dist.metadata["Name"] or "")
        files = [str(f) for f in dist.files or []]
        provided.setdefault(name, set()).update(top_level(files, dist.read_text("top_level.txt")))
    kept = set().union(*(modules for name, modules in provided.items() if name in runtime))
    absent = set().union(*(modules for name, modules in provided.items() if name not in runtime)) - kept
    return tuple(sorted(m for m in absent if m.isidentifier() and m != "sitecustomize"))


def image_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables a Signal service started here gets, so that it runs as in its image."""
    environ = dict(os.environ) if environ is None else environ
    path = [str(SITE_DIR), *filter(None, environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(path), ABSENT_ENV: ",".join(development_only_modules())}
