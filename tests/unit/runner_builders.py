"""The runner's plain result (runner/document.py) and the pydantic models of the same values
(shared/result.py), each built from the other field by field, never through the runner's
bytes: the runner tests compare the runner's output with the models', and build the runner's
results from the shared builders (tests/unit/signal_builders.py)."""

from runner.document import Identity, Launcher, Result, Stream
from shared.result import LauncherReport, Output, RunnerIdentity, RunnerResult


def launcher_model(launcher: Launcher) -> LauncherReport:
    return LauncherReport(
        world_size=launcher.world_size,
        host_prefix=launcher.host_prefix,
        host_suffixes=list(launcher.host_suffixes),
        rank_table=list(launcher.rank_table),
        mpirun_exit_code=launcher.mpirun_exit_code,
    )


def _output(stream: Stream | None) -> Output | None:
    return None if stream is None else Output(digest=stream.digest, bytes=stream.bytes, tail=stream.tail)


def model(result: Result) -> RunnerResult:
    """The RunnerResult of ``result``'s values (validated by the model as it is built)."""
    who = result.identity
    return RunnerResult(
        verdict=result.verdict,
        reason=result.reason,
        identity=RunnerIdentity(
            participant_index=who.participant_index,
            node_name=who.node_name,
            pod_name=who.pod_name,
            pod_uid=who.pod_uid,
            role=who.role,
        ),
        exit_code=result.exit_code,
        signal=result.signal,
        measurements=result.measurements,
        stdout=_output(result.stdout),
        stderr=_output(result.stderr),
        started_at=result.started_at,
        finished_at=result.finished_at,
        launcher=None if result.launcher is None else launcher_model(result.launcher),
        script_digest=result.script_digest,
    )


def _stream(output: Output | None) -> Stream | None:
    return None if output is None else Stream(digest=output.digest, bytes=output.bytes, tail=output.tail)


def plain(result: RunnerResult) -> Result:
    """The runner's Result of a RunnerResult's values."""
    who, report = result.identity, result.launcher
    return Result(
        verdict=result.verdict,
        reason=result.reason,
        identity=Identity(
            participant_index=who.participant_index,
            node_name=who.node_name,
            pod_name=who.pod_name,
            pod_uid=who.pod_uid,
            role=who.role,
        ),
        started_at=result.started_at,
        finished_at=result.finished_at,
        measurements=dict(result.measurements),
        exit_code=result.exit_code,
        signal=result.signal,
        stdout=_stream(result.stdout),
        stderr=_stream(result.stderr),
        launcher=None
        if report is None
        else Launcher(
            world_size=report.world_size,
            host_prefix=report.host_prefix,
            host_suffixes=tuple(report.host_suffixes),
            rank_table=tuple(report.rank_table),
            mpirun_exit_code=report.mpirun_exit_code,
        ),
        script_digest=result.script_digest,
    )
