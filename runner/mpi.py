"""MPI roles of the runner: the launcher (runs ``mpirun`` over the MPIJob's hostfile,
``--slots`` ranks per host, and proves what each rank did), the rank wrapper (runs the operator script
as one rank and reports it on one authenticated stdout line), and the worker (serves the
launcher: ``sshd`` in a real cluster; on the local control plane the process kubelet provides
the transport, so the worker only waits to be deleted).

Rank reports travel on the ranks' stdout, which the operator's script shares, so each report
is bound to its rank and to this check (issue 12, item 7):

* ``mpirun --tag-output`` prefixes every line with ``[<job>,<rank>]<stdout>:`` for the rank
  whose stream carried it; a report counts only at the start of such a line and only for
  that same rank, so one rank's script cannot speak for another rank;
* the launcher draws a fresh key per check and hands it to the rank wrappers in the
  environment of ``mpirun`` (``-x SIGNAL_RANK_REPORT_KEY``); each wrapper removes it from its
  environment and makes itself non-dumpable before the script starts (so the script can read
  neither its environment nor its memory through ``/proc``), and signs its report with
  HMAC-SHA256 over the report's JSON. A line the script prints, even one that looks like a
  report, is ordinary output;
* the wrapper starts its report on a fresh line, so a fragment the script left without a
  newline cannot swallow it.

Report line (after the tag): ``SIGNAL-RANK <hmac hex> {"exitCode":0,"host":"w-0","rank":0,"size":2}``.
The launcher reads mpirun's output as a stream, line by line, each line bounded, keeping only
authenticated reports (at most ``MAX_REPORTS``), so a script that prints gigabytes or floods
fake reports costs it neither memory nor the real reports.

The launcher's verdict: Pass only if mpirun exited 0 and every rank 0..n-1 of a world of
exactly n = hosts x slots ranks reported exit 0; any rank reporting a non-zero exit is a proven Fail; anything
else (missing or duplicate reports, a report on another rank's stream, a wrong world size,
mpirun failing on its own, the deadline) is Inconclusive.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from runner import sshd as sshd_role
from runner.document import Launcher
from shared.limits import MAX_RANKS
from shared.result_wire import INCONCLUSIVE_EXIT_CODE, MAX_NAME_CHARS, RankResult, short_host
from shared.verdict import Verdict

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from typing import Any, Final, NamedTuple
else:
    from shared.lighttuple import NamedTuple

RANK_PREFIX: Final = "SIGNAL-RANK "
MAX_RANK_LINE: Final = 4096
REPORT_KEY_ENV: Final = "SIGNAL_RANK_REPORT_KEY"
"""The per-check report key: in mpirun's environment, forwarded to the rank wrappers only."""
MAX_REPORTS: Final = 2 * MAX_RANKS
"""Authenticated reports kept from one mpirun (a correct world has one per rank)."""
TAG: Final = re.compile(r"\[(\d+),(\d+)\]<stdout>: ?")
"""What ``mpirun --tag-output`` puts before every line of a rank's stdout."""
_MAC_HEX: Final = 64
_PR_SET_DUMPABLE: Final = 4


class RankReport(NamedTuple):
    """One authenticated report and the rank whose stdout carried it."""

    stream_rank: int
    body: Any


def read_hostfile(text: str) -> list[str]:
    """Host names of an OpenMPI hostfile (first field of each non-comment line)."""
    hosts = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            hosts.append(line.split()[0])
    return hosts


def new_report_key() -> str:
    import secrets  # noqa: PLC0415 - the launcher's alone; every rank and Pod starts without it

    return secrets.token_hex(32)


def mpirun_argv(hostfile: Path, hosts: int, rank_command: list[str], slots: int = 1) -> list[str]:
    """``slots`` ranks per host of the hostfile (consecutive ranks on one host), no binding
    (the check decides its own); every line tagged with its rank; the report key forwarded
    to the ranks."""
    return [
        "mpirun",
        "--hostfile",
        str(hostfile),
        "-np",
        str(hosts * slots),
        "--map-by",
        "node" if slots == 1 else f"ppr:{slots}:node",
        "--bind-to",
        "none",
        "--tag-output",
        "-x",
        REPORT_KEY_ENV,
        *rank_command,
    ]


def _mac(key: str, body: str) -> str:
    return hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()


def rank_line(
    rank: int,
    size: int,
    host: str,
    exit_code: int,
    measurements: object = None,
    *,
    key: str,
    script: str | None = None,
) -> str:
    """One rank's report, signed with the check's key; rank 0 also carries its script's
    measurements (the check's); ``script``: the sha256 of the script the rank executed."""
    fields: dict[str, object] = {"rank": rank, "size": size, "host": host, "exitCode": exit_code}
    if measurements is not None:
        fields["measurements"] = measurements
    if script is not None:
        fields["script"] = script
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return f"{RANK_PREFIX}{_mac(key, body)} {body}"


def take_report_key(env: dict[str, str] | Any) -> str:
    """The rank wrapper's first act: remove the key from its environment (the script gets a
    clean one anyway); then ``make_undumpable``."""
    return str(env.pop(REPORT_KEY_ENV, "") or "")


def make_undumpable() -> None:
    """Make this process non-dumpable, so that a script running as the same user can read
    neither ``/proc/<wrapper>/environ`` (which keeps the environment the process started with)
    nor its memory."""
    import ctypes  # noqa: PLC0415 - the rank role's alone; every other role starts without it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing more to protect here
        pass


def own_text(line: str) -> tuple[int, str] | None:
    """The rank that starts a tagged line and its text on that line: mpirun tags each chunk
    it forwards, so a rank's line may hold more tags of its own (dropped) or, after a chunk of
    another rank, that rank's text (cut off)."""
    first = TAG.match(line)
    if first is None:
        return None
    stream = first.group(1, 2)
    parts, position = [], first.end()
    for tag in TAG.finditer(line, position):
        parts.append(line[position : tag.start()])
        position = tag.end()
        if tag.group(1, 2) != stream:
            break
    else:
        parts.append(line[position:])
    return int(stream[1]), "".join(parts)


def authenticate(line: str, key: str) -> RankReport | None:
    """The report a tagged line carries, if the wrapper of that rank signed it; None for
    anything else (ordinary output, a report the script printed, a bad signature)."""
    own = own_text(line) if key else None
    if own is None or not own[1].startswith(RANK_PREFIX):
        return None
    mac, _, body = own[1][len(RANK_PREFIX) :].partition(" ")
    if len(mac) != _MAC_HEX or not hmac.compare_digest(mac, _mac(key, body)):
        return None
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        parsed = None
    return RankReport(stream_rank=own[0], body=parsed)


def stream_reports(path: Path, key: str, *, limit: int = MAX_REPORTS) -> list[RankReport]:
    """The authenticated reports in mpirun's captured stdout, read as a stream: lines longer
    than ``MAX_RANK_LINE`` are skipped without being held, and at most ``limit`` reports kept."""
    return list(_bounded(_lines(path), key, limit))


def reports_in(lines: Iterable[str], key: str, *, limit: int = MAX_REPORTS) -> list[RankReport]:
    """``stream_reports`` over lines already in memory."""
    return list(_bounded((ln for ln in lines if len(ln) <= MAX_RANK_LINE), key, limit))


def _bounded(lines: Iterable[str], key: str, limit: int) -> Iterator[RankReport]:
    kept = 0
    for line in lines:
        report = authenticate(line, key)
        if report is None:
            continue
        yield report
        kept += 1
        if kept >= limit:
            return


def _lines(path: Path) -> Iterator[str]:
    """Lines of ``path`` of at most ``MAX_RANK_LINE`` bytes, read in blocks."""
    if not path.exists():
        return
    with path.open("rb") as handle:
        pending = b""
        oversized = False
        for block in iter(lambda: handle.read(1 << 16), b""):
            pending += block
            while True:
                cut = pending.find(b"\n")
                if cut < 0:
                    break
                line, pending = pending[:cut], pending[cut + 1 :]
                if not oversized and len(line) <= MAX_RANK_LINE:
                    yield line.decode("utf-8", errors="replace")
                oversized = False
            if len(pending) > MAX_RANK_LINE:
                pending, oversized = b"", True
        if pending and not oversized and len(pending) <= MAX_RANK_LINE:
            yield pending.decode("utf-8", errors="replace")


def rank_zero_measurements(reports: Iterable[RankReport]) -> str | None:
    """The JSON text of rank 0's measurements as it reported them (validated later, like a
    Pod's measurements file), or None when it reported none."""
    for report in reports:
        body = report.body
        if report.stream_rank == 0 and isinstance(body, dict) and body.get("rank") == 0 and "measurements" in body:
            return json.dumps(body["measurements"])
    return None


def rank_identity(env: dict[str, str]) -> tuple[int, int, str]:
    """(rank, world size, host) of this process as OpenMPI started it."""
    rank = int(env["OMPI_COMM_WORLD_RANK"])
    size = int(env["OMPI_COMM_WORLD_SIZE"])
    host = env.get("HOSTNAME") or os.uname().nodename  # gethostname(), without importing socket
    return rank, size, host


def evaluate_launcher(
    hosts: list[str],
    reports: Iterable[RankReport],
    mpirun_exit: int | None,
    timed_out: bool,
    slots: int = 1,
    *,
    script_digest: str | None = None,
) -> tuple[Verdict, str, Launcher]:
    """The launcher's verdict from the hostfile, the authenticated rank reports and mpirun's
    exit. With ``script_digest`` (the sha256 of the launcher's own mount of the script), a
    rank that does not report having executed exactly those bytes counts for nothing."""
    ranks: dict[int, RankResult] = {}
    problems: list[str] = []
    sizes: set[int] = set()
    for item in reports:
        try:
            body = item.body
            if not isinstance(body, dict):
                raise TypeError("not an object")
            rank, size, host, code = body["rank"], body["size"], body["host"], body["exitCode"]
            if not (type(rank) is int and type(size) is int and type(code) is int and isinstance(host, str)):
                raise TypeError("wrong types")
            if not (0 <= rank < MAX_RANKS and 0 <= size <= MAX_RANKS):
                raise TypeError("rank or world size out of range")
        except (KeyError, TypeError):
            problems.append("a malformed rank report")
            continue
        if script_digest is not None and body.get("script") != script_digest:
            problems.append(f"rank {rank} executed another script than the snapshot's")
            continue
        if rank != item.stream_rank:
            problems.append(f"a report for rank {rank} on the output of rank {item.stream_rank}")
            continue
        if rank in ranks:
            problems.append(f"rank {rank} reported twice")
            continue
        sizes.add(size)
        ranks[rank] = RankResult(rank=rank, host=short_host(host)[:MAX_NAME_CHARS], exit_code=code)
    world = next(iter(sizes)) if len(sizes) == 1 else 0
    # The report's bounds: at most MAX_RANKS hosts, each name cut like the ranks' host names.
    report = Launcher.build(
        [short_host(h)[:MAX_NAME_CHARS] for h in hosts[:MAX_RANKS]],
        [ranks[r] for r in sorted(ranks)],
        world_size=world,
        mpirun_exit_code=mpirun_exit,
    )
    failed = sorted(r.rank for r in ranks.values() if r.exit_code not in (0, INCONCLUSIVE_EXIT_CODE))
    insufficient = sorted(r.rank for r in ranks.values() if r.exit_code == INCONCLUSIVE_EXIT_CODE)
    if failed:
        return Verdict.FAIL, f"Failed: rank(s) {', '.join(map(str, failed))} exited non-zero", report
    if timed_out:
        return Verdict.INCONCLUSIVE, "DeadlineExceeded: mpirun outlived the check's deadline", report
    if problems:
        return Verdict.INCONCLUSIVE, f"InvalidRankReport: {problems[0]}", report
    if len(sizes) > 1:
        return Verdict.INCONCLUSIVE, "InvalidRankReport: ranks disagree on the world size", report
    expected = len(hosts) * slots
    if world != expected or sorted(ranks) != list(range(expected)):
        return (
            Verdict.INCONCLUSIVE,
            f"MissingRanks: {len(ranks)} of {expected} ranks reported (world size {world})",
            report,
        )
    rank_hosts = sorted(r.host.split(".", 1)[0] for r in ranks.values())
    if rank_hosts != sorted(h.split(".", 1)[0] for h in hosts for _ in range(slots)):
        return Verdict.INCONCLUSIVE, f"WrongHosts: the ranks did not run {slots} per hostfile host", report
    if insufficient:
        listed = ", ".join(map(str, insufficient[:8]))
        reason = f"ScriptInconclusive: rank(s) {listed} exited {INCONCLUSIVE_EXIT_CODE} (evidence insufficient)"
        return Verdict.INCONCLUSIVE, reason, report
    if mpirun_exit != 0:
        return Verdict.INCONCLUSIVE, f"LauncherFailed: mpirun exited {mpirun_exit}", report
    return Verdict.PASS, "Succeeded: every rank exited 0", report


def sshd_or_wait(sshd: str | None, environment: Mapping[str, str]) -> None:
    """The worker role: become the image's sshd (runner/sshd.py: our configuration, a host key
    made at start, ``environment`` recorded for its sessions' ranks) when the image has it,
    otherwise wait to be deleted."""
    if sshd and Path(sshd).exists():
        sshd_role.exec_sshd(sshd, environment)
    signal.pause()


def wait_for_workers(
    hosts: Iterable[str],
    port: int,
    timeout: float,
    *,
    reachable: Callable[[str, int], bool] | None = None,
    clock: Callable[[], float] | None = None,
    pause: Callable[[float], None] | None = None,
) -> list[str]:
    """Wait until every host resolves and accepts a TCP connection on ``port`` (its sshd), at
    most ``timeout`` seconds; the hosts still unreachable then, in order (empty: all were).

    The MPI operator starts the launcher only once the workers are Ready
    (``launcherCreationPolicy: WaitForWorkersReady``), but not for an MPIJob that was created
    suspended, as Kueue creates every queued one: the operator then makes the launcher Job at once
    (suspended, as no worker exists yet) and unsuspends it in the very sync that creates the
    workers (kubeflow/mpi-operator issue 615, v0.8.0), so mpirun would race their DNS names and
    sshd (``ORTE was unable to reliably start one or more daemons``). A Ready worker need not have
    its sshd listening yet either."""
    import socket  # noqa: PLC0415 - the launcher's alone
    import time  # noqa: PLC0415

    def connects(host: str, port: int) -> bool:
        try:
            with socket.create_connection((host, port), timeout=2.0):
                return True
        except OSError:
            return False

    reachable = reachable or connects
    clock = clock or time.monotonic
    pause = pause or time.sleep
    deadline = clock() + timeout
    waiting = list(dict.fromkeys(hosts))
    while True:
        waiting = [h for h in waiting if not reachable(h, port)]
        if not waiting or clock() >= deadline:
            return waiting
        pause(min(0.5, max(0.0, deadline - clock())))
