"""``signal-adapter``: the container of every step of the ``signal-adapter`` WorkflowTemplate.
One invocation runs one check of one Run (see adapter/check.py) and writes the step's
output parameters (``verdict``, ``evidence-config-map``, ``evidence-digest``, ``proceed``)
as files under ``--output-dir``.

Exit status: 0 when the check ran to a verdict (Pass, Fail or Inconclusive: the verdict is
data, not a step failure); 2 when the adapter refused to act (missing, replaced, terminal
or cancelled Run, parameters that disagree with the Run, workloads of another check still
present); 1 on any other adapter error; 3 when SIGTERM interrupted the check (Argo's
Terminate, the suite deadline): its workloads were removed as after a finished check and its
evidence (Inconclusive where unfinished) persisted first; 4 when an admission policy the
adapter relies on is not in force in the Run's namespace (adapter/policy.py: checked with
server-side dry-runs before anything is created). A non-zero exit fails the step, so
no later check starts; ``proceed`` keeps its default ``false``. The step Pod's termination
grace period leaves time for that quiescence.
"""

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from adapter.check import Interrupted, Settings, clean_up, run_check
from adapter.inputs import Inputs, Refusal, parse_inputs
from adapter.placement import TRUSTED_SELECTOR_ENV, PlacementError, parse_trusted_selector
from adapter.policy import require_policies
from adapter.step import OUTPUT_DIR, RUNNER_IMAGE_ENV
from adapter.workloads import DEFAULT_RUNNER_IMAGE, DEFAULT_SSHD
from kubeio.admission import PolicyNotInForce
from kubeio.client import Kube
from kubeio.errors import ApiError
from kubeio.logs import add_log_level_flag, configure_logging
from shared.artifacts import STORE_ENV, STORE_MOUNT, STORE_SECRET, StoreConfig, StoreError, load_store
from shared.policies import EXIT_POLICY_NOT_IN_FORCE

log = structlog.get_logger("signal-adapter")
INTERRUPTED = 3


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="signal-adapter", description=__doc__.split("\n\n")[0])
    p.add_argument("--run-namespace", required=True)
    p.add_argument("--run-name", required=True)
    p.add_argument("--run-uid", required=True)
    p.add_argument("--participants-json", required=True)
    p.add_argument("--snapshot", required=True)
    p.add_argument("--check-index", help="the check to run (required unless --sweep-checks-json)")
    p.add_argument("--check-json", help="the check to run (required unless --sweep-checks-json)")
    p.add_argument(
        "--sweep-checks-json",
        help="exit handler: the Run's checks (JSON list); remove every check's leftover workloads, evidence first",
    )
    p.add_argument("--output-dir", type=Path, default=Path(OUTPUT_DIR))
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster configuration)")
    p.add_argument(
        "--runner-image",
        default=os.environ.get(RUNNER_IMAGE_ENV) or DEFAULT_RUNNER_IMAGE,
        help=f"image of the backend Pods (default: ${RUNNER_IMAGE_ENV}, set by the WorkflowTemplate)",
    )
    p.add_argument("--mpi-worker-sshd", default=DEFAULT_SSHD, help="sshd path in the runner image for MPI workers")
    p.add_argument(
        "--trusted-node-selector",
        default=os.environ.get(TRUSTED_SELECTOR_ENV, ""),
        help=(
            "key=value,... of the trusted Nodes where crossNode MPI launchers run, every key under "
            f"node-restriction.kubernetes.io/ (default: ${TRUSTED_SELECTOR_ENV}, set by the WorkflowTemplate)"
        ),
    )
    p.add_argument("--start-grace-seconds", type=float, default=60.0, help="wait beyond the check deadline")
    p.add_argument("--quiesce-seconds", type=float, default=60.0, help="bound on proving the workloads gone")
    p.add_argument(
        "--policy-wait-seconds",
        type=float,
        default=float(os.environ.get("SIGNAL_POLICY_WAIT_SECONDS", "30")),
        help="how long to wait for the admission policies to be in force before refusing to run",
    )
    p.add_argument("--log-format", choices=["json", "console"], default="json")
    add_log_level_flag(p)
    return p


def write_outputs(directory: Path, values: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (directory / name).write_text(value)


def _inputs(args: argparse.Namespace, check_index: str, check_json: str) -> Inputs:
    """The Run's arguments and one check's, parsed and checked (Refusal if not acceptable)."""
    return parse_inputs(
        run_namespace=args.run_namespace,
        run_name=args.run_name,
        run_uid=args.run_uid,
        participants_json=args.participants_json,
        snapshot=args.snapshot,
        check_index=check_index,
        check_json=check_json,
    )


async def sweep(args: argparse.Namespace, settings: Settings) -> int:
    """The exit handler: every check's leftover workloads removed, evidence first."""
    try:
        checks = json.loads(args.sweep_checks_json)
        if not isinstance(checks, list):
            raise TypeError("not a list")
    except (ValueError, TypeError) as exc:
        raise Refusal(f"Run {args.run_namespace}/{args.run_name}: --sweep-checks-json is malformed: {exc}") from exc
    kube = await Kube.connect(kubeconfig=args.kubeconfig, field_manager="signal-adapter")
    failed: list[str] = []
    try:
        for index, check in enumerate(checks):
            # Each check apart: the one whose clean-up fails must not keep the others' leftover
            # workloads (the interrupted check's, usually a later one) running.
            try:
                inputs = _inputs(args, str(index), json.dumps(check))
                report = await clean_up(kube, inputs, settings)
            except (Refusal, ApiError) as exc:
                log.error("sweep of one check failed; the others go on", index=index, error=str(exc)[:500])
                failed.append(f"check {index}: {exc}"[:300])
                continue
            if report.config_map:
                log.info("leftover workloads removed", check=inputs.check.name, evidence=report.config_map)
    finally:
        await kube.close()
    if failed:
        raise Refusal(
            f"Run {args.run_namespace}/{args.run_name}: the sweep could not clean up {len(failed)} check(s) "
            f"({'; '.join(failed)}); the controller resubmits the Workflow to try again"
        )
    return 0


def _artifact_store() -> StoreConfig | None:
    """The artifact store from ``$SIGNAL_ARTIFACT_STORE`` or the optional Secret's mount; None:
    not configured. A malformed configuration is refused (no check runs half-configured)."""
    try:
        return load_store(os.environ.get(STORE_ENV) or STORE_MOUNT)
    except StoreError as exc:
        raise Refusal(f"{exc}; fix the Secret {STORE_SECRET} or delete it") from exc


async def adapt(args: argparse.Namespace) -> int:
    try:
        trusted = parse_trusted_selector(args.trusted_node_selector)
    except PlacementError as exc:
        raise Refusal(f"--trusted-node-selector: {exc}") from exc
    settings = Settings(
        runner_image=args.runner_image,
        sshd=args.mpi_worker_sshd,
        start_grace_seconds=args.start_grace_seconds,
        quiesce_seconds=args.quiesce_seconds,
        trusted_nodes=trusted,
        artifact_store=_artifact_store(),
    )
    if args.sweep_checks_json is not None:
        return await sweep(args, settings)
    if args.check_index is None or args.check_json is None:
        raise Refusal("--check-index and --check-json are required (or --sweep-checks-json for the exit handler)")
    inputs = _inputs(args, args.check_index, args.check_json)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    kube = await Kube.connect(kubeconfig=args.kubeconfig, field_manager="signal-adapter")
    try:
        await require_policies(kube, inputs.run_namespace, wait_seconds=args.policy_wait_seconds)
        report = await run_check(kube, inputs, settings, stop)
    finally:
        log.info("api requests", **kube.requests)
        await kube.close()
    write_outputs(
        args.output_dir,
        {
            "verdict": report.verdict.value,
            "evidence-config-map": report.config_map,
            "evidence-digest": report.digest,
            "proceed": "true" if report.proceed else "false",
        },
    )
    log.info(
        "check finished",
        run=f"{inputs.run_namespace}/{inputs.run_name}",
        check=inputs.check.name,
        verdict=report.verdict.value,
        evidence=report.config_map,
        digest=report.digest,
        proceed=report.proceed,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    try:
        return asyncio.run(adapt(args))
    except Refusal as exc:
        log.error("refusing to act", reason=str(exc))
        return 2
    except PolicyNotInForce as exc:
        log.error("refusing to run: an admission policy is not in force", reason=str(exc))
        return EXIT_POLICY_NOT_IN_FORCE
    except Interrupted as exc:
        log.error("interrupted; the step fails and no later check starts", reason=str(exc))
        return INTERRUPTED
    except ApiError as exc:
        log.error("API request failed; the step fails and no later check starts", error=str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
