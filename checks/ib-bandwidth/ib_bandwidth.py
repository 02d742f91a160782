#!/usr/bin/env python3
"""ib-bandwidth: RDMA write bandwidth between two Nodes, per HCA, with perftest's ``ib_write_bw``.

* **Pass** (exit 0): for every HCA, a complete perftest result (the table's rows and its closing
  rule, the QPs connected: a ``remote address`` line or results), the link type expected when
  ``expectedLinkType`` is set, and the average bandwidth of the largest message at or above the
  threshold: ``minGbps``, or ``minFractionOfLinkRate`` of the port's own rate (its sysfs ``rate``
  in run mode, ``linkRateGbps`` with ``--verify``).
* **Fail** (exit 1): a completion error (``Completion with error``, ``Failed status N``), QPs
  that cannot be connected through the link (``Unable to Connect the HCA's through the link``,
  ``Failed to modify QP ... to RTR/RTS``), a named HCA that is not there (``IB device mlx5_3
  not found``), another link type than expected, a bandwidth below the threshold or zero.
* **Inconclusive** (exit 3): ib_write_bw absent or not run; no RDMA device at all in the Pod
  (``Did not detect devices``: the Pod's resources, not proof of the Node); the out-of-band TCP
  connection failing (``Couldn't connect to host:port``, ``Unable to init the socket connection``,
  ``Couldn't read remote address``); a one-sided output (``Waiting for client to connect`` and no
  result); a table cut short; no threshold set; ``expectedLinkType`` set and ``Link type : IB``
  with LID 0 (no subnet manager: ``--force-link IB`` on a RoCE port, or an EFA device), which
  proves no link type.

Units: perftest prints ``BW average[Gb/sec]`` with ``--report_gbits`` and MiB/s otherwise
(``MB/sec`` in older releases, ``MiB/sec`` in newer ones: both 2^20 bytes per second, per
perftest's README for --report_gbits). Every figure is converted to Gb/s (10^9 bits per second).

Parameters (run mode: ``SIGNAL_PARAM_<NAME>``; ``--verify``: ``--<name> value``): ``minGbps`` or
``minFractionOfLinkRate`` (one is required), ``linkRateGbps`` (verify mode), ``devices``
(comma-separated HCAs, default ``mlx5_0``), ``serverHost`` (the address the client rank connects
to), ``expectedLinkType`` (``IB`` or ``Ethernet``), ``extraArgs`` (more ib_write_bw flags, e.g.
``-x 3`` for a RoCE GID index). Run mode needs two ranks (MPIJob crossNode or paired Pods):
``SIGNAL_RANK`` 0 serves, 1 connects. Standard library only; the script is mounted alone.
"""

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CHECK = "ib-bandwidth"
TOOL = "ib_write_bw"
PASS, FAIL, INCONCLUSIVE = "Pass", "Fail", "Inconclusive"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
PARAMETERS = (
    "minGbps",
    "minFractionOfLinkRate",
    "linkRateGbps",
    "devices",
    "serverHost",
    "expectedLinkType",
    "extraArgs",
)
BASE_PORT = 18515
"""perftest's default port; HCA number i uses BASE_PORT + i."""
TIMEOUT_SECONDS = 600
MAX_OUTPUT_BYTES = 8 * 1024 * 1024
MIB_BITS = 1048576 * 8 / 1e9
"""Gb/s per MiB/s."""

SOURCE_LINE = "# source: "
"""A recorded output's provenance line (the catalog's test data): never part of the evidence."""

Measurements = dict[str, bool | int | float | str]

_TITLE = re.compile(r"^\s*(?P<title>[A-Za-z_]+(?: Bidirectional| Post List)* BW(?: Post List)? Test)\s*$")
_DEVICE = re.compile(r"\bDevice\s*:\s*(?P<device>\S+)")
_LINK = re.compile(r"^\s*Link type\s*:\s*(?P<link>\S+)")
_LOCAL_LID = re.compile(r"^\s*local address:\s*LID\s+(?P<lid>0x[0-9a-fA-F]+|\d+)\b")
_HEADER = re.compile(r"#bytes\s+#iterations\s+(?P<rest>.*BW average\[(?P<unit>[^\]]+)\].*)$")
_COLUMN = re.compile(r"BW \w+\[[^\]]+\]|\w+\[[^\]]+\]")
_RULE = re.compile(r"^\s*-{20,}\s*$")
_FAULTS = (
    (re.compile(r"Completion with error[^\n]*|Failed status \d+[^\n]*", re.I), "a work completion failed"),
    (
        re.compile(r"Unable to Connect the HCA's through the link", re.I),
        "the HCAs cannot be connected through the link",
    ),
    (re.compile(r"Failed to modify QP[^\n]*to RT[RS]", re.I), "the queue pair could not be brought up"),
    (re.compile(r"\b(?:IB|RDMA) device \S+ not found", re.I), "the named HCA is not on this Node"),
)
_MISSING = (
    (
        re.compile(r"Did not detect devices|Unable to find the Infiniband/RoCE device", re.I),
        "no RDMA device in the Pod",
    ),
    (
        re.compile(
            r"Couldn't connect to [^\n]*|Unable to init the socket connection|Unable to open file descriptor for socket"
            r"|Couldn't read remote address|Failed to exchange data between server and clients",
            re.I,
        ),
        "the out-of-band connection between the two sides failed (the peer, not proof of a link fault)",
    ),
    (re.compile(r"Couldn't allocate MR|Couldn't create QP|Couldn't get context", re.I), "verbs resources refused"),
)


@dataclass
class Result:
    device: str = "?"
    title: str = ""
    link: str | None = None
    lids: set[int] = field(default_factory=set)
    """The local LIDs: an InfiniBand fabric port has one from its subnet manager, never 0."""
    remote: bool = False
    waiting: bool = False
    unit: str | None = None
    rows: list[tuple[int, float]] = field(default_factory=list)
    """(bytes, average bandwidth in Gb/s)."""
    closed: bool = False


@dataclass(frozen=True)
class Verdict:
    outcome: str
    faults: tuple[str, ...]
    missing: tuple[str, ...]
    measurements: Measurements

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _factor(unit: str) -> float | None:
    """Gb/s per unit of perftest's bandwidth columns."""
    unit = unit.replace(" ", "")
    return {"Gb/sec": 1.0, "MB/sec": MIB_BITS, "MiB/sec": MIB_BITS}.get(unit)


def parse(text: str) -> list[Result]:
    """Every perftest run in the text (one per HCA, or server and client together)."""
    results: list[Result] = []
    current: Result | None = None
    columns: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if "Waiting for client to connect" in line or (match := _TITLE.match(line)):
            if current is None or current.rows or current.closed or (current.title and "Waiting" not in line):
                current = Result()
                results.append(current)
            current.waiting = current.waiting or "Waiting for client" in line
            if match := _TITLE.match(line):
                current.title = match.group("title")
            continue
        if current is None:
            continue
        if (match := _DEVICE.search(line)) and not current.rows:
            current.device = match.group("device")
        elif match := _LINK.match(line):
            current.link = match.group("link")
        elif match := _LOCAL_LID.match(line):
            current.lids.add(int(match.group("lid"), 0 if match.group("lid").startswith("0x") else 10))
        elif "remote address" in line:
            current.remote = True
        elif match := _HEADER.search(line):
            current.unit = match.group("unit")
            columns = ["#bytes", "#iterations", *_COLUMN.findall(match.group("rest"))]
        elif current.unit and _RULE.match(line):
            current.closed = bool(current.rows) or current.closed
        elif current.unit and not current.closed and line.split() and line.split()[0].isdigit():
            values = line.split()
            average = next((i for i, c in enumerate(columns) if c.startswith("BW average")), 3)
            factor = _factor(current.unit)
            number = _float(values[average]) if len(values) == len(columns) else None
            if factor is not None and number is not None:
                current.rows.append((int(values[0]), number * factor))
    return results


def config_problems(params: dict[str, str]) -> list[str]:
    problems = [f"unknown parameter {name!r}" for name in params if name not in PARAMETERS]
    if "minGbps" not in params and "minFractionOfLinkRate" not in params:
        problems.append(
            "neither minGbps nor minFractionOfLinkRate is set: the project ships no hardware thresholds; set the "
            "write bandwidth (Gb/s) a known-good pair reaches, or a fraction of the port's rate"
        )
    for name in ("minGbps", "linkRateGbps"):
        if name in params and ((v := _float(params[name])) is None or v <= 0):
            problems.append(f"{name} must be a positive number, not {params[name]!r}")
    if "minFractionOfLinkRate" in params and not 0 < (_float(params["minFractionOfLinkRate"]) or 0) <= 1:
        problems.append("minFractionOfLinkRate must be a number in (0, 1]")
    if params.get("expectedLinkType", "IB") not in ("IB", "Ethernet"):
        problems.append("expectedLinkType must be IB or Ethernet")
    return problems


def _threshold(params: dict[str, str], missing: list[str]) -> float | None:
    if "minGbps" in params:
        return _float(params["minGbps"])
    fraction, rate = _float(params.get("minFractionOfLinkRate", "")), _float(params.get("linkRateGbps", ""))
    if fraction is not None and rate is None:
        missing.append("minFractionOfLinkRate is set but the port's rate is unknown (linkRateGbps)")
        return None
    return fraction * rate if fraction is not None and rate is not None else None


def _judge(
    result: Result, threshold: float | None, params: dict[str, str], faults: list[str], missing: list[str]
) -> None:
    where = f"{result.device}"
    expected = params.get("expectedLinkType")
    # perftest prints "IB" for a port forced to it (--force-link IB) or a non-IB verbs device (EFA).
    unproven = result.link == "IB" and result.lids == {0}
    if expected and unproven:
        missing.append(f"{where}: link type IB but LID 0 (no subnet manager): not proven an InfiniBand port")
    elif expected and result.link and result.link != expected:
        faults.append(f"{where}: link type {result.link}, expected {expected}")
    if result.unit and _factor(result.unit) is None:
        missing.append(f"{where}: unknown bandwidth unit {result.unit!r}")
    if not result.rows:
        if result.waiting and not result.remote:
            missing.append(f"{where}: one side only (waiting for the peer, no result)")
        else:
            missing.append(f"{where}: no result rows")
        return
    if not result.closed:
        missing.append(f"{where}: the result table was cut short")
        return
    size, gbps = max(result.rows)
    if gbps <= 0:
        faults.append(f"{where}: zero bandwidth at {size} bytes")
    elif threshold is not None and gbps < threshold:
        faults.append(f"{where}: {gbps:.2f} Gb/s at {size} bytes is below the threshold {threshold:.2f} Gb/s")


def verify_text(text: str, params: dict[str, str], *, exit_code: int | None = 0) -> Verdict:
    """The verdict of captured ib_write_bw output (one side or both, one HCA or several). Fails closed."""
    text = "\n".join(line for line in text.splitlines() if not line.startswith(SOURCE_LINE))
    faults: list[str] = []
    missing = list(config_problems(params))
    for pattern, what in _FAULTS:
        if match := pattern.search(text):
            faults.append(f"{what}: {match.group(0).strip()[:160]!r}")
    for pattern, what in _MISSING:
        if match := pattern.search(text):
            missing.append(f"{what}: {match.group(0).strip()[:160]!r}")
    if exit_code is None:
        missing.append("ib_write_bw did not run to its end (not found, killed or timed out)")
    elif exit_code != 0 and not faults:
        missing.append(f"ib_write_bw exited {exit_code}")
    results = parse(text)
    if not results and not faults and len(missing) == len(config_problems(params)):
        missing.append("no perftest output")
    threshold = _threshold(params, missing)
    for result in results:
        _judge(result, threshold, params, faults, missing)
    measurements: Measurements = {"results": len(results)}
    done = [r for r in results if r.rows and r.closed]
    if done:
        measurements["bw_min_gbps"] = round(min(max(r.rows)[1] for r in done), 3)
        measurements["devices"] = ",".join(sorted({r.device for r in done}))[:128]
        measurements["link_type"] = ",".join(sorted({r.link for r in done if r.link}))[:32] or "unknown"
        measurements["message_bytes"] = max(max(r.rows)[0] for r in done)
    if threshold is not None:
        measurements["threshold_gbps"] = round(threshold, 3)
    outcome = FAIL if faults else INCONCLUSIVE if missing else PASS
    measurements["outcome"] = outcome
    return Verdict(outcome, tuple(faults), tuple(dict.fromkeys(missing)), measurements)


# --------------------------------------------------------------------------------------------
# The check (I/O). Shared shape with the catalog's other checks: see checks/README.md.
# --------------------------------------------------------------------------------------------


def params_from_env(environ: dict[str, str]) -> dict[str, str]:
    return {name: environ[key] for name in PARAMETERS if (key := f"SIGNAL_PARAM_{name.upper()}") in environ}


def parse_flags(argv: list[str]) -> tuple[str, dict[str, str]]:
    """``--verify FILE [--name value]...``: the file and the parameters."""
    if len(argv) < 2 or argv[0] != "--verify" or len(argv) % 2:
        raise ValueError(f"usage: {CHECK} --verify FILE [--name value]...")
    params: dict[str, str] = {}
    for flag, value in zip(argv[2::2], argv[3::2], strict=True):
        if not flag.startswith("--"):
            raise ValueError(f"expected --name before {flag!r}")
        params[flag[2:]] = value
    return argv[1], params


def report(verdict: Verdict) -> int:
    line = {
        "outcome": verdict.outcome,
        "faults": list(verdict.faults),
        "missing": list(verdict.missing),
        "measurements": verdict.measurements,
    }
    print(json.dumps(line, sort_keys=True), flush=True)
    for reason in verdict.faults or verdict.missing:
        print(f"{CHECK}: {verdict.outcome.upper()}: {reason}", file=sys.stderr)
    target = os.environ.get("SIGNAL_MEASUREMENTS_FILE")
    if target:
        kept = {k: (v[:128] if isinstance(v, str) else v) for k, v in list(verdict.measurements.items())[:16]}
        Path(target).write_text(json.dumps(kept, sort_keys=True), encoding="utf-8")
    return verdict.exit_code


def _port_rate_gbps(device: str) -> float | None:
    """The port's rate as the kernel reports it (``400 Gb/sec (4X NDR)``), port 1."""
    try:
        text = Path(f"/sys/class/infiniband/{device}/ports/1/rate").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.match(r"\s*([\d.]+)\s*Gb/sec", text)
    return _float(match.group(1)) if match else None


def _run(argv: list[str]) -> tuple[int | None, str]:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired as exc:
        return None, ((exc.stdout or b"") + (exc.stderr or b"")).decode("utf-8", "replace")
    output = (done.stdout + done.stderr).decode("utf-8", "replace")[:MAX_OUTPUT_BYTES]
    return (done.returncode if done.returncode >= 0 else None), output


def main(argv: list[str]) -> int:
    if argv:
        try:
            path, params = parse_flags(argv)
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except (ValueError, OSError) as exc:
            print(f"{CHECK}: {exc}", file=sys.stderr)
            return EXIT_CODES[INCONCLUSIVE]
        return report(verify_text(text, params))
    params = params_from_env(dict(os.environ))
    if shutil.which(TOOL) is None:  # first: a missing tool is the reason whatever the parameters
        reason = f"{TOOL} is not on PATH in this image: the check cannot run (use an image with perftest)"
        return report(Verdict(INCONCLUSIVE, (), (reason,), {"outcome": INCONCLUSIVE, "tool_found": False}))
    rank = os.environ.get("SIGNAL_RANK", "")
    problems = config_problems(params)
    if rank == "1" and not params.get("serverHost"):
        problems.append("serverHost is not set: the client rank has no server to connect to")
    if rank not in ("0", "1"):
        problems.append("not rank 0 or 1 of a two-rank check (SIGNAL_RANK): run it as an MPIJob of two Nodes")
    if problems:
        reasons = tuple(f"configuration error: {p}" for p in problems)
        return report(Verdict(INCONCLUSIVE, (), reasons, {"outcome": INCONCLUSIVE}))
    verdicts: list[Verdict] = []
    for index, device in enumerate(d.strip() for d in params.get("devices", "mlx5_0").split(",") if d.strip()):
        args = [TOOL, "-d", device, "-p", str(BASE_PORT + index), "-F", "--report_gbits", "-D", "10"]
        args += shlex.split(params.get("extraArgs", ""))
        if rank == "1":
            args.append(params["serverHost"])
        code, output = _run(args)
        for _attempt in range(10):
            if rank == "0" or "Couldn't connect" not in output:
                break
            time.sleep(3)  # the server rank may not be listening yet: perftest has no retry of its own
            code, output = _run(args)
        sys.stdout.write(output[-32768:] + "\n")
        rate = _port_rate_gbps(device)
        device_params = {**params, **({"linkRateGbps": f"{rate:g}"} if rate and "linkRateGbps" not in params else {})}
        verdicts.append(verify_text(output, device_params, exit_code=code))
    return report(merge(verdicts))


def merge(verdicts: list[Verdict]) -> Verdict:
    """One verdict for every HCA: a fault on any is a Fail; missing evidence on any, Inconclusive."""
    faults = tuple(f for v in verdicts for f in v.faults)
    missing = tuple(m for v in verdicts for m in v.missing) or (() if verdicts else ("no HCA in devices",))
    measurements: Measurements = {"hcas": len(verdicts)}
    lows = [v.measurements["bw_min_gbps"] for v in verdicts if isinstance(v.measurements.get("bw_min_gbps"), float)]
    if lows:
        measurements["bw_min_gbps"] = min(lows)
    outcome = FAIL if faults else INCONCLUSIVE if missing else PASS
    measurements["outcome"] = outcome
    return Verdict(outcome, faults, missing, measurements)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
