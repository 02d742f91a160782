"""The artifact store's wire rules that need no pydantic (issue 41 §2): what the adapter passes
a backend Pod's runner, where a script writes files to keep, and where each artifact is stored.

Standard library only: the runner imports this module (and only when the adapter gave it upload
URLs, so a check without a store starts as before). ``shared.artifacts`` builds the typed models
and the store's configuration on top of it. Pure; no I/O.

The runner never holds a credential of the store. The adapter signs, for each backend Pod, one
S3 ``PUT`` URL per object it may write (``UPLOAD_ENV_PREFIX`` + slot: ``STDOUT``, ``STDERR``,
``OUT_0``..): each URL names one exact key under the Run's prefix and expires with the check's
deadline. The runner uploads the complete captured stdout and stderr and each regular file the
script wrote directly in ``$SIGNAL_OUTPUT_DIR`` (at most ``MAX_OUTPUT_FILES``, names matching
``OUTPUT_NAME_PATTERN``), hashing what it sends, and reports each artifact's name, sha256 and
size in its result; the adapter records them in the check evidence with the key it signed.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from typing import Final

UPLOAD_ENV_PREFIX: Final = "SIGNAL_ARTIFACT_PUT_"
"""``<prefix><SLOT>``: the presigned PUT URL of one slot, in the runner's environment only (the
script's environment is built without it: runner/execute.clean_environment)."""
OUTPUT_DIR_ENV: Final = "SIGNAL_OUTPUT_DIR"
"""The directory a script writes files to keep; set for the script only when a store is configured."""
STDOUT: Final = "stdout"
STDERR: Final = "stderr"
OUTPUT_PREFIX: Final = "out/"
"""An output file's artifact name is ``out/<file name>``."""
MAX_OUTPUT_FILES: Final = 4
MAX_OUTPUT_NAME_CHARS: Final = 64
OUTPUT_NAME_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
MAX_ARTIFACTS: Final = 2 + MAX_OUTPUT_FILES
UPLOAD_TIMEOUT_SECONDS: Final = 10.0
"""Each network operation of an upload (connect, send a block, read the answer)."""
UPLOAD_BUDGET_SECONDS: Final = 120.0
"""All of one runner's uploads together; past it the result is Inconclusive."""


def slots() -> list[str]:
    """Every upload slot, in the order the runner fills them."""
    return ["STDOUT", "STDERR", *(f"OUT_{i}" for i in range(MAX_OUTPUT_FILES))]


def slot_of(name: str, position: int) -> str:
    """The slot of artifact ``name``, the ``position``-th output file for an ``out/`` name."""
    if name == STDOUT:
        return "STDOUT"
    if name == STDERR:
        return "STDERR"
    return f"OUT_{position}"


def object_key(
    prefix: str, namespace: str, run_name: str, run_uid: str, check: int, participant: int, slot: str
) -> str:
    """Where slot ``slot`` of participant ``participant`` of check ``check`` of a Run is stored:
    ``<prefix>/<namespace>/<run>/<run uid>/c<check>/p<participant>/<slot, lower case>``."""
    head = prefix.strip("/")
    return f"{head + '/' if head else ''}{namespace}/{run_name}/{run_uid}/c{check}/p{participant}/{slot.lower()}"
