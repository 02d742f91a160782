"""``signal-portal``: the read-only validation-result portal.

    signal-portal [--kubeconfig FILE] [--namespace NS ...] [--port 8080] [--auth sar|none]
                  [--freshness 7d] [--cluster NAME]

It reads Runs (in the given namespaces, or all), profiles, Nodes and evidence with its own
identity (in a Pod: its ServiceAccount; else the kubeconfig) and serves the API of
portal/api.py. ``--freshness`` is the window after which a verified result is Stale for
profiles without a ``recurrence.interval`` (which wins when set); it takes Go-style
durations plus days (``7d``, ``36h``, ``90m``). ``--auth none`` skips authentication and
authorization: for local use only (a warning is logged).
"""

import argparse
import asyncio
import contextlib
import logging
import re
import signal
import sys
from datetime import timedelta

import structlog
from aiohttp import web

from kubeio import logs
from kubeio.client import Kube
from portal.api import make_app
from portal.auth import Authorizer, OpenAccess, ReviewAccess
from portal.sources import Sources
from shared.durations import DurationError, parse_duration

log = structlog.get_logger("portal")


def parse_window(text: str) -> timedelta:
    """``7d``, ``1d12h``, or any Go-style duration (``36h``, ``90m``); must be positive."""
    match = re.fullmatch(r"(?:([0-9]+)d)?(.*)", text)
    days, rest = (match.group(1), match.group(2)) if match else (None, text)
    try:
        window = timedelta(days=int(days or 0)) + (parse_duration(rest) if rest else timedelta())
    except DurationError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 7d, 36h or 90m") from exc
    if window <= timedelta() or (not days and not rest):
        raise argparse.ArgumentTypeError(f"{text!r}: the freshness window must be positive")
    return window


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="signal-portal", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    p.add_argument(
        "--namespace", action="append", default=[], help="workspace to read Runs from (repeatable; none: all)"
    )
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--host", default="0.0.0.0", help="address to listen on")
    p.add_argument("--auth", choices=("sar", "none"), default="sar")
    p.add_argument(
        "--freshness",
        type=parse_window,
        default=timedelta(days=7),
        help="Stale after this long, for profiles without recurrence.interval (default 7d)",
    )
    p.add_argument("--cluster", default="default", help="cluster name written into each result's scope")
    p.add_argument("--resync", type=float, default=30.0, help="seconds between full re-classifications")
    p.add_argument("--log-format", choices=("json", "console"), default="json")
    return p


def configure_logging(fmt: str) -> None:
    logs.configure_logging(fmt)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


async def serve(args: argparse.Namespace) -> None:
    kube = await Kube.connect(kubeconfig=args.kubeconfig, field_manager="signal-portal")
    authorizer: Authorizer
    if args.auth == "none":
        log.warning("authorization disabled (--auth none): every caller sees every workspace; local use only")
        authorizer = OpenAccess()
    else:
        authorizer = ReviewAccess(kube)
    sources = Sources(
        kube, namespaces=args.namespace, cluster=args.cluster, default_window=args.freshness, resync=args.resync
    )
    sources.start()
    runner = web.AppRunner(make_app(sources, authorizer), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    log.info("portal serving", port=args.port, auth=args.auth, namespaces=args.namespace or "all")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await sources.stop()
        await kube.close()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    configure_logging(args.log_format)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
