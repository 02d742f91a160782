"""Structured logging for every Signal service: JSON lines on stderr in production
(``--log-format json``), a readable console rendering for local use, at the level of
``--log-level`` (``info`` unless told otherwise: ``debug``, ``info``, ``warning``, ``error``)."""

import argparse
import logging
import os
import sys

import structlog

LOG_LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LOG_LEVEL = "info"


def add_log_level_flag(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` for a service's command line (default ``info``, or ``$SIGNAL_LOG_LEVEL``)."""
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=os.environ.get("SIGNAL_LOG_LEVEL", DEFAULT_LOG_LEVEL),
        help="least severe log records written (default info)",
    )


def configure_logging(fmt: str, level: str = DEFAULT_LOG_LEVEL) -> None:
    if level not in LOG_LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LOG_LEVELS)}")
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
