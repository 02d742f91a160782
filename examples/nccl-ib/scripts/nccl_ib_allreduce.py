#!/usr/bin/env python3
"""Two Nodes, one GPU each: prove that NCCL's inter-node traffic used NET/IB (InfiniBand or
RoCE verbs, NCCL's built-in IB transport or the IBext plugin, with or without GPUDirect RDMA)
and not a socket fall-back, and that the bus bandwidth reaches the operator's threshold.

Runs as a Signal MPIJob check: every rank runs this file (mounted alone, run by its ``#!``
line with a clean environment: ``SIGNAL_RANK``, ``SIGNAL_WORLD_SIZE``, ``SIGNAL_WORKDIR``,
``PATH``, ``NVIDIA_*``/``CUDA_*``/``NCCL_*``/``UCX_*`` and OpenMPI's own variables, so that
the ``all_reduce_perf`` it starts joins the MPI job as the same rank). Each rank runs
nccl-tests' ``all_reduce_perf`` with ``NCCL_DEBUG=INFO``, copies its output to stdout (so it
reaches mpirun's output, which the launcher digests) and verifies its own log:

* every rank: ``all_reduce_perf`` exited 0; no error (``NCCL WARN``, ``ncclSystemError`` and
  the other NCCL error codes, ``Test NCCL failure``, ...); NCCL's ``Init COMPLETE`` for this
  rank in a world of ``EXPECTED_WORLD_SIZE``; an IB device in use (``NET/IB : Using
  [0]mlx5_0:1/IB``, or ``/RoCE``); at least one ``[send]`` and one ``[receive]`` channel, and
  every channel ``via NET/IB...`` (``NET/IB``, ``NET/IBext``, ``NET/IBext_v8``, ...; one
  rank per Node, so every peer is on another Node). ``via NET/Socket``, ``NET/Socket :
  Using`` or ``Using network Socket`` is a socket fall-back; ``P2P``/``SHM`` channels mean
  two ranks shared a Node;
* rank 0 also (only rank 0 gets nccl-tests' header and summary): the header lists ranks
  0..N-1 once each on N distinct hosts (N = ``EXPECTED_WORLD_SIZE``), its own NCCL lines come
  from its own host; the run completed (result rows, ``# Out of bounds values : 0 OK``,
  ``# Avg bus bandwidth : X``, no row with a wrong element); and the bus bandwidth
  (``BUSBW_METRIC``) is at least ``MIN_BUSBW_GBPS``.

A rank exits 0 only when its verification passes (1: failed; 2: not configured or not run as
an MPI rank), so the launcher proves a failure on the Node whose rank saw it. Rank 0 writes
its measurements to ``$SIGNAL_MEASUREMENTS_FILE`` when the runner provides one, and every
rank prints one ``NCCL-IB-CHECK {json}`` line with its verdict, reasons and measurements.

The project ships no hardware thresholds: until ``MIN_BUSBW_GBPS`` is set below, every rank
exits 2 without running anything. Editing this file changes the source bundle's digest:
recompute it (see the README next to the profile).

The verification is pure functions of the captured text (``parse_log``, ``verify``); only
``main`` does I/O. Standard library only.
"""

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# --------------------------------------------------------------------------------------------
# Operator configuration. Changing anything here changes the bundle digest the profile pins.
# --------------------------------------------------------------------------------------------

MIN_BUSBW_GBPS: float | None = None
"""REQUIRED. Minimum bus bandwidth in GB/s (gigaBYTES per second, the unit nccl-tests prints;
a 400 Gb/s NDR port is 50 GB/s) measured by ``BUSBW_METRIC``. Derive it from a known-good pair
of your own Nodes with the same ``ALL_REDUCE_PERF_ARGS``. None: the check refuses to run."""

BUSBW_METRIC: str = "largest"
"""Which bus bandwidth is compared with the threshold: ``largest`` (the row of the largest
message size, the lower of its out-of-place and in-place figures) or ``avg`` (nccl-tests'
``# Avg bus bandwidth`` over every size, which small sizes pull down)."""

ALL_REDUCE_PERF: str = "/opt/nccl-tests/build/all_reduce_perf"
"""nccl-tests' all_reduce_perf, built with MPI=1, inside the runner image."""

ALL_REDUCE_PERF_ARGS: tuple[str, ...] = ("-b", "8M", "-e", "4G", "-f", "2", "-g", "1", "-c", "1", "-w", "5", "-n", "20")
"""One GPU per rank (-g 1) and data validation on (-c 1: a wrong element fails the check)."""

EXPECTED_WORLD_SIZE: int = 2
"""Ranks (= Nodes, one rank per Node) the MPIJob must have: the profile's participant count."""

REQUIRE_GDRDMA: bool = False
"""True: every channel must also use GPUDirect RDMA (``.../GDRDMA``)."""

NCCL_ENV: dict[str, str] = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
"""Set for all_reduce_perf; the verification needs NCCL's INIT and NET INFO lines."""

EXTRA_ENV: dict[str, str] = {}
"""More environment for all_reduce_perf, e.g. ``{"LD_LIBRARY_PATH": "/opt/hpcx/nccl_rdma_sharp_plugin/lib"}``
(the runner passes only PATH, HOME, LANG, TMPDIR and NVIDIA_/CUDA_/NCCL_/UCX_/OpenMPI variables)."""

ALLOWED_WARNINGS: tuple[str, ...] = ()
"""Regular expressions of ``NCCL WARN`` lines you accept as harmless (searched in the line)."""

MAX_LOG_BYTES: int = 64 * 1024 * 1024
"""More output than this is not a log we can vouch for: the check fails."""

# --------------------------------------------------------------------------------------------
# Parsing (pure).
# --------------------------------------------------------------------------------------------

RESULT_PREFIX = "NCCL-IB-CHECK "
METRICS = ("largest", "avg")

# hostname:pid:tid [cudaDev] NCCL INFO ...; WARN adds the source file:line before NCCL (the hostname is cut at '.')
_NCCL_LINE = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:\S+:\d+ )?NCCL (?P<level>INFO|WARN|TRACE) "
)
# nccl-tests header: "#  Rank  0 Group  0 Pid  57 on host device  0 [0x18] NVIDIA H100 ..." (older: no Group)
_RANK_HEADER = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+\d+"
)
# "Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA" (NCCL >= 2.19: cudaDev; older: busId in hex)
_CHANNEL = re.compile(
    r"NCCL INFO Channel (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)\[[0-9a-fA-Fx]+\] -> (?P<dst>\d+)\[[0-9a-fA-Fx]+\]"
    r" \[(?P<direction>send|receive)\] via (?P<via>\S+)"
)
# "NET/IBext_v8/0/GDRDMA", "NET/IB/1(0)/GDRDMA/Shared" (PXN), "NET/Socket/0"
_NET_VIA = re.compile(r"^NET/(?P<net>[A-Za-z][A-Za-z0-9_]*)/(?P<dev>\d+)(?:\(\d+\))?(?P<flags>(?:/[A-Za-z]+)*)$")
_IB_NET = re.compile(r"^IB(?:ext(?:_v\d+)?)?$")
# "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>" (also NET/IBext...)
_IB_USING = re.compile(r"NCCL INFO NET/IB\w* : Using (?P<devices>.*?)\s*;\s*OOB")
_IB_DEVICE = re.compile(r"\[\d+\](?P<name>[\w.-]+:\d+)/(?P<link>IB|RoCE)\b")
_SOCKET_USING = re.compile(r"NCCL INFO NET/Socket : Using ")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (?P<net>\S+)")
_INIT_COMPLETE = re.compile(r"NCCL INFO .*\brank (?P<rank>\d+) nranks (?P<nranks>\d+)\b.* Init COMPLETE", re.I)
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<status>OK|FAILED)\b")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>[-+0-9.eE]+|nan|inf)")
_ERRORS = re.compile(
    r"NCCL WARN|\bncclSystemError\b|\bncclInternalError\b|\bncclInvalidArgument\b|\bncclInvalidUsage\b"
    r"|\bncclRemoteError\b|\bncclUnhandledCudaError\b|\bTest (?:NCCL |CUDA )?failure\b|\bMPI_ABORT\b"
    r"|\*\*\* Process received signal \*\*\*|\bSegmentation fault\b|\bBus error\b"
)


@dataclass(frozen=True)
class Channel:
    channel: int
    src: int
    dst: int
    direction: str
    via: str
    net: str | None
    """The NET transport's name (``IB``, ``IBext_v8``, ``Socket``), None for P2P/SHM/..."""
    gdrdma: bool


@dataclass(frozen=True)
class Row:
    size: int
    busbw_oop: float
    busbw_ip: float
    wrong: tuple[str, str]


@dataclass
class Parsed:
    """What one rank's all_reduce_perf output says."""

    header_ranks: dict[int, list[str]] = field(default_factory=dict)
    """nccl-tests' ``Rank N ... on HOST`` lines: rank -> hosts (more than one: a duplicate)."""
    nccl_hosts: set[str] = field(default_factory=set)
    """Hosts named in the prefixes of NCCL's own lines."""
    channels: list[Channel] = field(default_factory=list)
    ib_devices: list[tuple[str, str]] = field(default_factory=list)
    """(device:port, IB or RoCE) from ``NET/IB : Using``."""
    socket_in_use: bool = False
    networks: list[str] = field(default_factory=list)
    """``Using network X`` names."""
    init_complete: list[tuple[int, int]] = field(default_factory=list)
    """(rank, nranks) of every ``Init COMPLETE``."""
    version: str | None = None
    errors: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    malformed_rows: int = 0
    out_of_bounds: tuple[int, str] | None = None
    avg_busbw: float | None = None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _row(line: str) -> Row | None:
    """A result row: size count type redop root (time algbw busbw #wrong) x 2; older nccl-tests
    have no root column."""
    parts = line.split()
    if len(parts) not in (12, 13) or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    oop, ip = parts[-8:-4], parts[-4:]
    busbw_oop, busbw_ip = _float(oop[2]), _float(ip[2])
    if busbw_oop is None or busbw_ip is None:
        return None
    return Row(int(parts[0]), busbw_oop, busbw_ip, (oop[3], ip[3]))


def parse_log(text: str) -> Parsed:
    """Everything the verification needs from one rank's output (stdout and stderr together)."""
    parsed = Parsed()
    for raw in text.splitlines():
        line = raw.rstrip()
        if _ERRORS.search(line):
            parsed.errors.append(line[:300])
        prefix = _NCCL_LINE.match(line)
        if prefix:
            parsed.nccl_hosts.add(prefix.group("host"))
        if line.startswith("#"):
            if match := _RANK_HEADER.match(line):
                parsed.header_ranks.setdefault(int(match.group("rank")), []).append(match.group("host").split(".")[0])
            elif match := _OUT_OF_BOUNDS.match(line):
                parsed.out_of_bounds = (int(match.group("count")), match.group("status"))
            elif match := _AVG_BUSBW.match(line):
                parsed.avg_busbw = _float(match.group("value"))
            continue
        if match := _CHANNEL.search(line):
            via = match.group("via")
            net = _NET_VIA.match(via)
            flags = net.group("flags").split("/") if net else []
            parsed.channels.append(
                Channel(
                    channel=int(match.group("channel")),
                    src=int(match.group("src")),
                    dst=int(match.group("dst")),
                    direction=match.group("direction"),
                    via=via,
                    net=net.group("net") if net else None,
                    gdrdma="GDRDMA" in flags,
                )
            )
        elif match := _IB_USING.search(line):
            parsed.ib_devices += [
                (d.group("name"), d.group("link")) for d in _IB_DEVICE.finditer(match.group("devices"))
            ]
        elif _SOCKET_USING.search(line):
            parsed.socket_in_use = True
        elif match := _USING_NETWORK.search(line):
            parsed.networks.append(match.group("net"))
        elif match := _INIT_COMPLETE.search(line):
            parsed.init_complete.append((int(match.group("rank")), int(match.group("nranks"))))
        elif (match := _VERSION.search(line)) and parsed.version is None:
            parsed.version = match.group("version")
        elif not prefix and line.split(maxsplit=1)[:1] and line.split(maxsplit=1)[0].isdigit():
            # A result row starts with the message size; other output (e.g. OpenMPI's indented
            # notices) does not and is not a row.
            row = _row(line)
            if row is not None:
                parsed.rows.append(row)
            else:
                parsed.malformed_rows += 1
    return parsed


# --------------------------------------------------------------------------------------------
# Verification (pure).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    threshold_gbps: float | None
    metric: str = "largest"
    expected_world_size: int = 2
    require_gdrdma: bool = False
    allowed_warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: tuple[str, ...]
    """Why it failed (empty when it passed)."""
    measurements: dict[str, bool | int | float | str]


def config_problems(settings: Settings) -> list[str]:
    """What is wrong with the operator's configuration (empty when usable)."""
    problems = []
    threshold = settings.threshold_gbps
    if threshold is None:
        problems.append(
            "MIN_BUSBW_GBPS is not set: the project ships no hardware thresholds; set the minimum bus "
            "bandwidth (GB/s) measured on a known-good pair of your Nodes at the top of this script"
        )
    elif isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold < math.inf:
        problems.append(f"MIN_BUSBW_GBPS must be a positive number of GB/s, not {threshold!r}")
    if settings.metric not in METRICS:
        problems.append(f"BUSBW_METRIC must be one of {', '.join(METRICS)}, not {settings.metric!r}")
    if isinstance(settings.expected_world_size, bool) or not (
        isinstance(settings.expected_world_size, int) and settings.expected_world_size >= 2
    ):
        problems.append("EXPECTED_WORLD_SIZE must be an integer of at least 2 (an inter-node check)")
    for pattern in settings.allowed_warnings:
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"ALLOWED_WARNINGS: bad pattern {pattern!r}: {exc}")
    return problems


def _transport(parsed: Parsed) -> str:
    links = sorted({link for _, link in parsed.ib_devices})
    return "+".join(links) if links else "none"


def verify(parsed: Parsed, *, rank: int, world_size: int, exit_code: int | None, settings: Settings) -> Verdict:
    """The verdict of one rank's log. Rank 0 checks the whole run (hosts, summary, bandwidth);
    other ranks their own part (exit, errors, init, transport). Fails closed."""
    reasons: list[str] = []
    expected = settings.expected_world_size
    problems = config_problems(settings)
    reasons += problems
    if world_size != expected:
        reasons.append(f"world size {world_size}, expected {expected} (one rank per Node)")
    if exit_code != 0:
        reasons.append(
            f"all_reduce_perf exited {exit_code}" if exit_code is not None else "all_reduce_perf did not exit"
        )

    allowed = [re.compile(p) for p in settings.allowed_warnings] if not problems else []
    errors = [e for e in parsed.errors if not ("NCCL WARN" in e and any(p.search(e) for p in allowed))]
    if errors:
        reasons.append(f"{len(errors)} error line(s), first: {errors[0][:160]}")
    if (rank, expected) not in parsed.init_complete:
        reasons.append(f"no NCCL 'Init COMPLETE' for rank {rank} of {expected} ranks")

    # Transport: one rank per Node, so every channel must cross the network over IB verbs.
    socket = [c for c in parsed.channels if c.net == "Socket"]
    other = [c for c in parsed.channels if c.net != "Socket" and not (c.net and _IB_NET.match(c.net))]
    ib = [c for c in parsed.channels if c.net and _IB_NET.match(c.net)]
    if socket or parsed.socket_in_use or "Socket" in parsed.networks:
        where = f"{len(socket)} channel(s) via NET/Socket" if socket else "NET/Socket in use"
        reasons.append(f"socket fall-back: {where}; inter-node traffic must use NET/IB")
    if other:
        reasons.append(
            f"{len(other)} channel(s) not via NET/IB (first: via {other[0].via}); "
            "P2P/SHM mean two ranks shared a Node, other NETs are not IB verbs"
        )
    if not ib:
        reasons.append("no channel via NET/IB: no positive evidence of an InfiniBand/RoCE data path")
    elif not {c.direction for c in ib} >= {"send", "receive"}:
        reasons.append("NET/IB channels in one direction only")
    if not parsed.ib_devices:
        reasons.append("no 'NET/IB : Using [n]<device>:<port>/IB|RoCE' line: no IB device in use")
    if settings.require_gdrdma and ib and not all(c.gdrdma for c in ib):
        reasons.append("REQUIRE_GDRDMA: a NET/IB channel without GDRDMA")
    bad_networks = [n for n in parsed.networks if not _IB_NET.match(n)]
    if bad_networks and "Socket" not in bad_networks:
        reasons.append(f"NCCL chose network {bad_networks[0]!r}, not IB")

    measurements: dict[str, bool | int | float | str] = {
        "rank": rank,
        "world_size": world_size,
        "transport": _transport(parsed),
        "net": ",".join(sorted({c.net for c in ib if c.net})) or "none",
        "channels": len(ib),
        "gdrdma": bool(ib) and all(c.gdrdma for c in ib),
        "ib_devices": " ".join(sorted({d for d, _ in parsed.ib_devices}))[:128] or "none",
    }
    if parsed.version:
        measurements["nccl_version"] = parsed.version

    if rank == 0:
        reasons += _verify_run(parsed, settings, measurements)
    measurements["passed"] = not reasons
    return Verdict(not reasons, tuple(reasons), measurements)


def _verify_run(parsed: Parsed, settings: Settings, measurements: dict[str, bool | int | float | str]) -> list[str]:
    """Rank 0 only: both Nodes present, the run completed, the bandwidth suffices."""
    reasons = []
    expected = settings.expected_world_size
    duplicated = sorted(r for r, hosts in parsed.header_ranks.items() if len(hosts) > 1)
    hosts = {hosts[0] for hosts in parsed.header_ranks.values()}
    measurements["hosts"] = len(hosts)
    if duplicated:
        reasons.append(f"rank(s) {duplicated} listed twice in the nccl-tests header")
    if sorted(parsed.header_ranks) != list(range(expected)):
        reasons.append(f"the nccl-tests header lists ranks {sorted(parsed.header_ranks)}, expected 0..{expected - 1}")
    if len(hosts) != expected:
        reasons.append(f"{len(hosts)} distinct host(s) in the nccl-tests header, expected {expected} (one per Node)")
    own = parsed.header_ranks.get(0, [None])[0]
    if parsed.nccl_hosts and parsed.nccl_hosts != {own}:
        reasons.append(f"NCCL lines from host(s) {sorted(parsed.nccl_hosts)}, not only rank 0's host {own}")
    if not parsed.rows:
        reasons.append("no nccl-tests result rows")
    if parsed.malformed_rows:
        reasons.append(f"{parsed.malformed_rows} unreadable result row(s)")
    wrong = [r.size for r in parsed.rows if any(_float(w) != 0 for w in r.wrong)]
    if wrong:
        reasons.append(f"wrong elements (or no validation) at size(s) {wrong[:4]}")
    if parsed.out_of_bounds is None or parsed.avg_busbw is None:
        reasons.append(
            "the run did not complete: no nccl-tests summary ('# Out of bounds values', '# Avg bus bandwidth')"
        )
    elif parsed.out_of_bounds != (0, "OK"):
        reasons.append(f"out of bounds values: {parsed.out_of_bounds[0]} {parsed.out_of_bounds[1]}")
    largest = None
    if parsed.rows:
        top = max(parsed.rows, key=lambda r: r.size)
        largest = min(top.busbw_oop, top.busbw_ip)
        measurements["largest_bytes"] = top.size
        measurements["busbw_largest_gbps"] = largest
    if parsed.avg_busbw is not None:
        measurements["busbw_avg_gbps"] = parsed.avg_busbw
    if parsed.out_of_bounds is not None:
        measurements["out_of_bounds"] = parsed.out_of_bounds[0]
    value = largest if settings.metric == "largest" else parsed.avg_busbw
    threshold = settings.threshold_gbps
    if value is not None:
        measurements["busbw_gbps"] = value
    if isinstance(threshold, int | float) and not isinstance(threshold, bool):
        measurements["threshold_gbps"] = float(threshold)
        if value is not None and value < threshold:
            reasons.append(
                f"bus bandwidth ({settings.metric}) {value:g} GB/s is below the threshold {threshold:g} GB/s"
            )
    if value is None:
        reasons.append(f"no bus bandwidth ({settings.metric}) to compare with the threshold")
    return reasons


# --------------------------------------------------------------------------------------------
# The check (I/O).
# --------------------------------------------------------------------------------------------


def settings_from_constants() -> Settings:
    return Settings(
        threshold_gbps=MIN_BUSBW_GBPS,
        metric=BUSBW_METRIC,
        expected_world_size=EXPECTED_WORLD_SIZE,
        require_gdrdma=REQUIRE_GDRDMA,
        allowed_warnings=ALLOWED_WARNINGS,
    )


def _run_all_reduce_perf(workdir: Path, rank: int) -> tuple[int | None, str]:
    """Run all_reduce_perf, copying its output to our stdout; (exit code, output)."""
    env = {**os.environ, **NCCL_ENV}
    env.update(EXTRA_ENV)
    argv = [ALL_REDUCE_PERF, *ALL_REDUCE_PERF_ARGS]
    chunks: list[bytes] = []
    size = 0
    try:
        log = (workdir / f"all_reduce_perf.rank{rank}.log").open("wb")
    except OSError:
        log = None
    try:
        process = subprocess.Popen(
            argv, env=env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    except OSError as exc:
        print(f"nccl-ib: cannot start {argv[0]}: {exc.strerror}", file=sys.stderr)
        return None, ""
    stream = process.stdout
    assert stream is not None
    for block in iter(lambda: stream.read1(1 << 16), b""):
        sys.stdout.buffer.write(block)
        sys.stdout.buffer.flush()
        if log is not None:
            log.write(block)
        if size <= MAX_LOG_BYTES:
            chunks.append(block)
            size += len(block)
    code = process.wait()
    if log is not None:
        log.close()
    text = b"".join(chunks).decode("utf-8", errors="replace")
    if size > MAX_LOG_BYTES:
        text += f"\nnccl-ib: Test failure: more than {MAX_LOG_BYTES} bytes of output\n"
    return (code if code >= 0 else None), text


def _write_measurements(measurements: dict[str, bool | int | float | str]) -> None:
    target = os.environ.get("SIGNAL_MEASUREMENTS_FILE")
    if target:
        Path(target).write_text(json.dumps(measurements, sort_keys=True), encoding="utf-8")


def main() -> int:
    settings = settings_from_constants()
    problems = config_problems(settings)
    if problems:
        for problem in problems:
            print(f"nccl-ib: configuration error: {problem}", file=sys.stderr)
        return 2
    rank_text, size_text = os.environ.get("SIGNAL_RANK", ""), os.environ.get("SIGNAL_WORLD_SIZE", "")
    if not (rank_text.isdigit() and size_text.isdigit()):
        print(
            "nccl-ib: not an MPI rank (no SIGNAL_RANK/SIGNAL_WORLD_SIZE): run it with backend MPIJob", file=sys.stderr
        )
        return 2
    rank, world_size = int(rank_text), int(size_text)
    workdir = Path(os.environ.get("SIGNAL_WORKDIR") or ".")
    exit_code, text = _run_all_reduce_perf(workdir, rank)
    verdict = verify(parse_log(text), rank=rank, world_size=world_size, exit_code=exit_code, settings=settings)
    if rank == 0:
        _write_measurements(verdict.measurements)
    report = {"rank": rank, "passed": verdict.passed, "reasons": list(verdict.reasons), **verdict.measurements}
    print(RESULT_PREFIX + json.dumps(report, sort_keys=True), flush=True)
    for reason in verdict.reasons:
        print(f"nccl-ib: rank {rank}: FAIL: {reason}", file=sys.stderr)
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
