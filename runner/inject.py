"""``signal-runner inject --to DIR``: copy Signal's runner into ``DIR`` so that a check's own
image runs it (issue 44: bring your own image).

The backend Pod of a check that names its own image gets an init container of the runner
image that runs this role into a Pod-local volume; the check's container then starts
``python3 -I -S DIR/runner/launch.py`` with the image's own ``python3`` (3.10 or newer). The
runner imports only the standard library and the stdlib-only modules of ``shared/``
(tests/unit/test_runner_wire.py), so copying the two packages' Python sources is enough: the
image needs nothing of Signal's installed, only its interpreter. Files are copied read-only.
Pure standard library; no third-party import.
"""

from __future__ import annotations

import os
import shutil
import sys

PACKAGES = ("runner", "shared")
MIN_PYTHON = (3, 10)
"""The oldest interpreter the injected runner supports (``X | Y`` unions evaluated at import)."""


def package_root() -> str:
    """The directory that holds this ``runner`` package (the image's site-packages)."""
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def inject(target: str, root: str | None = None) -> list[str]:
    """Copy every ``.py`` file of ``PACKAGES`` from ``root`` under ``target``; the copied paths."""
    source = root or package_root()
    copied = []
    for package in PACKAGES:
        for directory, subdirs, files in os.walk(os.path.join(source, package)):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            relative = os.path.relpath(directory, source)
            os.makedirs(os.path.join(target, relative), mode=0o755, exist_ok=True)
            for name in sorted(f for f in files if f.endswith(".py")):
                destination = os.path.join(target, relative, name)
                shutil.copyfile(os.path.join(directory, name), destination)
                os.chmod(destination, 0o444)
                copied.append(os.path.join(relative, name))
    if not copied:
        raise OSError(f"no runner sources under {source}")
    return copied


def cmd_inject(target: str) -> int:
    try:
        copied = inject(target)
    except OSError as exc:
        print(f"signal-runner inject: cannot copy the runner into {target}: {exc}", file=sys.stderr)
        return 1
    print(f"signal-runner inject: {len(copied)} files into {target}", file=sys.stderr)
    return 0
