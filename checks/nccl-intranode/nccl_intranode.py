#!/usr/bin/env python3
"""nccl-intranode: nccl-tests (``all_reduce_perf`` by default) over every GPU of one Node, with
``NCCL_DEBUG=INFO``, proving which transport NCCL used between the GPUs and the bus bandwidth.

* **Pass** (exit 0): one host; two or more ranks (``expectedGpus`` of them when set); every
  intra-node channel via ``P2P`` (NVLink or PCIe peer-to-peer: ``P2P/IPC``, ``P2P/CUMEM``,
  ``P2P/direct pointer``), or NVLink SHARP connected (``Connected NVLS``), and every rank connects
  a channel in the log; the run completed (result rows, ``# Out of bounds values : 0 OK``,
  ``# Avg bus bandwidth``) and validated its results (a ``#wrong`` count, not ``N/A``: ``-c 1``);
  no error; the bus bandwidth of the largest message at or above ``minBusbwGbps``.
* **Fail** (exit 1): a channel via ``SHM`` (NCCL fell back to host shared memory: P2P disabled,
  unsupported or blocked) or via ``NET`` inside the Node; ``requireNvlink`` and a graph of
  another type; an NCCL or CUDA error; wrong elements or out-of-bounds values; a bus bandwidth
  below the threshold or zero.
* **Inconclusive** (exit 3): all_reduce_perf absent or not run; no NCCL debug lines or no
  channel lines, or ranks that connect no channel in the log (a log cut at its start): the
  transport is not proven; fewer ranks than ``expectedGpus`` or one rank; a log of several hosts
  (not an intra-node run); no completion summary (cut short, hung); results not validated
  (``-c 0``: ``#wrong`` ``N/A`` in every row); ``minBusbwGbps`` not set.

Parameters (run mode: ``SIGNAL_PARAM_<NAME>``; ``--verify``: ``--<name> value``):
``minBusbwGbps`` (required: GB/s as nccl-tests prints), ``expectedGpus``, ``requireNvlink``
(true/false), ``benchmark`` (path of the nccl-tests binary, default ``all_reduce_perf`` on PATH),
``allowedWarnings`` (a regular expression of ``NCCL WARN`` lines to accept).
Standard library only; the script is mounted alone.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

CHECK = "nccl-intranode"
PASS, FAIL, INCONCLUSIVE = "Pass", "Fail", "Inconclusive"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
PARAMETERS = ("minBusbwGbps", "expectedGpus", "requireNvlink", "benchmark", "allowedWarnings")
DEFAULT_BENCHMARK = "all_reduce_perf"
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
TIMEOUT_SECONDS = 3600

SOURCE_LINE = "# source: "
"""A recorded output's provenance line (the catalog's test data): never part of the evidence."""

Measurements = dict[str, bool | int | float | str]

# Prefixes launchers put before each line: OpenMPI --tag-output "[1,0]<stdout>:", MPICH/Intel MPI
# -prepend-rank "[0] ", Slurm srun --label "0: ", a bracketed timestamp.
_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:\s?|\[\d+\]\s|\d+:\s|\[\d{4}-\d\d-\d\d[ T][\d:.]+\]\s)+")
_NCCL_LINE = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:\S+:\d+ )?NCCL (?P<level>INFO|WARN) "
)
# nccl-tests' lines start with "#"; some builds and pastes drop it (leading spaces instead).
_RANK_HEADER = re.compile(
    r"^#?\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+\d+"
)
# "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", older "Channel 00 : 7[ca000] -> 6[c7000] via SHM/direct/direct",
# oldest "Ring 00 : 3[3] -> 2[2] via P2P/IPC"
_CHANNEL = re.compile(
    r"NCCL INFO (?:Channel|Ring) \d+(?:/\d+)? : (?P<src>\d+)(?:\[[0-9a-fA-Fx]+\])?"
    r" -> (?P<dst>\d+)(?:\[[0-9a-fA-Fx]+\])?(?: \[(?:send|receive)\])? via (?P<via>\S+(?: pointer)?)"
)
_NVLS = re.compile(r"NCCL INFO (?:Connected NVLS|NVLS comm|.*\b[1-9]\d* nvls channels)")
_GRAPH = re.compile(r"NCCL INFO Pattern \d+, crossNic \d+, nChannels \d+, bw [\d.]+/[\d.]+, type (?P<type>[A-Z]+)/")
_COMM_DONE = re.compile(r"NCCL INFO .*\brank (?P<rank>\d+) nranks (?P<nranks>\d+)\b.* (?:Init|Destroy) COMPLETE", re.I)
_NRANKS = re.compile(r"NCCL INFO comm \S+ rank \d+ nRanks (?P<nranks>\d+) nNodes (?P<nodes>\d+)")
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)")
_OUT_OF_BOUNDS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<status>OK|FAILED)\b")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(?P<value>[-+0-9.eE]+|nan|inf)")
_ERRORS = re.compile(
    r"NCCL WARN|\bnccl(?:System|Internal|UnhandledCuda|Remote)Error\b|\bncclInvalid(?:Argument|Usage)\b"
    r"|\bTest (?:NCCL |CUDA )?failure\b|\bCUDA error\b|\bcudaError\w+|\*\*\* Process received signal \*\*\*"
    r"|\bSegmentation fault\b|\bMPI_ABORT\b"
)
_NET_WARNING = re.compile(r"NCCL WARN NET/|NCCL WARN .*(?:libibverbs|plugin)", re.I)
"""An inter-node network plugin's warning: no part of an intra-node run (counted, not a fault)."""


@dataclass
class Parsed:
    header: dict[int, str] = field(default_factory=dict)
    nccl_lines: int = 0
    hosts: set[str] = field(default_factory=set)
    vias: list[str] = field(default_factory=list)
    channel_ranks: set[int] = field(default_factory=set)
    channel_sources: set[int] = field(default_factory=set)
    nvls: bool = False
    graph_types: set[str] = field(default_factory=set)
    nranks: set[int] = field(default_factory=set)
    nodes: int | None = None
    version: str | None = None
    errors: list[str] = field(default_factory=list)
    net_warnings: int = 0
    rows: list[tuple[int, float, float | None, str, str]] = field(default_factory=list)
    """(size, busbw out-of-place, busbw in-place or None, #wrong out-of-place, #wrong in-place)."""
    out_of_bounds: tuple[int, str] | None = None
    avg_busbw: float | None = None


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


def _row(line: str) -> tuple[int, float, float | None, str, str] | None:
    """size count type redop [root] (time algbw busbw #wrong) x 2; in-place may be N/A."""
    parts = line.split()
    if len(parts) not in (12, 13) or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    oop, ip = parts[-8:-4], parts[-4:]
    busbw = _float(oop[2])
    if busbw is None:
        return None
    return int(parts[0]), busbw, _float(ip[2]), oop[3], ip[3]


def parse_log(text: str) -> Parsed:
    parsed = Parsed()
    for raw in text.splitlines():
        # A paste indented as a whole (a Markdown list's code block) reads like the output itself.
        line = _PREFIX.sub("", raw.strip()).lstrip()
        if _ERRORS.search(line):
            if _NET_WARNING.search(line):
                parsed.net_warnings += 1
            else:
                parsed.errors.append(line[:300])
        if prefix := _NCCL_LINE.match(line):
            parsed.nccl_lines += 1
            parsed.hosts.add(prefix.group("host"))
        if not prefix and line.startswith(("#", "Rank", "Out of", "Avg bus")):
            if match := _RANK_HEADER.match(line):
                parsed.header[int(match.group("rank"))] = match.group("host").split(".")[0]
                continue
            if match := _OUT_OF_BOUNDS.match(line):
                parsed.out_of_bounds = (int(match.group("count")), match.group("status"))
                continue
            if match := _AVG.match(line):
                parsed.avg_busbw = _float(match.group("value"))
                continue
            if line.startswith("#"):
                continue
        if match := _CHANNEL.search(line):
            parsed.vias.append(match.group("via"))
            parsed.channel_ranks |= {int(match.group("src")), int(match.group("dst"))}
            parsed.channel_sources.add(int(match.group("src")))
        if _NVLS.search(line):
            parsed.nvls = True
        if match := _GRAPH.search(line):
            parsed.graph_types.add(match.group("type"))
        if match := _COMM_DONE.search(line):
            parsed.nranks.add(int(match.group("nranks")))
        if match := _NRANKS.search(line):
            parsed.nranks.add(int(match.group("nranks")))
            parsed.nodes = max(parsed.nodes or 0, int(match.group("nodes")))
        if (match := _VERSION.search(line)) and parsed.version is None:
            parsed.version = match.group("version")
        if not prefix and line.split(maxsplit=1)[:1] and line.split()[0].isdigit() and (row := _row(line)):
            parsed.rows.append(row)
    return parsed


def config_problems(params: dict[str, str]) -> list[str]:
    problems = [f"unknown parameter {name!r}" for name in params if name not in PARAMETERS]
    threshold = params.get("minBusbwGbps")
    if threshold is None:
        problems.append(
            "minBusbwGbps is not set: the project ships no hardware thresholds; set the bus bandwidth (GB/s, "
            "as nccl-tests prints) a known-good Node of this model reaches with the same arguments"
        )
    elif (value := _float(threshold)) is None or value <= 0:
        problems.append(f"minBusbwGbps must be a positive number of GB/s, not {threshold!r}")
    if "expectedGpus" in params and not params["expectedGpus"].isdigit():
        problems.append(f"expectedGpus must be a whole number, not {params['expectedGpus']!r}")
    if params.get("requireNvlink", "false").lower() not in ("true", "false"):
        problems.append("requireNvlink must be true or false")
    try:
        re.compile(params.get("allowedWarnings", ""))
    except re.error as exc:
        problems.append(f"allowedWarnings is not a regular expression: {exc}")
    return problems


def _transport(parsed: Parsed, params: dict[str, str], world: int, faults: list[str], missing: list[str]) -> str:
    kinds = sorted({via.split("/")[0] for via in parsed.vias})
    shm = [v for v in parsed.vias if v.startswith("SHM")]
    net = [v for v in parsed.vias if v.startswith(("NET", "COLLNET"))]
    if shm:
        faults.append(f"{len(shm)} channel(s) via {shm[0]}: NCCL fell back to host shared memory instead of GPU P2P")
    if net and len(parsed.hosts) <= 1:
        faults.append(f"{len(net)} channel(s) via {net[0]} inside one Node: GPU P2P and SHM both unavailable")
    if not parsed.vias and not parsed.nvls:
        missing.append("no channel lines: the transport is not proven (run with NCCL_DEBUG=INFO)")
    elif parsed.vias and (silent := sorted(set(range(world)) - parsed.channel_sources)):
        missing.append(f"rank(s) {silent[:8]} connect no channel in the log: their transport is not proven")
    if params.get("requireNvlink", "").lower() == "true":
        if parsed.graph_types and "NVL" not in parsed.graph_types and not parsed.nvls:
            faults.append(f"requireNvlink: NCCL's graph is {'/'.join(sorted(parsed.graph_types))}, not NVL")
        elif not parsed.graph_types and not parsed.nvls:
            missing.append("requireNvlink: no 'Pattern ..., type NVL/...' line (add GRAPH to NCCL_DEBUG_SUBSYS)")
    return "+".join(kinds + (["NVLS"] if parsed.nvls else [])) or "none"


def _bandwidth(
    parsed: Parsed, params: dict[str, str], world: int, faults: list[str], measurements: Measurements
) -> None:
    """The largest message's bus bandwidth (the lower of out-of-place and in-place) against the
    threshold, judged only for a completed run of two or more ranks."""
    if not parsed.rows:
        return
    size, oop, ip, _, _ = max(parsed.rows, key=lambda r: r[0])
    largest = min(b for b in (oop, ip) if b is not None)
    measurements.update({"largest_bytes": size, "busbw_gbps": largest})
    threshold = _float(params.get("minBusbwGbps", "")) or 0
    complete = parsed.out_of_bounds is not None and parsed.avg_busbw is not None and world >= 2
    if complete and largest <= 0:
        faults.append("zero bus bandwidth at the largest size")
    elif complete and threshold > 0 and largest < threshold:
        faults.append(f"bus bandwidth {largest:g} GB/s at {size} bytes is below minBusbwGbps {threshold:g}")
    if threshold > 0:
        measurements["threshold_gbps"] = threshold


def verify_text(text: str, params: dict[str, str], *, exit_code: int | None = 0) -> Verdict:
    """The verdict of a captured nccl-tests output of one Node. Fails closed."""
    text = "\n".join(line for line in text.splitlines() if not line.startswith(SOURCE_LINE))
    parsed = parse_log(text)
    faults: list[str] = []
    missing = list(config_problems(params))
    if exit_code is None:
        missing.append("the benchmark did not run to its end (not found, killed or timed out)")
    elif exit_code != 0:
        faults.append(f"the benchmark exited {exit_code}")
    allowed = params.get("allowedWarnings", "")
    errors = [e for e in parsed.errors if not (allowed and "NCCL WARN" in e and re.search(allowed, e))]
    if errors:
        faults.append(f"{len(errors)} error line(s), first: {errors[0][:200]}")
    hosts = set(parsed.header.values()) | {h.split(".")[0] for h in parsed.hosts}
    # The world its own lines name: nccl-tests' rank list, NCCL's nranks, the ranks channels connect.
    world = max([len(parsed.header), *parsed.nranks, max(parsed.channel_ranks, default=-1) + 1], default=0)
    if len(hosts) > 1 or (parsed.nodes or 1) > 1:
        missing.append(f"the log spans {max(len(hosts), parsed.nodes or 1)} hosts: not a run inside one Node")
    if world < 2:
        missing.append(f"a world of {world} rank(s): no GPU-to-GPU transport to prove")
    expected = params.get("expectedGpus", "")
    if expected.isdigit() and world and world != int(expected):
        missing.append(f"{world} rank(s), expected {expected} (every GPU of the Node)")
    if not parsed.nccl_lines:
        missing.append("no NCCL debug lines: run with NCCL_DEBUG=INFO")
    transport = _transport(parsed, params, world, faults, missing) if parsed.nccl_lines else "none"
    wrong = [size for size, _, _, w1, w2 in parsed.rows if any((_float(w) or 0) != 0 for w in (w1, w2) if w != "N/A")]
    if wrong:
        faults.append(f"wrong elements at size(s) {wrong[:4]}")
    if not parsed.rows or parsed.out_of_bounds is None or parsed.avg_busbw is None:
        missing.append("the run did not complete: no result rows or no nccl-tests summary")
    elif all(w == "N/A" for _, _, _, w1, w2 in parsed.rows for w in (w1, w2)):
        missing.append("the results were not validated (#wrong N/A in every row: nccl-tests ran with -c 0)")
    elif parsed.out_of_bounds != (0, "OK"):
        faults.append(f"out of bounds values: {parsed.out_of_bounds[0]} {parsed.out_of_bounds[1]}")
    measurements: Measurements = {"world_size": world, "hosts": len(hosts), "transport": transport[:64]}
    if parsed.version:
        measurements["nccl_version"] = parsed.version
    if parsed.net_warnings:
        measurements["net_plugin_warnings"] = parsed.net_warnings
    _bandwidth(parsed, params, world, faults, measurements)
    if parsed.avg_busbw is not None:
        measurements["busbw_avg_gbps"] = parsed.avg_busbw
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


def run_tool(argv: list[str], env: dict[str, str]) -> tuple[int | None, str]:
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_SECONDS, check=False, env=env
        )
    except subprocess.TimeoutExpired as exc:
        return None, ((exc.stdout or b"") + (exc.stderr or b"")).decode("utf-8", "replace")[:MAX_OUTPUT_BYTES]
    output = (done.stdout + done.stderr).decode("utf-8", "replace")
    if len(output) > MAX_OUTPUT_BYTES:
        return None, ""
    return (done.returncode if done.returncode >= 0 else None), output


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


def missing_tool(tool: str) -> Verdict:
    reason = f"{tool} is not on PATH in this image: the check cannot run (use an image with nccl-tests)"
    return Verdict(INCONCLUSIVE, (), (reason,), {"outcome": INCONCLUSIVE, "tool_found": False})


def _gpu_count(params: dict[str, str]) -> str:
    """-g: every GPU the Pod was given (expectedGpus, else NVIDIA_VISIBLE_DEVICES' list, else 1)."""
    if params.get("expectedGpus", "").isdigit():
        return params["expectedGpus"]
    visible = [d for d in os.environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return str(len(visible)) if visible and visible[0] not in ("all", "none", "void") else "1"


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
    tool = params.get("benchmark", DEFAULT_BENCHMARK)
    found = shutil.which(tool)
    if found is None:  # first: a missing tool is the reason whatever the other parameters
        return report(missing_tool(tool))
    problems = config_problems(params)
    if problems:
        reasons = tuple(f"configuration error: {p}" for p in problems)
        return report(Verdict(INCONCLUSIVE, (), reasons, {"outcome": INCONCLUSIVE}))
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH"}
    argv = [found, "-b", "8M", "-e", "4G", "-f", "2", "-g", _gpu_count(params), "-c", "1", "-w", "5", "-n", "20"]
    code, output = run_tool(argv, env)
    sys.stdout.write(output[-65536:] + "\n")
    return report(verify_text(output, params, exit_code=code))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
