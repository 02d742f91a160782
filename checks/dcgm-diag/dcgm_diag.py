#!/usr/bin/env python3
"""dcgm-diag: run NVIDIA DCGM's active diagnostics (``dcgmi diag -r <level>``) and judge what they prove.

* **Pass** (exit 0): the diagnostic ran to its end (a complete result table, or JSON that parses
  with no ``runtime_error``) and every test it reports passed, on every GPU.
* **Fail** (exit 1), a proven fault: a test failed for a reason that is the Node's - its hardware
  (memory/ECC, row remapping, thermal or power violations, PCIe or NVLink errors, Xids...) or its
  configuration (persistence mode, a denylisted driver, an environment variable, page retirement) -
  DCGM's own verdict ``Fail``, with a message that is not one of DCGM's internal errors.
* **Inconclusive** (exit 3): dcgmi absent or not run; no host engine (``Unable to connect to host
  engine``); plugins or CUDA that could not load or start (``Error using CUDA API``, ``API call ...
  failed``, ``busy or unavailable``, internal errors, ``runtime_error``); a skipped, not-run or
  warned test; output cut short (a table without its closing border, JSON that does not parse); a
  line DCGM printed before its JSON document other than its success banner (a ``WARNING`` line is
  accepted with ``allowWarnings``).

Every test's result is in the measurements (``test_<name>``). Parameters (run mode:
``SIGNAL_PARAM_<NAME>``; ``--verify``: ``--<name> value``): ``level`` (1-4, required to run),
``hostEngine`` (``host:port`` of an nv-hostengine, e.g. the GPU operator's ``nvidia-dcgm`` service;
unset: dcgmi's default, localhost or an embedded host engine), ``allowWarnings`` (true: a Warn
that is not a failure does not make the run Inconclusive), ``allowSkips`` (comma-separated test
names whose Skip is expected, e.g. ``EUD Test`` where the EUD package is not installed).
Standard library only; mounted alone.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHECK = "dcgm-diag"
TOOL = "dcgmi"
PASS, FAIL, INCONCLUSIVE = "Pass", "Fail", "Inconclusive"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
PARAMETERS = ("level", "hostEngine", "allowWarnings", "allowSkips")
MAX_OUTPUT_BYTES = 32 * 1024 * 1024
TIMEOUT_SECONDS = 4 * 3600
"""Level 4 runs for hours on an 8-GPU Node (NVIDIA: 'Extended, longer-running'); the check's
backendActiveDeadline should be the real bound."""

Measurements = dict[str, bool | int | float | str]

_STATUS = re.compile(r"^(?P<status>pass|fail|warn(?:ing)?|skip(?:ped)?|not run)\b", re.I)
_ENTITY_STATUS = re.compile(r"^GPU\s*\d+\s*:\s*(?P<status>pass|fail|warn|skip|not run)\b", re.I)
_SECTION = re.compile(r"^[|+]-{2,}\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-{2,}\+")
_BORDER = re.compile(r"^\+-+\+-+\+\s*$")
_HEADER = re.compile(r"^\+=+\+=+\+\s*$")
_METADATA = {"dcgm version": "dcgm_version", "driver version detected": "driver_version"}
_HOST_ENGINE = re.compile(
    r"Unable to connect to host engine|unable to establish a connection to the specified host"
    r"|Host engine connection invalid|Failed to start DCGM Server",
    re.I,
)
_INTERNAL = re.compile(
    r"Error using CUDA API|API call \w+ failed|Unable to create CUDA context|busy or unavailable"
    r"|context is destroyed|internal error|DCGM_FR_INTERNAL|plugin\b.*\b(?:load|found)|could(?: not|n't) load"
    r"|failed to load|Unable to load|not found among possible test choices|nvvs\b.*\b(?:fail|error|not found)"
    r"|Unable to open|timed out|timeout|Could not stop the launched diagnostic|DCGM_ST_\w+|MCUTIL",
    re.I,
)
_HARDWARE = re.compile(
    r"uncorrectable|\bECC\b|\bDBE\b|\bSBE\b|row remap|remapping|page retirement|retired page|pending page"
    r"|Xid|thermal|power violation|PCIe|replay|NVLink|CRC|throttl|clock|persistence mode|denylist|blacklist"
    r"|environment variable|inforom|bandwidth|miscompar|memory error|data mismatch|fell off the bus|GPU is lost",
    re.I,
)


@dataclass
class Test:
    category: str
    name: str
    statuses: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    closed: bool = False
    """Another row, a section or the closing border came after it (its messages are whole)."""

    @property
    def status(self) -> str:
        worst = ("fail", "warn", "skip", "not run", "pass")
        found = set(self.statuses)
        return next((s for s in worst if s in found), "unknown")


@dataclass
class Report:
    form: str = "none"
    tests: list[Test] = field(default_factory=list)
    complete: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    """What dcgmi printed instead of results (``Error: ...``) or a JSON ``runtime_error``."""
    preamble: list[str] = field(default_factory=list)
    """Lines printed before the JSON document, other than dcgmi's own success banner."""


@dataclass(frozen=True)
class Verdict:
    outcome: str
    faults: tuple[str, ...]
    missing: tuple[str, ...]
    measurements: Measurements

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]


def _norm(status: str) -> str:
    status = status.strip().lower()
    for prefix, name in (("pass", "pass"), ("fail", "fail"), ("warn", "warn"), ("skip", "skip"), ("not", "not run")):
        if status.startswith(prefix):
            return name
    return "unknown"


# --------------------------------------------------------------------------------------------
# Text: the table dcgmi prints (DCGM 2.x/3.x "Pass - All" and per-GPU rows; 4.x "GPU0: Pass" rows).
# --------------------------------------------------------------------------------------------


def _piece(cell: str) -> str:
    """A cell's text without the table's padding: one space before, two after (dcgmi wraps a long
    message at a fixed width, inside words, so a piece's own trailing space is kept)."""
    piece = cell[1:] if cell.startswith(" ") else cell
    return piece[:-2] if piece.endswith("  ") else piece.rstrip()


class _Table:
    """Reads dcgmi's result table line by line into a Report."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.category = ""
        self.current: Test | None = None
        self.started = False

    def close(self) -> None:
        if self.current is not None:
            self.current.closed = True
        self.current = None

    def line(self, line: str) -> None:
        report = self.report
        if line.startswith(("Error:", "Error :")):
            report.errors.append(line[:300])
        elif _HEADER.match(line):
            self.started = True
        elif _BORDER.match(line):
            self.close()
            report.complete = bool(report.tests) or self.started
        elif match := _SECTION.match(line):
            self.category, self.started = match.group("name").strip(), True
            self.close()
        elif line.startswith("|"):
            report.complete = False
            cells = line.strip("|").split("|")
            self.row(cells[0].strip(), cells[1] if len(cells) > 1 else "")

    def row(self, name: str, cell: str) -> None:
        value = cell.strip()
        if name.lower() == "diagnostic" and value.lower() == "result":
            return
        if name.lower() in _METADATA or name.lower() == "gpu device ids detected":
            self.report.metadata[name.lower()] = value
        elif name in ("Error", "Warning", "Info"):
            if self.current is None:
                self.current = Test(self.category, f"{self.category or 'Diagnostic'} {name.lower()}")
                self.current.statuses.append("fail" if name == "Error" else "warn")
                self.report.tests.append(self.current)
            self.current.messages.append(f"{name}: {_piece(cell)}")
        elif not name:
            status = _ENTITY_STATUS.match(value) or _STATUS.match(value)
            if self.current is not None and status:
                self.current.statuses.append(_norm(status.group("status")))
            elif self.current is not None and self.current.messages:
                self.current.messages[-1] += _piece(cell)
            elif self.current is not None and value:
                # DCGM 4.x prints a test's messages under its per-GPU rows, in the result column.
                self.current.messages.append(_piece(cell))
        else:
            self.close()
            self.current = Test(self.category, name)
            if status := _STATUS.match(value):
                self.current.statuses.append(_norm(status.group("status")))
            self.report.tests.append(self.current)


def parse_text(text: str) -> Report:
    report = Report(form="text")
    table = _Table(report)
    for raw in text.splitlines():
        table.line(raw.strip())
    if table.current is not None and not report.complete:
        table.current.closed = False
    for test in report.tests:
        test.messages = [" ".join(m.split()) for m in test.messages]
    return report


# --------------------------------------------------------------------------------------------
# JSON (dcgmi diag -j): 2.x/3.x "DCGM GPU Diagnostic", 4.x "DCGM Diagnostic" (with test_summary).
# --------------------------------------------------------------------------------------------


def _warnings(result: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("warnings", "warning", "info", "error"):
        items = result.get(key)
        for item in items if isinstance(items, list) else [items] if items else []:
            if isinstance(item, dict):
                out.append(str(item.get("warning") or item.get("message") or item))
            else:
                out.append(str(item))
    return out


def parse_json(text: str) -> Report:
    report = Report(form="json")
    start = text.find("{")
    try:
        root = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        report.errors.append(f"the JSON output does not parse (cut short?): {exc.msg} at line {exc.lineno}")
        return report
    if not isinstance(root, dict):
        report.errors.append("the JSON output is not an object")
        return report
    body = root.get("DCGM Diagnostic", root.get("DCGM GPU Diagnostic"))
    if not isinstance(body, dict):
        report.errors.append("no 'DCGM Diagnostic' (4.x) or 'DCGM GPU Diagnostic' (2.x/3.x) object in the JSON")
        return report
    if body.get("runtime_error"):
        report.errors.append(f"runtime_error: {str(body['runtime_error'])[:300]}")
    metadata = root.get("metadata") if isinstance(root.get("metadata"), dict) else body
    for key, name in (("version", "dcgm version"), ("Driver Version Detected", "driver version detected")):
        if isinstance(metadata, dict) and isinstance(metadata.get(key), str):
            report.metadata[name] = metadata[key]
    for category in body.get("test_categories") or []:
        if not isinstance(category, dict):
            continue
        for item in category.get("tests") or []:
            if not isinstance(item, dict):
                continue
            test = Test(str(category.get("category", "")), str(item.get("name", "?")), closed=True)
            for result in item.get("results") or []:
                if isinstance(result, dict):
                    test.statuses.append(_norm(str(result.get("status", ""))))
                    test.messages += [m for m in _warnings(result) if m]
            summary = item.get("test_summary")
            if isinstance(summary, dict) and summary.get("status"):
                test.statuses.append(_norm(str(summary["status"])))
            report.tests.append(test)
    report.complete = not report.errors
    return report


_JSON_ROOT = re.compile(r'^\s*\{?\s*"DCGM (?:GPU )?Diagnostic"\s*:', re.M)
_BANNER = re.compile(r"^Successfully ran diagnostic for group\.?$", re.I)


def parse(text: str) -> Report:
    stripped = "\n".join(line for line in text.splitlines() if not line.startswith("# source:"))
    lines = stripped.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), 0)
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("{")), None)
    # A document after other lines (dcgmi's banner, a warning) is still the -j output, unless a
    # result table comes first.
    is_json = start is not None and (
        start == first
        or (_JSON_ROOT.search(stripped) is not None and not any(_HEADER.match(ln) for ln in lines[:start]))
    )
    if is_json and start is not None:
        report = parse_json("\n".join(lines[start:]))
        report.preamble = [ln.strip() for ln in lines[:start] if ln.strip() and not _BANNER.match(ln.strip())]
    else:
        report = parse_text(stripped)
    report.errors += [line.strip()[:300] for line in text.splitlines() if _HOST_ENGINE.search(line)]
    report.errors = list(dict.fromkeys(report.errors))
    return report


# --------------------------------------------------------------------------------------------
# Verification (pure).
# --------------------------------------------------------------------------------------------


def config_problems(params: dict[str, str]) -> list[str]:
    problems = [f"unknown parameter {name!r}" for name in params if name not in PARAMETERS]
    if "level" in params and params["level"] not in ("1", "2", "3", "4"):
        problems.append(f"level must be 1, 2, 3 or 4, not {params['level']!r}")
    if params.get("allowWarnings", "false").lower() not in ("true", "false"):
        problems.append("allowWarnings must be true or false")
    host = params.get("hostEngine", "")
    if host and not re.fullmatch(r"[A-Za-z0-9.\-]+(?::\d{1,5})?", host):
        problems.append(f"hostEngine must be host or host:port, not {host!r}")
    return problems


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:56] or "unnamed"


def _judge(test: Test, params: dict[str, str], faults: list[str], missing: list[str]) -> None:
    allow_warnings = params.get("allowWarnings", "false").lower() == "true"
    allowed_skips = {n.strip().lower() for n in params.get("allowSkips", "").split(",") if n.strip()}
    where = f"{test.category + ': ' if test.category else ''}{test.name}"
    text = " ".join(test.messages)
    status = test.status
    if status == "fail":
        if _HARDWARE.search(text) and not _INTERNAL.search(text):
            faults.append(f"{where} failed: {text[:240]}")
        elif _INTERNAL.search(text):
            missing.append(f"{where} failed for a reason that is DCGM's or the Pod's, not the Node's: {text[:200]}")
        elif test.closed:
            faults.append(f"{where} failed{': ' + text[:240] if text else ''}")
        else:
            missing.append(f"{where} failed but the output stops before its reason")
    elif status == "skip" and test.name.lower() in allowed_skips:
        return
    elif status in ("skip", "not run"):
        missing.append(f"{where}: {status} (the test did not run)")
    elif status == "warn" and not allow_warnings:
        missing.append(f"{where}: warning{': ' + text[:200] if text else ''}")
    elif status == "unknown":
        missing.append(f"{where}: no result")


def verify_text(text: str, params: dict[str, str], *, exit_code: int | None = 0) -> Verdict:
    """The verdict of a captured ``dcgmi diag`` output (table or ``-j`` JSON). Fails closed."""
    report = parse(text)
    faults: list[str] = []
    missing = list(config_problems(params))
    if exit_code is None:
        missing.append("dcgmi did not run to its end (not found, killed or timed out)")
    for error in report.errors:
        missing.append(f"dcgmi could not run the diagnostic: {error}")
    allow_warnings = params.get("allowWarnings", "false").lower() == "true"
    for line in report.preamble:
        if not (allow_warnings and line.upper().startswith("WARNING")):
            missing.append(f"DCGM printed before its results: {line[:200]}")
    if not report.tests and not report.errors:
        missing.append("no diagnostic results in the output")
    elif report.tests and not report.complete:
        missing.append("the result table has no closing border: the output was cut short")
    for test in report.tests:
        _judge(test, params, faults, missing)
    measurements: Measurements = {"form": report.form, "tests": len(report.tests)}
    for key, name in _METADATA.items():
        if key in report.metadata:
            measurements[name] = report.metadata[key][:64]
    for status in ("fail", "warn", "skip"):
        measurements[f"tests_{status}"] = sum(1 for t in report.tests if t.status == status)
    for test in report.tests:
        measurements.setdefault(f"test_{_slug(test.name)}", test.status)
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
    if shutil.which(TOOL) is None:  # first: a missing tool is the reason whatever the parameters
        return report(missing_tool(TOOL))
    problems = config_problems(params) + ([] if "level" in params else ["level is not set (1, 2, 3 or 4)"])
    if problems:
        reasons = tuple(f"configuration error: {p}" for p in problems)
        return report(Verdict(INCONCLUSIVE, (), reasons, {"outcome": INCONCLUSIVE}))
    argv = [TOOL, "diag", "-r", params["level"], "-j"]
    if params.get("hostEngine"):
        argv += ["--host", params["hostEngine"]]
    code, output = run_tool(argv)
    sys.stdout.write(output[-65536:] + "\n")
    # dcgmi exits non-zero when a test fails: the verdict comes from what it printed.
    return report(verify_text(output, params, exit_code=None if code is None else 0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
