#!/usr/bin/python3 -IS
"""The runner image's entrypoint: ``signal-runner`` started as ``python3 -I -S`` (isolated,
without ``site``).

A check starts one runner per participant (and per MPI rank), so the runner's start is paid
that many times; the runner imports only the standard library and the stdlib-only modules of
shared/ (tests/unit/test_runner_wire.py), so it needs no ``site``: no site-packages scan and no
``.pth`` hooks, and isolated mode ignores every ``PYTHON*`` variable of the Pod's environment
and the user's site directory. The package root (the directory holding ``runner/``: the image's
site-packages, or the repository on a simulated Node) is the one entry added to the path.

In the image, ``/opt/signal/bin/signal-runner`` is a link to this file (Dockerfile.runner);
a simulated Node runs it the same way (localcluster/podprocess.py). Arguments as
``signal-runner`` (runner/main.py)."""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    if sys.version_info < (3, 10):  # noqa: UP036 - a check's own image (runner/inject.py): say so, not a SyntaxError
        from shared.limits import EXIT_PYTHON_TOO_OLD

        sys.stderr.write("signal-runner: python3 {}.{} is older than 3.10\n".format(*sys.version_info[:2]))
        sys.exit(EXIT_PYTHON_TOO_OLD)
    from runner.main import main

    sys.exit(main())
