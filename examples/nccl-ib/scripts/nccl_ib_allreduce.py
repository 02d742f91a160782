#!/usr/bin/env python3
"""NCCL between two or more Nodes: prove that every inter-node channel used NET/IB (InfiniBand or
RoCE verbs, NCCL's built-in IB transport or the IBext plugin, with or without GPUDirect RDMA),
that the run completed without errors, and that the bus bandwidth reaches the operator's
threshold. Three answers, each saying what the log proves:

* **Pass** (exit 0): every inter-node channel via NET/IB or NET/IBext, the run completed, no
  error, bandwidth at or above the threshold;
* **Fail** (exit 1), a proven fault: a socket fall-back, a non-IB network chosen (Libfabric/EFA,
  TCPX, ...), mixed transports across ranks, an NCCL or CUDA error, wrong or zero results,
  bandwidth below the threshold, the benchmark exiting non-zero;
* **Inconclusive** (exit 3, Signal's documented "my evidence is insufficient" code), with what is
  missing: no NCCL debug lines, no channel lines, every rank on one host, no completion summary
  (a run cut off), no data validation, or a check that is not configured yet.

A fault outweighs missing evidence; Pass needs both no fault and nothing missing.

Runs as a Signal MPIJob check: every rank runs this file (mounted alone, run by its ``#!`` line
with a clean environment: ``SIGNAL_RANK``, ``SIGNAL_WORLD_SIZE``, ``SIGNAL_WORKDIR``, ``PATH``,
``NVIDIA_*``/``CUDA_*``/``NCCL_*``/``UCX_*`` and OpenMPI's own variables), starts nccl-tests
(``BENCHMARK``: ``all_reduce_perf`` or another collective such as ``sendrecv_perf``) with
``NCCL_DEBUG=INFO``, copies its output to stdout and verifies its own log; rank 0 (the only
rank with nccl-tests' header and summary) also verifies the whole run. Any number of GPUs per
Node works: intra-node P2P/SHM/NVLS channels are fine when the inter-node ones are IB.

The same verification reads a log an operator captured: ``nccl_ib_allreduce.py --verify FILE``
accepts one rank's output or the launcher's combined ``mpirun`` output (all ranks' lines in one
log, with or without ``--tag-output`` prefixes), prints one ``NCCL-IB-CHECK {json}`` line and
exits 0, 1 or 3 as above.

The project ships no hardware thresholds: until ``MIN_BUSBW_GBPS`` is set below, every rank
reports Inconclusive without running anything. Editing this file changes the source bundle's
digest: recompute it (see the README next to the profile). Standard library only; the
verification is pure functions of the captured text (``parse_log``, ``verify``).
"""

import io
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
of your own Nodes with the same ``BENCHMARK_ARGS``. None: the check does not run (Inconclusive)."""

BUSBW_METRIC: str = "largest"
"""Which bus bandwidth is compared with the threshold: ``largest`` (the row of the largest
message size, the lower of its out-of-place and in-place figures) or ``avg`` (nccl-tests'
``# Avg bus bandwidth`` over every size, which small sizes pull down)."""

BENCHMARK: str = "/opt/nccl-tests/build/all_reduce_perf"
"""The nccl-tests binary (built with MPI=1) inside the runner image: all_reduce_perf,
all_gather_perf, sendrecv_perf, ..."""

BENCHMARK_ARGS: tuple[str, ...] = ("-b", "8M", "-e", "4G", "-f", "2", "-g", "1", "-c", "1", "-w", "5", "-n", "20")
"""One GPU per rank (-g 1) and data validation on (-c 1: a wrong element fails the check)."""

EXPECTED_NODES: int | None = None
"""Nodes the run must span (the profile's participant count for a cross-Node check); None: any
number of at least 2."""

REQUIRE_GDRDMA: bool = False
"""True: every inter-node channel must also use GPUDirect RDMA (``.../GDRDMA``)."""

NCCL_ENV: dict[str, str] = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
"""Set for the benchmark; the verification needs NCCL's INIT and NET INFO lines."""

EXTRA_ENV: dict[str, str] = {}
"""More environment for the benchmark, e.g. ``{"LD_LIBRARY_PATH": "/opt/hpcx/nccl_rdma_sharp_plugin/lib"}``
(the runner passes only PATH, HOME, LANG, TMPDIR and NVIDIA_/CUDA_/NCCL_/UCX_/OpenMPI variables)."""

ALLOWED_WARNINGS: tuple[str, ...] = ()
"""Regular expressions of ``NCCL WARN`` lines you accept as harmless (searched in the line)."""

MAX_LOG_BYTES: int = 64 * 1024 * 1024
"""More output than this is not a log we can vouch for: Inconclusive."""

# --------------------------------------------------------------------------------------------
# Parsing (pure).
# --------------------------------------------------------------------------------------------

RESULT_PREFIX = "NCCL-IB-CHECK "
METRICS = ("largest", "avg")
PASS, FAIL, INCONCLUSIVE = "Pass", "Fail", "Inconclusive"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
"""3 is Signal's documented exit code for "my evidence is insufficient" (Inconclusive)."""

# Launchers' prefixes before each line: mpirun --tag-output "[1,0]<stdout>:", MPICH/Intel MPI
# -prepend-rank "[0] ", Slurm srun --label "0: ", a bracketed timestamp.
_TAG = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:\s?|\[\d+\]\s|\d+:\s|\[\d{4}-\d\d-\d\d[ T][\d:.]+\]\s)+")
# hostname:pid:tid [cudaDev] NCCL INFO ...; WARN adds the source file:line before NCCL (the hostname is cut at '.')
_NCCL_LINE = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:\S+:\d+ )?NCCL (?P<level>INFO|WARN|TRACE) "
)
# nccl-tests header: "#  Rank  0 Group  0 Pid  57 on host device  0 [0x18] NVIDIA H100 ..." (older: no Group;
# some builds and pastes: no "#")
_RANK_HEADER = re.compile(
    r"^#?\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+\d+"
)
# "Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA" (NCCL >= 2.19: cudaDev; older: busId in hex;
# 2.4 era: "Ring 00 : 15 -> 0 [send] via NET/Socket/0"; intra-node channels have no [send]/[receive])
_CHANNEL = re.compile(
    r"NCCL INFO (?:Channel|Ring) (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)(?:\[[0-9a-fA-Fx]+\])? ->"
    r" (?P<dst>\d+)(?:\[[0-9a-fA-Fx]+\])?(?: \[(?P<direction>send|receive)\])? via (?P<via>.+?)\s*$"
)
# "NET/IBext_v8/0/GDRDMA", "NET/IB/1(0)/GDRDMA/Shared" (PXN), "NET/Socket/0", "NET/AWS Libfabric/0"
_NET_VIA = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\(\d+\))?(?P<flags>(?:/[A-Za-z]+)*)$")
_IB_NET = re.compile(r"^IB(?:ext(?:_v\d+)?)?$")
# "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>" (also NET/IBext...)
_IB_USING = re.compile(r"NCCL INFO NET/IB\w* : Using (?P<devices>.*?)\s*;\s*OOB")
_IB_DEVICE = re.compile(r"\[\d+\](?P<name>[\w.-]+:\d+)/(?P<link>IB|RoCE)\b")
_SOCKET_USING = re.compile(r"NCCL INFO NET/Socket : Using ")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (?P<net>.+?)\s*$")
_INIT_COMPLETE = re.compile(r"NCCL INFO .*\brank (?P<rank>\d+) nranks (?P<nranks>\d+)\b.* Init COMPLETE", re.I)
_NNODES = re.compile(r"NCCL INFO comm \S+ rank \d+ nRanks (?P<nranks>\d+) nNodes (?P<nodes>\d+)\b")
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)")
_OUT_OF_BOUNDS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<status>OK|FAILED)\b")
_AVG_BUSBW = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(?P<value>[-+0-9.eE]+|nan|inf)")
_ERRORS = re.compile(
    r"NCCL WARN|\bncclSystemError\b|\bncclInternalError\b|\bncclInvalidArgument\b|\bncclInvalidUsage\b"
    r"|\bncclRemoteError\b|\bncclUnhandledCudaError\b|\bTest (?:NCCL |CUDA )?failure\b|\bMPI_ABORT\b"
    r"|\bCUDA error\b|\bcuda(?:Error\w+|Malloc failed)\b|\*\*\* Process received signal \*\*\*"
    r"|\bSegmentation fault\b|\bBus error\b"
)


@dataclass(frozen=True)
class Channel:
    host: str
    """The host whose NCCL line reported it ("" when the line had no prefix)."""
    src: int
    dst: int
    direction: str
    via: str
    net: str | None
    """The NET transport's name (``IB``, ``IBext_v8``, ``Socket``), None for P2P/SHM/... (intra-node)."""
    gdrdma: bool


@dataclass(frozen=True)
class Row:
    size: int
    busbw_oop: float
    busbw_ip: float | None
    """None where the in-place columns are ``N/A`` (collectives without an in-place variant)."""
    wrong: tuple[str, str]


@dataclass
class Parsed:
    """What a log says: one rank's output, or mpirun's output of every rank together."""

    header_ranks: dict[int, list[str]] = field(default_factory=dict)
    """nccl-tests' ``Rank N ... on HOST`` lines: rank -> hosts (more than one: a duplicate)."""
    nccl_lines: int = 0
    nccl_hosts: set[str] = field(default_factory=set)
    channels: list[Channel] = field(default_factory=list)
    ib_devices: list[tuple[str, str]] = field(default_factory=list)
    socket_in_use: bool = False
    networks: list[str] = field(default_factory=list)
    """``Using network X`` names."""
    init_complete: list[tuple[int, int]] = field(default_factory=list)
    """(rank, nranks) of every ``Init COMPLETE``."""
    nodes: int | None = None
    """NCCL's own ``nNodes`` (2.19 and later)."""
    nranks: set[int] = field(default_factory=set)
    """NCCL's own ``nRanks`` (the ``comm ... nRanks N nNodes M`` lines)."""
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
    have no root column; the in-place group may be ``N/A``."""
    parts = line.split()
    if len(parts) not in (12, 13) or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    oop, ip = parts[-8:-4], parts[-4:]
    busbw_oop = _float(oop[2])
    busbw_ip = None if ip[2] == "N/A" else _float(ip[2])
    if busbw_oop is None or (busbw_ip is None and ip[2] != "N/A"):
        return None
    return Row(int(parts[0]), busbw_oop, busbw_ip, (oop[3], ip[3]))


def _channel(host: str, match: re.Match[str]) -> Channel:
    via = match.group("via")
    net = _NET_VIA.match(via)
    flags = net.group("flags").split("/") if net else []
    return Channel(
        host=host,
        src=int(match.group("src")),
        dst=int(match.group("dst")),
        direction=match.group("direction") or "",
        via=via,
        net=net.group("net") if net else ("?" if via.startswith("NET/") else None),
        gdrdma="GDRDMA" in flags,
    )


def _summary_like(line: str) -> bool:
    """A line of nccl-tests' own (its '#' lines, or the rank list and summary printed without '#')."""
    return line.startswith(("#", " ")) or line.lstrip().startswith(("Rank ", "Out of bounds", "Avg bus"))


def parse_log(text: str) -> Parsed:
    """Everything the verification needs from a log (stdout and stderr together)."""
    parsed = Parsed()
    for raw in text.splitlines():
        line = _TAG.sub("", raw.rstrip())
        if _ERRORS.search(line):
            parsed.errors.append(line[:300])
        prefix = _NCCL_LINE.match(line)
        host = prefix.group("host") if prefix else ""
        if prefix:
            parsed.nccl_lines += 1
            parsed.nccl_hosts.add(host)
        if not prefix and _summary_like(line):
            if match := _RANK_HEADER.match(line):
                parsed.header_ranks.setdefault(int(match.group("rank")), []).append(match.group("host").split(".")[0])
            elif match := _OUT_OF_BOUNDS.match(line):
                parsed.out_of_bounds = (int(match.group("count")), match.group("status"))
            elif match := _AVG_BUSBW.match(line):
                parsed.avg_busbw = _float(match.group("value"))
            if line.startswith("#") or _RANK_HEADER.match(line) or _OUT_OF_BOUNDS.match(line) or _AVG_BUSBW.match(line):
                continue
        if match := _CHANNEL.search(line):
            parsed.channels.append(_channel(host, match))
        elif match := _IB_USING.search(line):
            parsed.ib_devices += [(d.group("name"), d.group("link")) for d in _IB_DEVICE.finditer(match["devices"])]
        elif _SOCKET_USING.search(line):
            parsed.socket_in_use = True
        elif match := _USING_NETWORK.search(line):
            parsed.networks.append(match.group("net"))
        elif match := _INIT_COMPLETE.search(line):
            parsed.init_complete.append((int(match.group("rank")), int(match.group("nranks"))))
        elif match := _NNODES.search(line):
            parsed.nodes = max(parsed.nodes or 0, int(match.group("nodes")))
            parsed.nranks.add(int(match.group("nranks")))
        elif (match := _VERSION.search(line)) and parsed.version is None:
            parsed.version = match.group("version")
        elif not prefix and line.split(maxsplit=1)[:1] and line.split(maxsplit=1)[0].isdigit():
            # A result row starts with the message size; other output (OpenMPI's indented notices) does not.
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
    expected_nodes: int | None = None
    require_gdrdma: bool = False
    allowed_warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    outcome: str
    """PASS, FAIL or INCONCLUSIVE."""
    faults: tuple[str, ...]
    """Proven faults (any: Fail)."""
    missing: tuple[str, ...]
    """What the log does not prove (any, and no fault: Inconclusive)."""
    measurements: dict[str, bool | int | float | str]

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.faults + self.missing

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]


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
    nodes = settings.expected_nodes
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 2):
        problems.append("EXPECTED_NODES must be None or an integer of at least 2 (an inter-node check)")
    for pattern in settings.allowed_warnings:
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"ALLOWED_WARNINGS: bad pattern {pattern!r}: {exc}")
    return problems


def _transport(parsed: Parsed) -> str:
    links = sorted({link for _, link in parsed.ib_devices})
    return "+".join(links) if links else "none"


def _verify_transport(parsed: Parsed, faults: list[str], missing: list[str], settings: Settings) -> list[Channel]:
    """Inter-node channels (NET/...) must all be IB verbs, one kind across every rank."""
    inter = [c for c in parsed.channels if c.net is not None]
    socket = [c for c in inter if c.net == "Socket"]
    foreign = [c for c in inter if c.net != "Socket" and not _IB_NET.match(c.net or "")]
    ib = [c for c in inter if _IB_NET.match(c.net or "")]
    if socket or parsed.socket_in_use or "Socket" in parsed.networks:
        where = f"{len(socket)} channel(s) via NET/Socket" if socket else "NET/Socket in use"
        faults.append(f"socket fall-back: {where}; inter-node traffic must use NET/IB")
    if foreign:
        faults.append(f"{len(foreign)} inter-node channel(s) not via IB verbs (first: via {foreign[0].via})")
    chosen = [n for n in parsed.networks if not _IB_NET.match(n) and n != "Socket"]
    if chosen:
        faults.append(f"NCCL chose network {chosen[0]!r}, not IB")
    kinds = {c.net: c.host for c in inter if c.net is not None}  # every one: ``inter`` has a net
    if len(kinds) > 1:
        hosts = set(kinds.values())
        if len(hosts) == 1:
            faults.append(f"mixed transports on one host ({hosts.pop() or '?'}): {', '.join(sorted(kinds))}")
        else:
            faults.append(
                "mixed transports across ranks: " + ", ".join(f"{n} ({h or '?'})" for n, h in sorted(kinds.items()))
            )
    if settings.require_gdrdma and ib and not all(c.gdrdma for c in ib):
        faults.append("REQUIRE_GDRDMA: an inter-node channel via NET/IB without GDRDMA")
    host_of = {rank: names[0] for rank, names in parsed.header_ranks.items()}
    crossing = [
        c
        for c in parsed.channels
        if c.net is None and {c.src, c.dst} <= host_of.keys() and host_of[c.src] != host_of[c.dst]
    ]
    if crossing:
        missing.append(f"the log contradicts itself: {crossing[0].via} between ranks on different hosts")
    if ib and not parsed.ib_devices:
        missing.append("no 'NET/IB : Using [n]<device>:<port>/IB|RoCE' line (NCCL_DEBUG_SUBSYS must include NET)")
    single = parsed.nodes == 1 or (len(parsed.header_ranks) > 1 and len(_hosts(parsed)) == 1)
    if not parsed.channels:
        missing.append("no channel lines at all (NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS including INIT)")
    elif single or not inter:
        missing.append("every rank on one host: no inter-node channel proves the network")
    elif ib and not {c.direction for c in ib} >= {"send", "receive"}:
        missing.append("NET/IB channels in one direction only")
    return ib


def _hosts(parsed: Parsed) -> set[str]:
    return {hosts[0] for hosts in parsed.header_ranks.values()}


def verify(parsed: Parsed, *, rank: int, world_size: int, exit_code: int | None, settings: Settings) -> Verdict:
    """The verdict of a log: as ``rank`` (0 also verifies the whole run: hosts, summary,
    bandwidth) in a world of ``world_size`` ranks. Fails closed: Pass needs positive evidence."""
    faults: list[str] = []
    problems = config_problems(settings)
    missing: list[str] = list(problems)
    if exit_code is None:
        missing.append("the benchmark did not run to its end (not started, killed or cut off)")
    elif exit_code != 0:
        faults.append(f"the benchmark exited {exit_code}")
    allowed = [re.compile(p) for p in settings.allowed_warnings] if not problems else []
    errors = [e for e in parsed.errors if not ("NCCL WARN" in e and any(p.search(e) for p in allowed))]
    if errors:
        faults.append(f"{len(errors)} error line(s), first: {errors[0][:160]}")
    if not parsed.nccl_lines:
        missing.append("no NCCL debug lines: run with NCCL_DEBUG=INFO")
    if world_size < 2:
        missing.append(f"a world of {world_size} rank(s): nothing crosses a network")
    if parsed.nccl_lines and (rank, world_size) not in parsed.init_complete:
        missing.append(f"no NCCL 'Init COMPLETE' for rank {rank} of {world_size} ranks")
    ib = _verify_transport(parsed, faults, missing, settings)
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
        _verify_run(parsed, settings, world_size, faults, missing, measurements)
    outcome = FAIL if faults else INCONCLUSIVE if missing else PASS
    measurements["outcome"] = outcome
    return Verdict(outcome, tuple(faults), tuple(missing), measurements)


def _verify_run(
    parsed: Parsed,
    settings: Settings,
    world_size: int,
    faults: list[str],
    missing: list[str],
    measurements: dict[str, bool | int | float | str],
) -> None:
    """Rank 0 (or the combined log): every rank on its host, the run completed, the bandwidth."""
    hosts = _hosts(parsed)
    measurements["hosts"] = len(hosts)
    duplicated = sorted(r for r, names in parsed.header_ranks.items() if len(names) > 1)
    if duplicated:
        missing.append(f"rank(s) {duplicated} listed twice in the nccl-tests header: not the log of one run")
    if sorted(parsed.header_ranks) != list(range(world_size)):
        missing.append(f"the nccl-tests header lists ranks {sorted(parsed.header_ranks)}, expected 0..{world_size - 1}")
    if len(hosts) == 1 and "every rank on one host" not in " ".join(missing):
        missing.append("every rank on one host: no inter-node channel proves the network")
    if settings.expected_nodes is not None and len(hosts) not in (1, settings.expected_nodes):
        missing.append(f"{len(hosts)} host(s) in the nccl-tests header, expected {settings.expected_nodes}")
    if parsed.malformed_rows:
        missing.append(f"{parsed.malformed_rows} unreadable result row(s)")
    wrong = [r.size for r in parsed.rows if any((_float(w) or 0) != 0 for w in r.wrong if w != "N/A")]
    if wrong:
        faults.append(f"wrong elements at size(s) {wrong[:4]}")
    if any(r.wrong[0] == "N/A" for r in parsed.rows):
        missing.append("no data validation (out-of-place #wrong is N/A): run nccl-tests with -c 1")
    if not parsed.rows or parsed.out_of_bounds is None or parsed.avg_busbw is None:
        missing.append("the run did not complete: no result rows or no nccl-tests summary")
    elif parsed.out_of_bounds != (0, "OK"):
        faults.append(f"out of bounds values: {parsed.out_of_bounds[0]} {parsed.out_of_bounds[1]}")
    largest = None
    if parsed.rows:
        top = max(parsed.rows, key=lambda r: r.size)
        largest = min(b for b in (top.busbw_oop, top.busbw_ip) if b is not None)
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
        if value <= 0:
            faults.append(f"zero bus bandwidth ({settings.metric})")
    if isinstance(threshold, int | float) and not isinstance(threshold, bool):
        measurements["threshold_gbps"] = float(threshold)
        if value is not None and 0 < value < threshold:
            faults.append(f"bus bandwidth ({settings.metric}) {value:g} GB/s is below the threshold {threshold:g} GB/s")


def verify_log(text: str, settings: Settings) -> Verdict:
    """A captured log of unknown shape (one rank's or mpirun's combined output): as rank 0 when it
    holds nccl-tests' header, in the world its header or NCCL's Init lines name."""
    parsed = parse_log(text)
    sizes = {n for _, n in parsed.init_complete} | parsed.nranks
    # The world its own lines name: nccl-tests' rank list, NCCL's nranks, the ranks channels connect.
    linked = max((max(c.src, c.dst) for c in parsed.channels), default=-1) + 1
    world = max([len(parsed.header_ranks), *sizes, linked], default=0)
    ranks = sorted({r for r, _ in parsed.init_complete})
    rank = 0 if parsed.header_ranks or not ranks else ranks[0]
    verdict = verify(parsed, rank=rank, world_size=world, exit_code=0, settings=settings)
    absent = sorted(set(range(world)) - {r for r, n in parsed.init_complete if n == world})
    if parsed.nccl_hosts and len(parsed.nccl_hosts) > 1 and absent:
        missing = (*verdict.missing, f"no NCCL 'Init COMPLETE' for rank(s) {absent[:8]}")
        outcome = FAIL if verdict.faults else INCONCLUSIVE
        return Verdict(outcome, verdict.faults, missing, {**verdict.measurements, "outcome": outcome})
    return verdict


# --------------------------------------------------------------------------------------------
# The check (I/O).
# --------------------------------------------------------------------------------------------


def settings_from_constants() -> Settings:
    return Settings(
        threshold_gbps=MIN_BUSBW_GBPS,
        metric=BUSBW_METRIC,
        expected_nodes=EXPECTED_NODES,
        require_gdrdma=REQUIRE_GDRDMA,
        allowed_warnings=ALLOWED_WARNINGS,
    )


def _run_benchmark(workdir: Path, rank: int) -> tuple[int | None, str]:
    """Run the benchmark, copying its output to our stdout; (exit code, output)."""
    env = {**os.environ, **NCCL_ENV}
    env.update(EXTRA_ENV)
    argv = [BENCHMARK, *BENCHMARK_ARGS]
    chunks: list[bytes] = []
    size = 0
    try:
        log = (workdir / f"nccl-tests.rank{rank}.log").open("wb")
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
    assert isinstance(stream, io.BufferedReader)  # a pipe, buffered (Popen's default bufsize)
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
    if size > MAX_LOG_BYTES:
        print(f"nccl-ib: more than {MAX_LOG_BYTES} bytes of output: not a log we can vouch for", file=sys.stderr)
        return None, ""
    return (code if code >= 0 else None), b"".join(chunks).decode("utf-8", errors="replace")


def _report(verdict: Verdict, rank: int) -> int:
    report = {"rank": rank, "passed": verdict.passed, "reasons": list(verdict.reasons), **verdict.measurements}
    print(RESULT_PREFIX + json.dumps(report, sort_keys=True), flush=True)
    label = {FAIL: "FAIL", INCONCLUSIVE: "INCONCLUSIVE"}.get(verdict.outcome)
    for reason in verdict.faults if verdict.faults else verdict.missing:
        print(f"nccl-ib: rank {rank}: {label}: {reason}", file=sys.stderr)
    return verdict.exit_code


USAGE = """usage: nccl_ib_allreduce.py               as a rank of an MPIJob check (Signal's runner; no arguments)
       nccl_ib_allreduce.py --verify LOGFILE  judge a captured log: one rank's, or mpirun's combined output
exit: 0 Pass, 1 Fail (a proven fault, named on stderr), 3 Inconclusive (the evidence is insufficient)
settings: the constants at the top of this file (MIN_BUSBW_GBPS must be set)"""


def main(argv: list[str]) -> int:
    settings = settings_from_constants()
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if argv[:1] == ["--verify"] and len(argv) == 2:
        verdict = verify_log(Path(argv[1]).read_text(encoding="utf-8", errors="replace"), settings)
        return _report(verdict, int(verdict.measurements.get("rank", 0)))
    if argv:
        print(f"nccl-ib: INCONCLUSIVE: unexpected arguments {argv}\n{USAGE}", file=sys.stderr)
        return EXIT_CODES[INCONCLUSIVE]
    problems = config_problems(settings)
    if problems:
        for problem in problems:
            print(f"nccl-ib: INCONCLUSIVE: configuration error: {problem}", file=sys.stderr)
        return EXIT_CODES[INCONCLUSIVE]
    rank_text, size_text = os.environ.get("SIGNAL_RANK", ""), os.environ.get("SIGNAL_WORLD_SIZE", "")
    if not (rank_text.isdigit() and size_text.isdigit()):
        print(
            "nccl-ib: INCONCLUSIVE: not an MPI rank (no SIGNAL_RANK/SIGNAL_WORLD_SIZE): run it with backend "
            "MPIJob, or verify a captured log with --verify FILE",
            file=sys.stderr,
        )
        return EXIT_CODES[INCONCLUSIVE]
    rank, world_size = int(rank_text), int(size_text)
    exit_code, text = _run_benchmark(Path(os.environ.get("SIGNAL_WORKDIR") or "."), rank)
    verdict = verify(parse_log(text), rank=rank, world_size=world_size, exit_code=exit_code, settings=settings)
    target = os.environ.get("SIGNAL_MEASUREMENTS_FILE")
    if rank == 0 and target:
        Path(target).write_text(json.dumps(verdict.measurements, sort_keys=True), encoding="utf-8")
    return _report(verdict, rank)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
