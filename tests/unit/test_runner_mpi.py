"""The MPI launcher's proof (runner/mpi.py): the hostfile, mpirun's command line, the rank
report line (tagged by mpirun with its rank, signed with the check's key), and the launcher
verdict: Pass only when mpirun exited 0 and every rank of a world of exactly one rank per
hostfile host reported exit 0; a rank's non-zero exit is Fail; anything else is Inconclusive.
Lines that are not a signed report on their own rank's stream are ordinary output."""

import hashlib
import hmac
import json
from pathlib import Path

import pytest

from runner import main as runner_main
from runner.document import Launcher, wire
from runner.mpi import (
    MAX_RANK_LINE,
    MAX_REPORTS,
    RANK_PREFIX,
    REPORT_KEY_ENV,
    RankReport,
    authenticate,
    mpirun_argv,
    rank_identity,
    rank_line,
    read_hostfile,
    reports_in,
    stream_reports,
    take_report_key,
)
from runner.mpi import evaluate_launcher as evaluate_reports
from runner.mpi import rank_zero_measurements as rank_zero_of
from shared.result import MAX_RANKS, LauncherReport, parse_result
from shared.run import Verdict

HOSTS = ["job-worker-0.job.ns.svc", "job-worker-1.job.ns.svc", "job-worker-2.job.ns.svc"]
KEY = "k" * 64


def tag(rank: int) -> str:
    return f"[1,{rank}]<stdout>:"


def signed(text: str, rank: int = 0, key: str = KEY) -> str:
    """A tagged line carrying ``text`` as a report signed with ``key``."""
    mac = hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()
    return f"{tag(rank)}{RANK_PREFIX}{mac} {text}"


def line(rank: int, size: int = 3, host: str | None = None, code: int = 0) -> str:
    return tag(rank) + rank_line(rank, size, host if host is not None else f"job-worker-{rank}", code, key=KEY)


def good(size: int = 3) -> list[str]:
    return [line(r, size) for r in range(size)]


def raw(body: object) -> str:
    rank = body.get("rank") if isinstance(body, dict) else 0
    return signed(json.dumps(body), rank if type(rank) is int and rank >= 0 else 0)


def evaluate_launcher(
    hosts: list[str], lines: list[str], mpirun_exit: int | None, timed_out: bool
) -> tuple[Verdict, str, Launcher]:
    return evaluate_reports(hosts, reports_in(lines, KEY), mpirun_exit, timed_out)


def rank_zero_measurements(lines: list[str]) -> str | None:
    return rank_zero_of(reports_in(lines, KEY))


# ---------------------------------------------------------------- hostfile and argv


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("", []),
        ("\n\n", []),
        ("# only a comment\n", []),
        ("a slots=1\nb slots=1\n", ["a", "b"]),
        ("a\nb", ["a", "b"]),
        ("  a   slots=4 max_slots=4  \n", ["a"]),
        ("a # trailing comment\n#b slots=1\n  # indented comment\nc\n", ["a", "c"]),
        ("a\tslots=1\r\nb slots=2\r\n", ["a", "b"]),
        ("w-0.job.ns.svc slots=1\nw-1.job.ns.svc slots=1\n", ["w-0.job.ns.svc", "w-1.job.ns.svc"]),
        ("a\na\n", ["a", "a"]),
    ],
    ids=["empty", "blank", "comment", "slots", "no-newline", "spaces", "comments", "tabs-crlf", "fqdn", "repeat"],
)
def test_read_hostfile(text: str, hosts: list[str]) -> None:
    assert read_hostfile(text) == hosts


def test_mpirun_argv_one_rank_per_host() -> None:
    argv = mpirun_argv(Path("/etc/mpi/hostfile"), 3, ["python", "-m", "runner.main", "rank"])
    assert argv == [
        "mpirun",
        "--hostfile",
        "/etc/mpi/hostfile",
        "-np",
        "3",
        "--map-by",
        "node",
        "--bind-to",
        "none",
        "--tag-output",
        "-x",
        REPORT_KEY_ENV,
        "python",
        "-m",
        "runner.main",
        "rank",
    ]


def test_rank_line_is_prefixed_signed_sorted_json() -> None:
    text = rank_line(2, 4, "h-2", 7, key=KEY)
    body = '{"exitCode":7,"host":"h-2","rank":2,"size":4}'
    assert text == f"{RANK_PREFIX}{hmac.new(KEY.encode(), body.encode(), hashlib.sha256).hexdigest()} {body}"
    assert authenticate(tag(2) + text, KEY) == RankReport(2, json.loads(body))


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "HOSTNAME": "w-1"}, (1, 2, "w-1")),
        ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "HOSTNAME": "x"}, (0, 1, "x")),
    ],
)
def test_rank_identity(env: dict[str, str], expected: tuple[int, int, str]) -> None:
    assert rank_identity(env) == expected


def test_rank_identity_requires_openmpi_variables() -> None:
    with pytest.raises(KeyError):
        rank_identity({"HOSTNAME": "x"})


# ---------------------------------------------------------------- evaluate_launcher


def test_all_ranks_pass() -> None:
    verdict, reason, report = evaluate_launcher(HOSTS, good(), 0, False)
    assert verdict == Verdict.PASS
    assert reason == "Succeeded: every rank exited 0"
    assert isinstance(report, Launcher)
    assert LauncherReport.model_validate(wire(report)).ranks == report.ranks  # what the adapter reads
    assert report.world_size == 3
    assert report.hosts == [h.split(".", 1)[0] for h in HOSTS]
    assert [(r.rank, r.host, r.exit_code) for r in report.ranks] == [
        (0, "job-worker-0", 0),
        (1, "job-worker-1", 0),
        (2, "job-worker-2", 0),
    ]
    assert report.mpirun_exit_code == 0


def test_ranks_in_any_order_among_other_output() -> None:
    lines = ["starting", line(2), "noise SIGNAL-RANK {}", line(0), "", line(1), "done"]
    verdict, _, report = evaluate_launcher(HOSTS, lines, 0, False)
    assert verdict == Verdict.PASS
    assert [r.rank for r in report.ranks] == [0, 1, 2]


def test_single_host_world() -> None:
    verdict, _, _ = evaluate_launcher(["only"], [tag(0) + rank_line(0, 1, "only", 0, key=KEY)], 0, False)
    assert verdict == Verdict.PASS


@pytest.mark.parametrize(
    ("lines", "mpirun_exit", "timed_out", "failed"),
    [
        ([line(0), line(1, code=1), line(2)], 1, False, "1"),
        ([line(0, code=2), line(1, code=139), line(2)], 1, False, "0, 1"),
        ([line(0), line(1, code=1), line(2)], 0, False, "1"),
        ([line(0), line(1, code=1)], 1, False, "1"),  # even with a rank missing
        ([line(0), line(1, code=-1), line(2)], 1, True, "1"),  # even after the deadline
        ([line(0), line(1, code=1), line(2), "SIGNAL-RANK garbage"], 1, False, "1"),
    ],
    ids=["one", "two", "mpirun-0", "missing", "timeout", "malformed-too"],
)
def test_a_failing_rank_is_fail(lines: list[str], mpirun_exit: int, timed_out: bool, failed: str) -> None:
    verdict, reason, _ = evaluate_launcher(HOSTS, lines, mpirun_exit, timed_out)
    assert verdict == Verdict.FAIL
    assert reason == f"Failed: rank(s) {failed} exited non-zero"


def test_a_rank_with_insufficient_evidence_is_inconclusive_not_fail() -> None:
    # Exit 3 is the documented "my evidence is insufficient"; another rank's real failure still wins.
    verdict, reason, report = evaluate_launcher(HOSTS, [line(0), line(1, code=3), line(2)], 3, False)
    assert verdict == Verdict.INCONCLUSIVE
    assert reason == "ScriptInconclusive: rank(s) 1 exited 3 (evidence insufficient)"
    assert [r.exit_code for r in report.ranks] == [0, 3, 0]
    verdict, reason, _ = evaluate_launcher(HOSTS, [line(0), line(1, code=3), line(2, code=1)], 1, False)
    assert verdict == Verdict.FAIL
    assert reason == "Failed: rank(s) 2 exited non-zero"


LONG = raw({"rank": 2, "size": 3, "host": "job-worker-2", "exitCode": 0, "pad": "x" * (MAX_RANK_LINE + 10)})


@pytest.mark.parametrize(
    ("hosts", "lines", "mpirun_exit", "timed_out", "reason"),
    [
        (HOSTS, good(), 0, True, "DeadlineExceeded"),
        (HOSTS, good(), None, True, "DeadlineExceeded"),
        (HOSTS, [line(0), line(1)], 0, False, "MissingRanks: 2 of 3 ranks reported"),
        (HOSTS, [], 0, False, "MissingRanks: 0 of 3"),
        (HOSTS, [line(0), line(1), line(1)], 0, False, "InvalidRankReport: rank 1 reported twice"),
        (HOSTS, [*good(), line(2)], 0, False, "InvalidRankReport: rank 2 reported twice"),
        (HOSTS, [line(0), line(1), signed("{not json", 2)], 0, False, "malformed"),
        (HOSTS, [*good(), signed("[]")], 0, False, "malformed"),
        (HOSTS, [line(0), line(1), raw({"rank": 2, "size": 3, "host": "job-worker-2"})], 0, False, "malformed"),
        (HOSTS, [line(0), line(1), raw({"rank": "2", "size": 3, "host": "h", "exitCode": 0})], 0, False, "malformed"),
        (HOSTS, [line(0), line(1), raw({"rank": 2, "size": "3", "host": "h", "exitCode": 0})], 0, False, "malformed"),
        (HOSTS, [line(0), line(1), raw({"rank": 2, "size": 3, "host": 7, "exitCode": 0})], 0, False, "malformed"),
        (HOSTS, [line(0), line(1), raw({"rank": 2, "size": 3, "host": "h", "exitCode": "0"})], 0, False, "malformed"),
        (HOSTS, [line(0), line(1), raw({"rank": 2, "size": 3, "host": "h", "exitCode": 0.0})], 0, False, "malformed"),
        (HOSTS, [line(0), line(1), raw({"rank": -1, "size": 3, "host": "h", "exitCode": 0})], 0, False, "malformed"),
        (HOSTS, [line(0), line(1), raw({"rank": 64, "size": 3, "host": "h", "exitCode": 0})], 0, False, "malformed"),
        (HOSTS, [*good(), signed("null")], 0, False, "malformed"),
        (HOSTS, [line(0), line(1), LONG], 0, False, "MissingRanks: 2 of 3"),
        (HOSTS, [line(0, 3), line(1, 3), line(2, 4)], 0, False, "InvalidRankReport: ranks disagree on the world size"),
        (HOSTS, [line(0, 2), line(1, 2), line(2, 2)], 0, False, "MissingRanks: 3 of 3 ranks reported (world size 2)"),
        (HOSTS, [line(0, 4), line(1, 4), line(2, 4)], 0, False, "MissingRanks"),
        (HOSTS, [line(0), line(1), line(3)], 0, False, "MissingRanks"),
        (HOSTS[:2], good(), 0, False, "MissingRanks"),
        (HOSTS, [line(0), line(1), line(2, host="job-worker-1")], 0, False, "WrongHosts"),
        (HOSTS, [line(0), line(1), line(2, host="elsewhere")], 0, False, "WrongHosts"),
        (HOSTS, [line(0, host="job-worker-0.other.ns.svc"), line(1), line(2, host="x")], 0, False, "WrongHosts"),
        (HOSTS, good(), 1, False, "LauncherFailed: mpirun exited 1"),
        (HOSTS, good(), None, False, "LauncherFailed: mpirun exited None"),
        (HOSTS, good(), 137, False, "LauncherFailed: mpirun exited 137"),
    ],
    ids=[
        "timeout",
        "timeout-signaled",
        "missing-rank",
        "no-ranks",
        "duplicate-rank",
        "duplicate-after-all",
        "bad-json",
        "array",
        "missing-field",
        "rank-string",
        "size-string",
        "host-number",
        "exit-string",
        "exit-float",
        "rank-negative",
        "rank-too-big",
        "null-body",
        "oversized-line",
        "sizes-disagree",
        "world-too-small",
        "world-too-large",
        "gap-in-ranks",
        "fewer-hosts",
        "two-ranks-one-host",
        "unknown-host",
        "other-domain-host",
        "mpirun-failed",
        "mpirun-no-exit",
        "mpirun-killed",
    ],
)
def test_inconclusive(
    hosts: list[str], lines: list[str], mpirun_exit: int | None, timed_out: bool, reason: str
) -> None:
    verdict, why, report = evaluate_launcher(hosts, lines, mpirun_exit, timed_out)
    assert verdict == Verdict.INCONCLUSIVE
    assert reason in why
    assert report.mpirun_exit_code == mpirun_exit


def test_line_at_exactly_the_limit_is_read() -> None:
    body = {"rank": 0, "size": 1, "host": "h", "exitCode": 0}
    text = raw(body)
    padded = signed(json.dumps({**body, "pad": "x" * (MAX_RANK_LINE - len(text) - 11)}))
    assert len(padded) == MAX_RANK_LINE
    assert evaluate_launcher(["h"], [padded], 0, False)[0] == Verdict.PASS
    longer = signed(json.dumps({**body, "pad": "x" * (MAX_RANK_LINE - len(text) - 10)}))
    assert evaluate_launcher(["h"], [longer], 0, False)[1] == "MissingRanks: 0 of 1 ranks reported (world size 0)"


def test_rank_host_matches_hostfile_by_short_name() -> None:
    hosts = ["a.job.ns.svc", "b.job.ns.svc"]
    lines = [tag(0) + rank_line(0, 2, "b", 0, key=KEY), tag(1) + rank_line(1, 2, "a.job", 0, key=KEY)]
    assert evaluate_launcher(hosts, lines, 0, False)[0] == Verdict.PASS


def test_report_keeps_first_of_duplicate_ranks_and_bounds_hosts() -> None:
    _, _, report = evaluate_launcher(HOSTS, [line(0, code=0), line(0, code=9)], 0, False)
    assert [(r.rank, r.exit_code) for r in report.ranks] == [(0, 0)]
    _, _, report = evaluate_launcher([f"h{i}" for i in range(100)], [], 0, False)
    assert len(report.hosts) == 64


def test_report_world_size_zero_when_sizes_disagree() -> None:
    _, _, report = evaluate_launcher(HOSTS, [line(0, 3), line(1, 3), line(2, 4)], 0, False)
    assert report.world_size == 0


def test_long_rank_host_is_truncated_not_refused() -> None:
    host = "h" * 300
    verdict, reason, report = evaluate_launcher(["h"], [tag(0) + rank_line(0, 1, host, 0, key=KEY)], 0, False)
    assert report.ranks[0].host == ""  # not a hostfile host: recorded as host index -1
    assert report.rank_table[0][1] == -1
    assert (verdict, reason.split(":")[0]) == (Verdict.INCONCLUSIVE, "WrongHosts")


def test_long_hostfile_host_is_cut_like_a_rank_host() -> None:
    # The report holds names of at most 253 characters; a longer hostfile name is cut the
    # same way as a rank's, so the rank still maps to it and the report stays valid.
    host = "h" * 300
    _, _, report = evaluate_launcher([host], [tag(0) + rank_line(0, 1, host, 0, key=KEY)], 0, False)
    assert report.hosts == ["h" * 253]
    assert report.rank_table == ((0, 0, 0),)
    LauncherReport.model_validate(wire(report))


@pytest.mark.parametrize("size", [-1, MAX_RANKS + 1, 1000])
def test_a_world_size_out_of_range_is_malformed(size: int) -> None:
    # A world larger than a report holds (worldSize 0..MAX_RANKS) is refused like any other
    # malformed report: Inconclusive, and the report stays valid for the adapter.
    verdict, reason, report = evaluate_launcher(["h"], [line(0, size=size, host="h")], 0, False)
    assert (verdict, reason) == (Verdict.INCONCLUSIVE, "InvalidRankReport: a malformed rank report")
    assert report.world_size == 0
    LauncherReport.model_validate(wire(report))


def test_empty_hostfile_is_vacuous_here_and_refused_by_the_launcher_role(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # evaluate_launcher alone cannot tell an empty world from a complete one ...
    assert evaluate_launcher([], [], 0, False)[0] == Verdict.PASS
    # ... so the launcher role refuses a hostfile that names no host before running mpirun.
    for key, value in {"SIGNAL_NODE_NAME": "gpu-000", "SIGNAL_POD_NAME": "job-launcher", "SIGNAL_POD_UID": "u"}.items():
        monkeypatch.setenv(key, value)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# no hosts\n\n")
    log = tmp_path / "log"
    argv = ["launcher", "--script", str(tmp_path / "s.sh"), "--deadline-seconds", "5"]
    argv += ["--workdir", str(tmp_path / "w"), "--termination-log", str(log), "--hostfile", str(hostfile)]
    assert runner_main.main(argv) == 1
    result = parse_result(log.read_bytes())
    assert result.verdict == Verdict.INCONCLUSIVE
    assert "names no host" in result.reason
    assert result.identity.role == "launcher"
    assert result.identity.participant_index is None
    hostfile.unlink()
    assert runner_main.main(argv) == 1
    assert "cannot read hostfile" in parse_result(log.read_bytes()).reason


@pytest.mark.parametrize(
    "body",
    [
        {"rank": 0, "size": 1, "host": "h", "exitCode": False},
        {"rank": False, "size": True, "host": "h", "exitCode": 0},
    ],
    ids=["exit-false", "rank-false-size-true"],
)
def test_boolean_fields_are_malformed(body: dict[str, object]) -> None:
    verdict, reason, _ = evaluate_launcher(["h"], [raw(body)], 0, False)
    assert verdict == Verdict.INCONCLUSIVE
    assert "malformed" in reason


def test_rank_zero_measurements_are_taken_from_rank_zero_only() -> None:
    lines = [
        tag(1) + rank_line(1, 2, "h1", 0, {"busbw": 1.0}, key=KEY),
        "noise",
        tag(0) + rank_line(0, 2, "h0", 0, {"busbw": 42.5, "transport": "NET/IB"}, key=KEY),
    ]
    assert json.loads(rank_zero_measurements(lines) or "null") == {"busbw": 42.5, "transport": "NET/IB"}
    assert rank_zero_measurements([tag(0) + rank_line(0, 1, "h", 0, key=KEY)]) is None
    assert json.loads(rank_zero_measurements([tag(0) + rank_line(0, 1, "h", 0, "invalid: x", key=KEY)]) or "null") == (
        "invalid: x"
    )
    # Rank 1 cannot supply rank 0's measurements, signed or not.
    forged = tag(1) + rank_line(0, 2, "h0", 0, {"busbw": 999.0}, key=KEY)
    assert rank_zero_measurements([forged, tag(0) + RANK_PREFIX + json.dumps({"rank": 0, "measurements": {}})]) is None


# ---------------------------------------------------------------- binding (issue 12, item 7)

BODY = {"rank": 1, "size": 3, "host": "job-worker-1", "exitCode": 0}


@pytest.mark.parametrize(
    "forged",
    [
        RANK_PREFIX + json.dumps(BODY),  # the old, unsigned format
        tag(1) + RANK_PREFIX + json.dumps(BODY),  # unsigned, on the right stream
        tag(1) + RANK_PREFIX + "0" * 64 + " " + json.dumps(BODY),  # a made-up signature
        signed(json.dumps(BODY), 1, key="another check's key"),  # signed with another key
        signed(json.dumps(BODY), 1)[len(tag(1)) :],  # untagged: not from any rank's stream
        "noise " + signed(json.dumps(BODY), 1),  # not at the start of a line
        tag(0) + signed(json.dumps(BODY), 1),  # printed by rank 0's script, tags and all
    ],
    ids=["unsigned", "unsigned-tagged", "made-up-mac", "other-key", "untagged", "mid-line", "nested-tag"],
)
def test_a_forged_report_is_ordinary_output(forged: str) -> None:
    # Rank 1 failed; a forged Pass for it, however printed, changes nothing.
    honest = [line(0), line(1, code=4), line(2)]
    assert evaluate_launcher(HOSTS, [forged, *honest], 1, False) == evaluate_launcher(HOSTS, honest, 1, False)
    assert evaluate_launcher(HOSTS, [forged, *honest], 1, False)[0] == Verdict.FAIL
    # ... and it does not stand in for a missing rank either.
    assert evaluate_launcher(HOSTS, [line(0), forged, line(2)], 0, False)[1].startswith("MissingRanks")


def test_a_signed_report_on_another_ranks_stream_is_inconclusive() -> None:
    moved = tag(0) + rank_line(1, 3, "job-worker-1", 0, key=KEY)
    verdict, reason, _ = evaluate_launcher(HOSTS, [line(0), moved, line(2)], 0, False)
    assert verdict == Verdict.INCONCLUSIVE
    assert reason == "InvalidRankReport: a report for rank 1 on the output of rank 0"


def test_reports_are_read_as_a_bounded_stream(tmp_path: Path) -> None:
    out = tmp_path / "stdout"
    with out.open("w") as handle:
        handle.write("x" * (3 * (1 << 16)) + "\n")  # one huge line, skipped without being held
        handle.write(f"{line(0)}\n")
        handle.write("y" * (MAX_RANK_LINE + 1) + line(1) + "\n")  # a report glued to a long line
        for _ in range(1000):
            handle.write(f"{tag(1)}{RANK_PREFIX}{'0' * 64} {json.dumps(BODY)}\n")  # flood of fakes
        handle.write(f"{line(1)}\n{line(2)}")  # the last line without a newline
    reports = stream_reports(out, KEY)
    assert [r.stream_rank for r in reports] == [0, 1, 2]
    assert evaluate_reports(HOSTS, reports, 0, False)[0] == Verdict.PASS
    assert len(stream_reports(out, KEY, limit=2)) == 2
    many = [line(0)] * (MAX_REPORTS + 5)
    assert len(reports_in(many, KEY)) == MAX_REPORTS
    assert stream_reports(tmp_path / "missing", KEY) == []


def test_the_wrapper_takes_the_key_out_of_its_environment() -> None:
    env = {REPORT_KEY_ENV: "secret", "OTHER": "1"}
    assert take_report_key(env) == "secret"
    assert env == {"OTHER": "1"}
    assert take_report_key({}) == ""
    assert authenticate(line(0), "") is None


def test_mpirun_chunk_tags_inside_a_report_line() -> None:
    """mpirun tags every chunk it forwards, not every line: seen with OpenMPI 4.1 as
    ``[1,1]<stdout>:SIGNAL-RANK ...}[1,1]<stdout>:`` when the final newline came separately."""
    whole = line(1)
    cut = len(whole) - 10
    assert authenticate(whole + tag(1), KEY) == authenticate(whole, KEY) is not None
    assert authenticate(whole[:cut] + tag(1) + whole[cut:], KEY) == authenticate(whole, KEY)
    assert authenticate(whole + tag(0) + "rank 0 says hi", KEY) == authenticate(whole, KEY)
    # Another rank's chunk inside the report breaks it (fail closed: the rank is missing).
    assert authenticate(whole[:cut] + tag(0) + whole[cut:], KEY) is None
