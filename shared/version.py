"""The version of Project Signal this source tree builds (the ``version`` of pyproject.toml;
tests/unit/test_signalctl_completion.py holds them equal). Pure; named once here: the images do
not keep the package's metadata, so nothing reads it from there."""

from typing import Final

VERSION: Final = "0.1.0"
