"""MPI roles of the runner: the launcher (runs ``mpirun`` over the MPIJob's hostfile, one
rank per host, and proves what each rank did), the rank wrapper (runs the operator script
as one rank and reports it on one tagged stdout line), and the worker (serves the launcher:
``sshd`` in a real cluster; on the local control plane the process kubelet provides the
transport, so the worker only waits to be deleted).

Rank report line, written by each rank on its stdout and forwarded by ``mpirun``:
``SIGNAL-RANK {"rank":0,"size":2,"host":"job-worker-0","exitCode":0}``. The launcher's
verdict: Pass only if mpirun exited 0 and every rank 0..n-1 of a world of exactly n hosts
reported exit 0; any rank reporting a non-zero exit is a proven Fail; anything else
(missing, duplicate or malformed rank lines, a wrong world size, mpirun failing on its own,
the deadline) is Inconclusive.
"""

import json
import os
import signal
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from shared.result import MAX_RANKS, LauncherReport, RankResult, short_host
from shared.run import Verdict

RANK_PREFIX: Final = "SIGNAL-RANK "
MAX_RANK_LINE: Final = 4096


def read_hostfile(text: str) -> list[str]:
    """Host names of an OpenMPI hostfile (first field of each non-comment line)."""
    hosts = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            hosts.append(line.split()[0])
    return hosts


def mpirun_argv(hostfile: Path, hosts: int, rank_command: list[str]) -> list[str]:
    """One rank per host of the hostfile, no binding (the check decides its own)."""
    return [
        "mpirun",
        "--hostfile",
        str(hostfile),
        "-np",
        str(hosts),
        "--map-by",
        "node",
        "--bind-to",
        "none",
        *rank_command,
    ]


def rank_line(rank: int, size: int, host: str, exit_code: int, measurements: object = None) -> str:
    """One rank's report; rank 0 also carries its script's measurements (the check's)."""
    fields: dict[str, object] = {"rank": rank, "size": size, "host": host, "exitCode": exit_code}
    if measurements is not None:
        fields["measurements"] = measurements
    return f"{RANK_PREFIX}{json.dumps(fields, sort_keys=True)}"


def rank_zero_measurements(lines: Iterable[str]) -> str | None:
    """The JSON text of rank 0's measurements as it reported them (validated later, like a
    Pod's measurements file), or None when it reported none."""
    for line in lines:
        if not line.startswith(RANK_PREFIX) or len(line) > MAX_RANK_LINE:
            continue
        try:
            body = json.loads(line[len(RANK_PREFIX) :])
        except ValueError:
            continue
        if isinstance(body, dict) and body.get("rank") == 0 and "measurements" in body:
            return json.dumps(body["measurements"])
    return None


def rank_identity(env: dict[str, str]) -> tuple[int, int, str]:
    """(rank, world size, host) of this process as OpenMPI started it."""
    rank = int(env["OMPI_COMM_WORLD_RANK"])
    size = int(env["OMPI_COMM_WORLD_SIZE"])
    host = env.get("HOSTNAME") or socket.gethostname()
    return rank, size, host


def evaluate_launcher(
    hosts: list[str], lines: Iterable[str], mpirun_exit: int | None, timed_out: bool
) -> tuple[Verdict, str, LauncherReport]:
    """The launcher's verdict from the hostfile, mpirun's output lines and its exit."""
    ranks: dict[int, RankResult] = {}
    problems: list[str] = []
    sizes: set[int] = set()
    for line in lines:
        if not line.startswith(RANK_PREFIX):
            continue
        if len(line) > MAX_RANK_LINE:
            problems.append("an oversized rank report")
            continue
        try:
            body = json.loads(line[len(RANK_PREFIX) :])
            rank, size, host, code = body["rank"], body["size"], body["host"], body["exitCode"]
            if not (type(rank) is int and type(size) is int and type(code) is int and isinstance(host, str)):
                raise TypeError("wrong types")
            if not 0 <= rank < MAX_RANKS:
                raise TypeError("rank out of range")
        except (ValueError, KeyError, TypeError):
            problems.append("a malformed rank report")
            continue
        if rank in ranks:
            problems.append(f"rank {rank} reported twice")
            continue
        sizes.add(size)
        ranks[rank] = RankResult(rank=rank, host=short_host(host)[:253], exit_code=code)
    world = next(iter(sizes)) if len(sizes) == 1 else 0
    report = LauncherReport.build(
        hosts[:MAX_RANKS], [ranks[r] for r in sorted(ranks)], world_size=world, mpirun_exit_code=mpirun_exit
    )
    failed = sorted(r.rank for r in ranks.values() if r.exit_code != 0)
    if failed:
        return Verdict.FAIL, f"Failed: rank(s) {', '.join(map(str, failed))} exited non-zero", report
    if timed_out:
        return Verdict.INCONCLUSIVE, "DeadlineExceeded: mpirun outlived the check's deadline", report
    if problems:
        return Verdict.INCONCLUSIVE, f"InvalidRankReport: {problems[0]}", report
    if len(sizes) > 1:
        return Verdict.INCONCLUSIVE, "InvalidRankReport: ranks disagree on the world size", report
    if world != len(hosts) or sorted(ranks) != list(range(len(hosts))):
        return (
            Verdict.INCONCLUSIVE,
            f"MissingRanks: {len(ranks)} of {len(hosts)} ranks reported (world size {world})",
            report,
        )
    rank_hosts = sorted(r.host.split(".", 1)[0] for r in ranks.values())
    if rank_hosts != sorted(h.split(".", 1)[0] for h in hosts):
        return Verdict.INCONCLUSIVE, "WrongHosts: the ranks did not run one per hostfile host", report
    if mpirun_exit != 0:
        return Verdict.INCONCLUSIVE, f"LauncherFailed: mpirun exited {mpirun_exit}", report
    return Verdict.PASS, "Succeeded: every rank exited 0", report


def sshd_or_wait(sshd: str | None) -> None:
    """The worker role: exec sshd when the image has it, otherwise wait to be deleted."""
    if sshd and Path(sshd).exists():
        os.execv(sshd, [sshd, "-De"])
    signal.pause()
