"""``signal-runner``: the entrypoint of backend Pods. It has no API access and needs none.

Roles:
* ``run``: run one operator script under a deadline and write a RunnerResult to the
  termination-message file. Identity comes from the environment the adapter sets
  (``SIGNAL_PARTICIPANT_INDEX``) and the downward API (``SIGNAL_NODE_NAME``,
  ``SIGNAL_POD_NAME``, ``SIGNAL_POD_UID``). Exit status 0 only for Pass.
* ``launcher``: MPI launcher; runs ``mpirun`` over the hostfile with the ``rank`` role and
  writes a RunnerResult with a LauncherReport.
* ``rank``: one MPI rank; runs the script and prints one ``SIGNAL-RANK`` line.
* ``worker``: MPI worker; serves the launcher (sshd, or waits for deletion).

The script sees a clean environment: PATH, HOME, LANG, ``SIGNAL_*`` identity variables,
``SIGNAL_MEASUREMENTS_FILE`` (see shared/result_wire.py for the protocol), GPU-runtime
variables, and for ranks OpenMPI's own variables.

Every role starts without pydantic (a check starts one runner per participant and per MPI
rank): the runner imports only the standard library and the stdlib-only modules of shared/
(tests/unit/test_runner_wire.py fails otherwise).
"""

from __future__ import annotations

import os
import sys
import time

from runner.argv import Option, Parser, Role
from runner.document import Identity, Result
from runner.execute import (
    ScriptError,
    StrPath,
    clean_environment,
    run_script,
    script_argv,
    script_digest,
)
from runner.report import build_result, error_result, fit, read_measurements
from shared.artifact_wire import OUTPUT_DIR_ENV, UPLOAD_ENV_PREFIX
from shared.limits import MAX_PARTICIPANTS
from shared.limits import PARAMETER_ENV_PREFIX as PARAMETER_PREFIX
from shared.result_wire import MAX_NAME_CHARS, MAX_REASON_CHARS, MAX_UID_CHARS, ResultError, is_unicode
from shared.verdict_names import INCONCLUSIVE, PASS

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import SimpleNamespace

LAUNCH = os.path.join(os.path.dirname(__file__), "launch.py")
"""The runner's entrypoint file (runner/launch.py), which MPI ranks are started with."""
IDENTITY_ENV = ("SIGNAL_NODE_NAME", "SIGNAL_POD_NAME", "SIGNAL_POD_UID")
SCRIPT_ENV_KEYS = ("SIGNAL_RUN_NAME", "SIGNAL_RUN_UID", "SIGNAL_CHECK", "SIGNAL_NAMESPACE", *IDENTITY_ENV)
WORKER_ENV_KEYS = (*SCRIPT_ENV_KEYS, "SIGNAL_SCRIPT")
"""What an MPI worker records for the ranks its sshd's sessions start (runner/sshd.py)."""


def _identity(role: str) -> Identity:
    missing = [k for k in IDENTITY_ENV if not os.environ.get(k)]
    index = os.environ.get("SIGNAL_PARTICIPANT_INDEX")
    if role == "pod" and not index:
        missing.append("SIGNAL_PARTICIPANT_INDEX")
    if missing:
        raise SystemExit(f"signal-runner: identity variables missing: {', '.join(missing)}; the Pod spec is wrong")
    # What a result may hold (the adapter refuses anything else): checked here, once.
    limits = dict(zip(IDENTITY_ENV, (MAX_NAME_CHARS, MAX_NAME_CHARS, MAX_UID_CHARS), strict=True))
    wrong = [k for k, limit in limits.items() if len(os.environ[k]) > limit or not is_unicode(os.environ[k])]
    participant = int(index) if role == "pod" and index else None
    if participant is not None and not 0 <= participant < MAX_PARTICIPANTS:
        wrong.append("SIGNAL_PARTICIPANT_INDEX")
    if wrong:
        raise SystemExit(f"signal-runner: identity variables out of bounds: {', '.join(wrong)}; the Pod spec is wrong")
    return Identity(
        participant_index=participant,
        node_name=os.environ["SIGNAL_NODE_NAME"],
        pod_name=os.environ["SIGNAL_POD_NAME"],
        pod_uid=os.environ["SIGNAL_POD_UID"],
        role="launcher" if role == "launcher" else "pod",
    )


def _write(result: Result, termination_log: StrPath) -> int:
    payload = fit(result)
    if payload is None:
        print("signal-runner: the result does not fit the termination message; writing none", file=sys.stderr)
        return 2
    with open(termination_log, "wb") as handle:
        handle.write(payload)
    print(f"signal-runner: verdict {result.verdict}: {result.reason}", file=sys.stderr)
    return 0 if result.verdict == PASS else 1


def _script_env(workdir: StrPath, extra: dict[str, str], *, mpi_rank: bool = False) -> dict[str, str]:
    home = os.path.join(workdir, "home")
    os.makedirs(home, exist_ok=True)
    signal_env = {k: os.environ[k] for k in SCRIPT_ENV_KEYS if k in os.environ}
    signal_env.update(extra)
    return clean_environment(os.environ, signal_env, home=home, mpi=mpi_rank)


def cmd_run(args: SimpleNamespace) -> int:
    identity = _identity("pod")
    workdir: str = args.workdir
    os.makedirs(workdir, exist_ok=True)
    measurements, stdout, stderr = (os.path.join(workdir, name) for name in ("measurements.json", "stdout", "stderr"))
    try:  # noqa: SIM105 - contextlib (with collections and functools) is not loaded at start
        os.unlink(measurements)
    except FileNotFoundError:
        pass
    extra = {
        "SIGNAL_PARTICIPANT_INDEX": str(identity.participant_index),
        "SIGNAL_MEASUREMENTS_FILE": measurements,
        "SIGNAL_WORKDIR": workdir,
    }
    store = any(k.startswith(UPLOAD_ENV_PREFIX) for k in os.environ)
    output_dir = os.path.join(workdir, "out")
    if store:  # a store is configured: the script may leave files to keep
        os.makedirs(output_dir, exist_ok=True)
        extra[OUTPUT_DIR_ENV] = output_dir
    env = _script_env(workdir, extra)
    started = time.time()
    try:
        digest = script_digest(args.script)
        argv = script_argv(args.script)
        outcome = run_script(argv, env, workdir, stdout, stderr, float(args.deadline_seconds))
    except ScriptError as exc:
        return _write(error_result(identity, str(exc), started, time.time()), args.termination_log)
    try:
        result = build_result(identity, outcome, measurements_file=measurements, stdout_file=stdout, stderr_file=stderr)
        result = result._replace(script_digest=digest)
    except Exception as exc:  # a result is written whatever happened (it also replaces the script's own)
        result = error_result(identity, f"cannot build the result: {type(exc).__name__}: {exc}", started, time.time())
    if store:
        result = _store_artifacts(result, stdout, stderr, output_dir)
    return _write(result, args.termination_log)


def _store_artifacts(result: Result, stdout: str, stderr: str, output_dir: str) -> Result:
    """``result`` with the artifacts it stored, or Inconclusive saying why they could not be:
    a verdict whose full logs the evidence promises but the store lacks proves nothing."""
    from runner import artifacts  # noqa: PLC0415 - only with a store: a check without one starts without it

    try:
        stored = artifacts.upload(artifacts.upload_urls(os.environ), stdout, stderr, output_dir)
    except artifacts.UploadError as exc:
        return result._replace(verdict=INCONCLUSIVE, reason=f"ArtifactUploadFailed: {exc}"[:MAX_REASON_CHARS])
    streams = {a.name: a.digest for a in stored}
    if (result.stdout and streams.get("stdout") != result.stdout.digest) or (
        result.stderr and streams.get("stderr") != result.stderr.digest
    ):
        reason = "ArtifactUploadFailed: the output changed between its summary and its upload"
        return result._replace(verdict=INCONCLUSIVE, reason=reason, artifacts=stored)
    return result._replace(artifacts=stored)


def cmd_launcher(args: SimpleNamespace) -> int:
    from pathlib import Path  # noqa: PLC0415 - the launcher's alone: a Pod check's runner starts without it

    from runner import mpi  # noqa: PLC0415 - the MPI roles' alone: a Pod check's runner starts without it

    identity = _identity("launcher")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        hosts = mpi.read_hostfile(Path(args.hostfile).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        return _write(
            error_result(identity, f"cannot read hostfile {args.hostfile}: {exc}", started, time.time()),
            args.termination_log,
        )
    if not hosts:
        return _write(
            error_result(identity, f"hostfile {args.hostfile} names no host", started, time.time()),
            args.termination_log,
        )
    try:
        digest = script_digest(args.script)
    except ScriptError as exc:
        return _write(error_result(identity, str(exc), started, time.time()), args.termination_log)
    deadline = float(args.deadline_seconds)
    if args.worker_port:
        # Within the check's deadline: the workers may start after the launcher (mpi.wait_for_workers).
        waiting = mpi.wait_for_workers(hosts, args.worker_port, deadline)
        if waiting:
            reason = (
                f"WorkersUnreachable: no connection to the sshd (port {args.worker_port}) of "
                f"{', '.join(waiting[:8])} within the check's deadline of {deadline:g}s; see the MPIJob's workers"
            )
            return _write(error_result(identity, reason, started, time.time()), args.termination_log)
        deadline = max(1.0, deadline - (time.time() - started))
    # Each rank starts as this runner did (runner/launch.py: isolated, without site), from the
    # same file of the same image: ``-m runner.main`` would need site's path to find the package.
    rank_command = [
        sys.executable,
        "-I",
        "-S",
        str(LAUNCH),
        "rank",
        "--script",
        str(args.script),
        "--deadline-seconds",
        str(args.deadline_seconds),
    ]
    # mpirun is the runner's own tool, not the operator's script: it gets the container's
    # environment (ssh or its stand-in may need it); each rank cleans it for the script.
    # It also carries this check's rank-report key, which mpirun forwards to the rank wrappers
    # only (runner/mpi.py): no script ever sees it.
    key = mpi.new_report_key()
    env = {**os.environ, "SIGNAL_WORKDIR": str(workdir), mpi.REPORT_KEY_ENV: key}
    outcome = run_script(
        mpi.mpirun_argv(Path(args.hostfile), len(hosts), rank_command, args.slots),
        env,
        workdir,
        workdir / "stdout",
        workdir / "stderr",
        deadline,
    )
    # Only reports signed with this check's key, each on its own rank's tagged stream, read
    # as a bounded stream (never the whole output at once).
    reports = mpi.stream_reports(workdir / "stdout", key)
    verdict, reason, report = mpi.evaluate_launcher(
        hosts, reports, outcome.exit_code, outcome.timed_out, args.slots, script_digest=digest
    )
    # Rank 0's measurements are the check's; an invalid report makes the result Inconclusive.
    rank_zero = mpi.rank_zero_measurements(reports)
    (workdir / "measurements.json").unlink(missing_ok=True)
    if rank_zero is not None:
        (workdir / "measurements.json").write_text(rank_zero)
    try:
        result = build_result(
            identity,
            outcome,
            measurements_file=workdir / "measurements.json",
            stdout_file=workdir / "stdout",
            stderr_file=workdir / "stderr",
            launcher=report,
            verdict=(verdict, reason),
        )._replace(script_digest=digest)
    except Exception as exc:  # a result is written whatever happened
        result = error_result(identity, f"cannot build the result: {type(exc).__name__}: {exc}", started, time.time())
    return _write(result, args.termination_log)


def cmd_rank(args: SimpleNamespace) -> int:
    from pathlib import Path  # noqa: PLC0415 - the rank role's alone: a Pod check's runner starts without it

    from runner import mpi  # noqa: PLC0415 - the MPI roles' alone: a Pod check's runner starts without it
    from runner import sshd as sshd_role  # noqa: PLC0415 - the rank role's alone

    # First: take the report key out of reach of the script (environment and /proc).
    key = mpi.take_report_key(os.environ)
    mpi.make_undumpable()
    # Started by an ssh session (no container environment): the worker's recorded variables
    # (its node, its Pod, the Run and check) stand in for what the session lacks.
    missing = [k for k in WORKER_ENV_KEYS if not os.environ.get(k)]
    if missing:
        os.environ.update(sshd_role.recorded_environment(missing))
        # The check's parameters, as the worker's container had them (runner/execute.py).
        os.environ.update(sshd_role.recorded_with_prefix(PARAMETER_PREFIX))
    rank, size, host = mpi.rank_identity(dict(os.environ))
    if not key:
        print(
            f"signal-runner rank: {mpi.REPORT_KEY_ENV} is missing; start ranks with the launcher role", file=sys.stderr
        )
        return 2
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"signal-rank-{rank}-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    measurements = workdir / "measurements.json"
    env = _script_env(
        workdir,
        {
            "SIGNAL_RANK": str(rank),
            "SIGNAL_WORLD_SIZE": str(size),
            "SIGNAL_WORKDIR": str(workdir),
            "SIGNAL_MEASUREMENTS_FILE": str(measurements),
        },
        mpi_rank=True,
    )
    # The worker's environment names the script where its Pod mounts it; without it (no
    # record either) the launcher's path (the same mount).
    script = os.environ.get("SIGNAL_SCRIPT") or args.script
    digest: str | None = None
    try:
        digest = script_digest(script)
        outcome = run_script(script_argv(script), env, workdir, None, None, float(args.deadline_seconds))
        code = outcome.exit_code if outcome.exit_code is not None else 128 + (outcome.signal or 0)
    except ScriptError as exc:
        print(f"signal-runner rank {rank}: {exc}", file=sys.stderr)
        code = 127
    reported: object = None
    if rank == 0 and measurements.exists():
        try:
            reported = read_measurements(measurements)
        except ResultError as exc:
            reported = f"invalid: {exc}"
    sys.stdout.flush()
    # A fresh line first: a fragment the script left without a newline cannot swallow the
    # report; one write, so that mpirun forwards it in as few chunks as it can.
    os.write(
        sys.stdout.fileno(),
        ("\n" + mpi.rank_line(rank, size, host, code, reported, key=key, script=digest) + "\n").encode(),
    )
    return code


def cmd_worker(args: SimpleNamespace) -> int:
    from runner import mpi  # noqa: PLC0415 - the MPI roles' alone: a Pod check's runner starts without it

    recorded = {k: os.environ[k] for k in WORKER_ENV_KEYS if os.environ.get(k)}
    recorded.update({k: v for k, v in os.environ.items() if k.startswith(PARAMETER_PREFIX)})
    mpi.sshd_or_wait(args.sshd, recorded)
    return 0


def cmd_inject(args: SimpleNamespace) -> int:
    from runner.inject import cmd_inject as inject  # noqa: PLC0415 - the init container's role alone

    return inject(args.to)


def parser() -> Parser:
    script = Option("--script", str, required=True, help="the operator script (read-only mount)")
    deadline = Option("--deadline-seconds", float, required=True)
    pod = (
        script,
        deadline,
        Option("--workdir", str, default="/signal/work", help="writable scratch directory"),
        Option("--termination-log", str, default="/dev/termination-log"),
    )
    launcher = (
        *pod,
        Option("--hostfile", str, default="/etc/mpi/hostfile"),
        Option("--slots", int, default=1, choices=range(1, 9), help="ranks per host"),
        Option("--worker-port", int, default=0, help="wait for every host's sshd on this port first (0: do not)"),
    )
    sshd = Option("--sshd", str, help="sshd binary to exec, when the image has one")
    roles = {
        "run": Role(pod, cmd_run),
        "launcher": Role(launcher, cmd_launcher),
        "rank": Role((script, deadline), cmd_rank),
        "worker": Role((sshd,), cmd_worker),
        "inject": Role((Option("--to", str, required=True, help="directory to copy the runner into"),), cmd_inject),
    }
    return Parser("signal-runner", __doc__.split("\n\n")[0], roles)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "script", None) is not None:
        # Joined to the working directory, not normalised (as ``Path.absolute``): a ``..``
        # after a symbolic link stays the kernel's to resolve.
        args.script = os.path.join(os.getcwd(), args.script)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
