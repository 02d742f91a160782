"""The adapter step's interface, shared by the WorkflowTemplate (adapter/workflow_template.py,
built with hera) and the adapter process (adapter/main.py): where the step writes its output
parameters and which variable carries the runner image.

Standard library only: the adapter process starts once per check, and importing hera (its
generated Argo models) to read these names cost every step about a second of start-up."""

from typing import Final

RUNNER_IMAGE_ENV: Final = "SIGNAL_RUNNER_IMAGE"
OUTPUT_DIR: Final = "/tmp/signal"
OUTPUT_DEFAULTS: Final = {"verdict": "", "evidence-config-map": "", "evidence-digest": "", "proceed": "false"}
"""Output parameters of one check and their defaults when the adapter wrote no file."""
