#!/usr/bin/env python3
"""gpu-inventory: prove from ``nvidia-smi -q`` (XML, or its text form) that a Node has the GPUs it
should, that every one answers, and that none carries a memory fault NVIDIA tells operators to act on.

* **Pass** (exit 0): nvidia-smi answered; the report names as many GPUs as ``expectedGpuCount`` and
  as it says are attached; every GPU's ECC counters, retired-page and row-remapper state were read;
  no volatile uncorrectable ECC error, no page retirement or row remap pending, no remapping failure,
  no reset required; the driver and CUDA versions equal ``expectedDriverVersion`` /
  ``expectedCudaVersion`` when those are set; persistence mode on when ``requirePersistenceMode``.
* **Fail** (exit 1), a proven fault: ``No devices were found``; a GPU lost or unreachable
  (``Unable to determine the device handle``, ``GPU is lost``); ``Driver/library version mismatch``;
  the driver not loaded; fewer or more GPUs than expected; an uncorrectable ECC error since the last
  reset; pages or rows pending retirement/remap; a row-remapping failure; a reset required; versions
  or persistence mode other than required; aggregate uncorrectable errors above
  ``maxAggregateUncorrectable`` when that is set.
* **Inconclusive** (exit 3): nvidia-smi absent or not run; output cut short (XML that does not
  parse, fewer GPU sections than ``Attached GPUs``, a GPU section without its ECC or retirement
  state); NVML failing for a reason that is not the Node's (``Failed to initialize NVML: Unknown
  Error``, insufficient permissions); ``expectedGpuCount`` not set.

Parameters (run mode: environment ``SIGNAL_PARAM_<NAME>``; ``--verify``: ``--<name> value``):
``expectedGpuCount`` (required unless ``NVIDIA_VISIBLE_DEVICES`` lists the GPUs), ``expectedDriverVersion``,
``expectedCudaVersion``, ``requirePersistenceMode`` (true/false), ``maxAggregateUncorrectable``.
No hardware threshold has a default. Standard library only; the script is mounted alone.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

CHECK = "gpu-inventory"
TOOL = "nvidia-smi"
PASS, FAIL, INCONCLUSIVE = "Pass", "Fail", "Inconclusive"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
PARAMETERS = (
    "expectedGpuCount",
    "expectedDriverVersion",
    "expectedCudaVersion",
    "requirePersistenceMode",
    "maxAggregateUncorrectable",
)
MAX_OUTPUT_BYTES = 32 * 1024 * 1024
TIMEOUT_SECONDS = 300

SOURCE_LINE = "# source: "
"""A recorded output's provenance line (the catalog's test data): never part of the evidence."""

Measurements = dict[str, bool | int | float | str]

# Messages nvidia-smi prints instead of a report. (pattern, fault?) - a fault is the Node's.
_FATAL = (
    (re.compile(r"No devices were found", re.I), True, "nvidia-smi: No devices were found"),
    (
        re.compile(r"Unable to determine the device handle for GPU\s*[0-9A-Fa-f:.]*\s*:[^\n]*", re.I),
        True,
        "a GPU does not answer",
    ),
    (re.compile(r"\bGPU is lost\b", re.I), True, "a GPU is lost (fallen off the bus)"),
    (re.compile(r"Driver/library version mismatch", re.I), True, "NVML: Driver/library version mismatch"),
    (
        re.compile(r"couldn't communicate with the NVIDIA driver", re.I),
        True,
        "nvidia-smi couldn't communicate with the NVIDIA driver (driver not loaded)",
    ),
    (re.compile(r"Failed to initialize NVML: (?!Driver/library)(?P<why>[^\n]*)", re.I), False, "NVML failed to start"),
    (re.compile(r"Insufficient Permissions", re.I), False, "nvidia-smi: insufficient permissions"),
)
_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_KEY_VALUE = re.compile(r"^(?P<indent>\s*)(?P<key>[^:]+?)\s*:\s?(?P<value>.*?)\s*$")


@dataclass
class Gpu:
    bus_id: str
    persistence: str | None = None
    ecc_mode: str | None = None
    volatile_uncorrectable: int | None = None
    aggregate_uncorrectable: int | None = None
    ecc_seen: bool = False
    retirement_seen: bool = False
    pending_retirement: bool = False
    remap_pending: bool = False
    remap_failure: bool = False
    reset_required: bool = False


@dataclass
class Report:
    form: str = "none"
    driver: str | None = None
    cuda: str | None = None
    attached: int | None = None
    gpus: list[Gpu] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    outcome: str
    faults: tuple[str, ...]
    missing: tuple[str, ...]
    measurements: Measurements

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]


def _int(value: str | None) -> int | None:
    value = (value or "").strip()
    return int(value) if value.isdigit() else None


def _yes(value: str | None) -> bool:
    """The first word is Yes (an annotation after it, as people paste reports, does not hide it)."""
    words = (value or "").split()
    return bool(words) and words[0].lower() in ("yes", "true")


# --------------------------------------------------------------------------------------------
# Text form: an indented tree of "Key : Value" lines, one "GPU <bus id>" section per GPU.
# --------------------------------------------------------------------------------------------


def _leaves(lines: list[str]) -> list[tuple[tuple[str, ...], str]]:
    """(section path, value) of every "Key : Value" line of one GPU section."""
    out: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[int, str]] = []
    for line in lines:
        if not line.strip() or line.strip() == "[...]":
            continue
        indent = len(line) - len(line.lstrip())
        match = _KEY_VALUE.match(line)
        key = (match.group("key") if match else line).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*tuple(k.lower() for _, k in stack), key.lower())
        if match and match.group("value") != "":
            out.append((path, match.group("value")))
        else:
            stack.append((indent, key))
            out.append((path, ""))
    return out


def _gpu_from_text(bus: str, lines: list[str]) -> Gpu:
    gpu = Gpu(bus)
    volatile = aggregate = 0
    totals: dict[str, int] = {}
    counted = {"volatile": False, "aggregate": False}
    for path, value in _leaves(lines):
        key = path[-1]
        if path == ("persistence mode",):
            gpu.persistence = value
        elif path[:2] == ("ecc mode", "current"):
            gpu.ecc_mode = value
        elif path[:1] == ("ecc errors",):
            gpu.ecc_seen = True
            if len(path) >= 3 and path[1] in counted and (number := _int(value)) is not None:
                if "double bit" in path and key == "total":
                    totals[path[1]] = number
                elif "uncorrectable" in key and "double bit" not in path:
                    counted[path[1]] = True
                    if path[1] == "volatile":
                        volatile += number
                    else:
                        aggregate += number
        elif path[:1] == ("retired pages",):
            gpu.retirement_seen = True
            if key.startswith("pending") and _yes(value):
                gpu.pending_retirement = True
        elif path[:1] == ("remapped rows",):
            gpu.retirement_seen = True
            if key == "pending" and _yes(value):
                gpu.remap_pending = True
            elif key.startswith("remapping failure") and _yes(value):
                gpu.remap_failure = True
        elif path[:1] == ("gpu reset status",) and key in ("reset required", "drain and reset recommended"):
            gpu.reset_required = gpu.reset_required or _yes(value)
    gpu.volatile_uncorrectable = totals.get("volatile", volatile if counted["volatile"] else None)
    gpu.aggregate_uncorrectable = totals.get("aggregate", aggregate if counted["aggregate"] else None)
    return gpu


def parse_text(text: str) -> Report:
    report = Report(form="text")
    sections: list[tuple[str, list[str]]] = []
    orphan: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if (match := _GPU_HEADER.match(line.strip())) and line.startswith("GPU"):
            sections.append((match.group("bus"), []))
            continue
        if line.startswith((" ", "\t")) or not line:
            (sections[-1][1] if sections else orphan).append(line)
            continue
        if match := _KEY_VALUE.match(line):
            key, value = match.group("key").strip().lower(), match.group("value")
            if key == "driver version":
                report.driver = value
            elif key == "cuda version":
                report.cuda = value
            elif key == "attached gpus":
                report.attached = _int(value)
    report.gpus = [_gpu_from_text(bus, lines) for bus, lines in sections]
    if not sections and orphan:
        # A GPU's record without its "GPU <bus id>" line (a pasted part of a report): judged, never complete.
        gpu = _gpu_from_text("(unnamed)", orphan)
        if gpu.ecc_seen or gpu.retirement_seen:
            report.gpus.append(gpu)
    return report


# --------------------------------------------------------------------------------------------
# XML form (nvidia-smi -q -x).
# --------------------------------------------------------------------------------------------


def _text(node: ET.Element | None, path: str) -> str | None:
    found = node.find(path) if node is not None else None
    return found.text.strip() if found is not None and found.text is not None else None


def _sum_uncorrectable(node: ET.Element | None) -> int | None:
    if node is None:
        return None
    total = _text(node, "double_bit/total")
    if total is not None:
        return _int(total)
    values = [_int(child.text) for child in node if "uncorrectable" in child.tag and child.text]
    numbers = [v for v in values if v is not None]
    return sum(numbers) if numbers else None


def _gpu_from_xml(node: ET.Element) -> Gpu:
    gpu = Gpu(node.get("id", "?"))
    gpu.persistence = _text(node, "persistence_mode")
    gpu.ecc_mode = _text(node, "ecc_mode/current_ecc")
    errors = node.find("ecc_errors")
    gpu.ecc_seen = errors is not None
    gpu.volatile_uncorrectable = _sum_uncorrectable(errors.find("volatile") if errors is not None else None)
    gpu.aggregate_uncorrectable = _sum_uncorrectable(errors.find("aggregate") if errors is not None else None)
    retired, remapped = node.find("retired_pages"), node.find("remapped_rows")
    gpu.retirement_seen = retired is not None or remapped is not None
    if retired is not None:
        gpu.pending_retirement = any(_yes(_text(retired, tag)) for tag in ("pending_blacklist", "pending_retirement"))
    if remapped is not None:
        gpu.remap_pending = _yes(_text(remapped, "remapped_row_pending"))
        gpu.remap_failure = _yes(_text(remapped, "remapped_row_failure"))
    reset = node.find("gpu_reset_status")
    if reset is not None:
        gpu.reset_required = any(_yes(_text(reset, t)) for t in ("reset_required", "drain_and_reset_recommended"))
    return gpu


def parse_xml(text: str) -> Report:
    report = Report(form="xml")
    start = text.find("<nvidia_smi_log")
    try:
        root = ET.fromstring(text[start:]) if start >= 0 else None
    except ET.ParseError as exc:
        report.missing.append(f"the XML report does not parse (cut short?): {exc}")
        return report
    if root is None:
        report.missing.append("no <nvidia_smi_log> element")
        return report
    report.driver = _text(root, "driver_version")
    report.cuda = _text(root, "cuda_version")
    report.attached = _int(_text(root, "attached_gpus"))
    report.gpus = [_gpu_from_xml(gpu) for gpu in root.findall("gpu")]
    return report


def parse(text: str) -> Report:
    """A report in whichever form the text is, with the errors nvidia-smi printed instead of one."""
    report = parse_xml(text) if "<nvidia_smi_log" in text else parse_text(text)
    for pattern, is_fault, what in _FATAL:
        match = pattern.search(text)
        if match:
            line = text[match.start() :].splitlines()[0].strip()[:200]
            (report.faults if is_fault else report.missing).append(f"{what}: {line!r}")
    return report


# --------------------------------------------------------------------------------------------
# Verification (pure).
# --------------------------------------------------------------------------------------------


def config_problems(params: dict[str, str]) -> list[str]:
    problems = [f"unknown parameter {name!r}" for name in params if name not in PARAMETERS]
    for name in ("expectedGpuCount", "maxAggregateUncorrectable"):
        if name in params and not params[name].strip().isdigit():
            problems.append(f"{name} must be a whole number, not {params[name]!r}")
    if params.get("requirePersistenceMode", "false").strip().lower() not in ("true", "false"):
        problems.append("requirePersistenceMode must be true or false")
    return problems


def _judge_gpu(gpu: Gpu, params: dict[str, str], faults: list[str], missing: list[str]) -> None:
    where = f"GPU {gpu.bus_id}"
    if gpu.volatile_uncorrectable:
        faults.append(f"{where}: {gpu.volatile_uncorrectable} uncorrectable ECC error(s) since the last reset")
    limit = params.get("maxAggregateUncorrectable", "")
    if limit.isdigit() and gpu.aggregate_uncorrectable is not None and gpu.aggregate_uncorrectable > int(limit):
        faults.append(f"{where}: {gpu.aggregate_uncorrectable} aggregate uncorrectable ECC errors > {limit}")
    if gpu.pending_retirement:
        faults.append(f"{where}: memory pages pending retirement (reset the GPU, then re-check)")
    if gpu.remap_pending:
        faults.append(f"{where}: row remapping pending (reset the GPU, then re-check)")
    if gpu.remap_failure:
        faults.append(f"{where}: row remapping failure occurred (NVIDIA: RMA candidate)")
    if gpu.reset_required:
        faults.append(f"{where}: GPU reset required")
    if not gpu.ecc_seen and (gpu.ecc_mode or "").lower() == "enabled":
        missing.append(f"{where}: ECC is enabled but its error counters are absent from the report")
    if gpu.ecc_mode is None and not gpu.ecc_seen:
        missing.append(f"{where}: no ECC state in the report (cut short?)")
    if not gpu.retirement_seen:
        missing.append(f"{where}: no retired-pages/remapped-rows state in the report (cut short?)")
    if gpu.persistence is None:
        missing.append(f"{where}: no persistence mode in the report")
    elif params.get("requirePersistenceMode", "").lower() == "true" and gpu.persistence.lower() != "enabled":
        faults.append(f"{where}: persistence mode is {gpu.persistence}, required Enabled")


def verify_text(text: str, params: dict[str, str], *, exit_code: int | None = 0) -> Verdict:
    """The verdict of a captured nvidia-smi -q (or -q -x) output. Fails closed."""
    text = "\n".join(line for line in text.splitlines() if not line.startswith(SOURCE_LINE))
    report = parse(text)
    faults, missing = list(report.faults), [*config_problems(params), *report.missing]
    if exit_code is None:
        missing.append("nvidia-smi did not run to its end (not found, killed or timed out)")
    elif exit_code != 0 and not faults:
        missing.append(f"nvidia-smi exited {exit_code} without naming a fault")
    expected = params.get("expectedGpuCount", "")
    if not expected:
        missing.append("expectedGpuCount is not set (nor NVIDIA_VISIBLE_DEVICES): nothing to count the GPUs against")
    seen = len(report.gpus)
    if not report.faults and report.form == "text" and report.attached is None and not seen:
        missing.append("no nvidia-smi -q report in the output")
    complete = report.attached is not None and report.attached == seen and not report.missing
    if report.attached is not None and report.attached != seen:
        missing.append(f"the report says {report.attached} GPU(s) attached but has {seen} GPU section(s): cut short?")
    counted = report.attached if report.attached is not None else (seen if complete else None)
    if expected.isdigit() and counted is not None and counted != int(expected):
        faults.append(f"{counted} GPU(s) attached, expected {expected}")
    if report.attached is None and seen:
        missing.append("no 'Attached GPUs' count in the report")
    for gpu in report.gpus:
        _judge_gpu(gpu, params, faults, missing)
    for name, actual in (("expectedDriverVersion", report.driver), ("expectedCudaVersion", report.cuda)):
        wanted = params.get(name, "").strip()
        if wanted and actual is not None and actual.strip() != wanted:
            faults.append(f"{name}: the Node has {actual.strip()}, expected {wanted}")
        elif wanted and actual is None:
            missing.append(f"{name} is set but the report names no such version")
    measurements: Measurements = {"gpus": seen, "form": report.form}
    if report.attached is not None:
        measurements["attached_gpus"] = report.attached
    if report.driver:
        measurements["driver_version"] = report.driver[:64]
    if report.cuda:
        measurements["cuda_version"] = report.cuda[:64]
    volatile = [g.volatile_uncorrectable for g in report.gpus if g.volatile_uncorrectable is not None]
    aggregate = [g.aggregate_uncorrectable for g in report.gpus if g.aggregate_uncorrectable is not None]
    if volatile:
        measurements["ecc_volatile_uncorrectable"] = sum(volatile)
    if aggregate:
        measurements["ecc_aggregate_uncorrectable"] = sum(aggregate)
    measurements["persistence_disabled"] = sum(1 for g in report.gpus if (g.persistence or "").lower() == "disabled")
    measurements["remap_or_retire_pending"] = sum(1 for g in report.gpus if g.remap_pending or g.pending_retirement)
    outcome = FAIL if faults else INCONCLUSIVE if missing else PASS
    measurements["outcome"] = outcome
    return Verdict(outcome, tuple(faults), tuple(dict.fromkeys(missing)), measurements)


# --------------------------------------------------------------------------------------------
# The check (I/O). Shared shape with the catalog's other checks: see checks/README.md.
# --------------------------------------------------------------------------------------------


def params_from_env(environ: dict[str, str]) -> dict[str, str]:
    params = {name: environ[key] for name in PARAMETERS if (key := f"SIGNAL_PARAM_{name.upper()}") in environ}
    visible = environ.get("NVIDIA_VISIBLE_DEVICES", "")
    listed = [d for d in visible.split(",") if d.strip()]
    if "expectedGpuCount" not in params and listed and visible not in ("all", "none", "void"):
        params["expectedGpuCount"] = str(len(listed))
    return params


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


def run_tool(argv: list[str]) -> tuple[int | None, str]:
    """Run a tool, bounded in time and output: (exit code or None when it did not end, output)."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_SECONDS, check=False)
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
        # The runner keeps at most 16: the outcome and the summary first, per-test results after.
        ordered = sorted(verdict.measurements.items(), key=lambda item: item[0].startswith("test_"))
        kept = dict(ordered[:16])
        kept = {k: (v[:128] if isinstance(v, str) else v) for k, v in kept.items()}
        Path(target).write_text(json.dumps(kept, sort_keys=True), encoding="utf-8")
    return verdict.exit_code


def missing_tool(tool: str) -> Verdict:
    reason = f"{tool} is not on PATH in this image: the check cannot run (use an image that has {tool})"
    return Verdict(INCONCLUSIVE, (), (reason,), {"outcome": INCONCLUSIVE, "tool_found": False})


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
    if shutil.which(TOOL) is None:
        return report(missing_tool(TOOL))
    code, output = run_tool([TOOL, "-q", "-x"])
    if "<nvidia_smi_log" not in output:
        code, output = run_tool([TOOL, "-q"])
    sys.stdout.write(output[-65536:])
    return report(verify_text(output, params, exit_code=code))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
