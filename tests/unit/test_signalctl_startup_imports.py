"""``signalctl``'s operator commands load no HTTP library of their own (issue 45 §3): kubeio
speaks HTTP itself and raises only its own errors (``TransportError``) or ``OSError`` /
``TimeoutError``, so importing aiohttp at every start only to catch ``aiohttp.ClientError``
cost start-up time for an error that never comes."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["signalctl.main", "signalctl.commands"])
def test_the_operator_commands_import_no_http_library(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in ('aiohttp', 'httpx', 'yarl') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"
