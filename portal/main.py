"""``signal-portal``: the read-only validation-result portal.

    signal-portal [--kubeconfig FILE] [--namespace NS ...] [--host ADDR] [--port 8080]
                  [--auth sar|none] [--audience signal-portal]
                  [--tls-cert-file FILE --tls-key-file FILE] [--cluster NAME]

It reads Runs (in the given namespaces, or all), profiles, Nodes and evidence with its own
identity (in a Pod: its ServiceAccount; else the kubeconfig) and serves the API of
portal/api.py. How long a Pass stays fresh is each profile's ``freshness`` (default: its
recurrence interval; see shared/profile.py), not a portal setting.

Exposure is refused unless it is explicit:

* ``--auth sar`` (the default) accepts only tokens minted for ``--audience`` (``kubectl create
  token SA --audience signal-portal``); a token for the API server is refused.
* ``--auth none`` skips authentication and authorization: it binds only to a loopback address
  unless ``--insecure-unauthenticated-on-network`` is also given.
* Without ``--tls-cert-file``/``--tls-key-file`` the portal speaks plain HTTP, which it does
  only on a loopback address unless ``--insecure-plaintext-behind-proxy`` says that a proxy
  in front of it terminates TLS (docs/security.md, "Portal").
"""

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import ssl
import sys

import structlog
from aiohttp import web

from kubeio import logs
from kubeio.client import Kube
from portal.api import make_app
from portal.auth import DEFAULT_AUDIENCE, Authorizer, OpenAccess, ReviewAccess
from portal.evidence_cache import DEFAULT_MAX_BYTES
from portal.sources import Sources

log = structlog.get_logger("portal")
UNAUTHENTICATED_OVERRIDE = "--insecure-unauthenticated-on-network"
PLAINTEXT_OVERRIDE = "--insecure-plaintext-behind-proxy"


class Refused(Exception):
    """A configuration the portal refuses to serve (exit 2, with what to do instead)."""


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (an empty host, 0.0.0.0 or
    :: listen everywhere, so they are not)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if not host:
        return False
    try:
        found = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(str(a[4][0]).split("%")[0]).is_loopback for a in found)


def check_exposure(args: argparse.Namespace) -> None:
    """Refuse an exposure nobody asked for explicitly."""
    loopback = is_loopback(args.host)
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        raise Refused("--tls-cert-file and --tls-key-file go together: give both, or neither")
    if args.auth == "none" and not loopback and not args.insecure_unauthenticated_on_network:
        raise Refused(
            f"--auth none on {args.host!r} would show every workspace to anyone who can reach it: "
            f"bind to 127.0.0.1 (--host 127.0.0.1), use --auth sar, or, if you really mean it, "
            f"add {UNAUTHENTICATED_OVERRIDE}"
        )
    if not args.tls_cert_file and not loopback and not args.insecure_plaintext_behind_proxy:
        raise Refused(
            f"plain HTTP on {args.host!r} would carry bearer tokens unencrypted: give --tls-cert-file and "
            f"--tls-key-file (a mounted serving certificate), bind to 127.0.0.1, or, when a proxy in front "
            f"of the portal terminates TLS, add {PLAINTEXT_OVERRIDE}"
        )


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise Refused(f"cannot load the serving certificate {cert} / key {key}: {exc}") from exc
    return context


def file_signature(*paths: str) -> tuple[tuple[int, int, int], ...]:
    """What changes when a file is replaced or rewritten (a mounted Secret is swapped by a
    symlink; ``os.stat`` follows it to the new file)."""
    return tuple((st.st_ino, st.st_mtime_ns, st.st_size) for st in (os.stat(path) for path in paths))


async def reload_certificate(context: ssl.SSLContext, cert: str, key: str, every: float, stop: asyncio.Event) -> None:
    """Load the serving certificate again into ``context`` whenever its files change (a renewed
    certificate, cert-manager's or the kubelet's Secret update), checked every ``every``
    seconds: new connections get the new certificate, open ones keep theirs. A pair that does
    not load (a half-written renewal, a key of another certificate) is logged and retried; the
    certificate in use stays until one loads."""
    seen = file_signature(cert, key)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        try:
            current = file_signature(cert, key)
            if current == seen:
                continue
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            log.error("the changed serving certificate did not load; still serving the previous one", error=str(exc))
            continue
        seen = current
        log.info("serving certificate reloaded", cert=cert)


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
        "--audience",
        default=DEFAULT_AUDIENCE,
        help="the audience callers' tokens must be minted for (kubectl create token SA --audience ...)",
    )
    p.add_argument("--tls-cert-file", default=None, help="serving certificate (PEM, with its chain)")
    p.add_argument("--tls-key-file", default=None, help="private key of the serving certificate (PEM)")
    p.add_argument(
        "--tls-reload-seconds",
        type=float,
        default=10.0,
        help="how often to check the certificate files and load them again when they changed",
    )
    p.add_argument(
        UNAUTHENTICATED_OVERRIDE,
        action="store_true",
        help="DANGEROUS: allow --auth none on a non-loopback address (everyone sees every workspace)",
    )
    p.add_argument(
        PLAINTEXT_OVERRIDE,
        action="store_true",
        help="allow plain HTTP on a non-loopback address because a proxy in front terminates TLS",
    )
    p.add_argument("--cluster", default="default", help="cluster name written into each result's scope")
    p.add_argument("--resync", type=float, default=30.0, help="seconds between full re-classifications")
    p.add_argument(
        "--max-evidence-cache-mib",
        type=int,
        default=DEFAULT_MAX_BYTES // (1024 * 1024),
        help="at most this much Run evidence is kept in memory (least recently used beyond it is read again)",
    )
    p.add_argument("--log-format", choices=("json", "console"), default="json")
    logs.add_log_level_flag(p)
    return p


def configure_logging(fmt: str, level: str = logs.DEFAULT_LOG_LEVEL) -> None:
    logs.configure_logging(fmt, level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


async def serve(args: argparse.Namespace) -> None:
    context = tls_context(args.tls_cert_file, args.tls_key_file) if args.tls_cert_file else None
    kube = await Kube.connect(kubeconfig=args.kubeconfig, field_manager="signal-portal")
    authorizer: Authorizer
    if args.auth == "none":
        log.warning(
            "AUTHORIZATION DISABLED (--auth none): every caller sees every workspace",
            host=args.host,
            on_network=args.insecure_unauthenticated_on_network,
        )
        authorizer = OpenAccess()
    else:
        authorizer = ReviewAccess(kube, audience=args.audience)
    if context is None and not is_loopback(args.host):
        log.warning("serving plain HTTP on a network address: a proxy in front must terminate TLS", host=args.host)
    sources = Sources(
        kube,
        namespaces=args.namespace,
        cluster=args.cluster,
        resync=args.resync,
        max_evidence_bytes=args.max_evidence_cache_mib * 1024 * 1024,
    )
    sources.start()
    runner = web.AppRunner(make_app(sources, authorizer), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, ssl_context=context)
    await site.start()
    log.info(
        "portal serving",
        host=args.host,
        port=args.port,
        tls=context is not None,
        auth=args.auth,
        audience=args.audience if args.auth == "sar" else None,
        namespaces=args.namespace or "all",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    reloading = None
    if context is not None:
        reloader = reload_certificate(context, args.tls_cert_file, args.tls_key_file, args.tls_reload_seconds, stop)
        reloading = asyncio.create_task(reloader, name="certificate reload")
    try:
        await stop.wait()
    finally:
        if reloading is not None:
            await reloading
        await runner.cleanup()
        await sources.stop()
        await kube.close()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    configure_logging(args.log_format, args.log_level)
    try:
        check_exposure(args)
        asyncio.run(serve(args))
    except Refused as exc:
        print(f"signal-portal: refused: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
