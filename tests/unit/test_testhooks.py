"""kubeio/testhooks.py and localcluster/hooked.py: the crash points and faults act only when
the local cluster's launcher armed them, never because a shipped entry point's environment
names them (issue 46: fault switches must be impossible to turn on in a production image)."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kubeio import crashpoints, testhooks
from localcluster import hooked

REPO = Path(__file__).resolve().parents[2]
SWITCHES = {
    hooked.CRASH_AT_ENV: "1",
    hooked.CRASH_TRACE_ENV: "trace.tsv",
    hooked.RENEWAL_FAULT_ENV: "1",
    hooked.REQUEST_LOG_ENV: "requests.tsv",
}


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", **SWITCHES},
        capture_output=True,
        text=True,
    )


def test_a_service_process_ignores_the_switches_in_its_environment(tmp_path: Path) -> None:
    # Before this change, SIGNAL_CRASH_AT=1 killed any process at its first write (137).
    done = _python(
        "from kubeio import crashpoints, testhooks\n"
        "crashpoints.hit('before POST /api/v1/nodes')\n"
        "assert testhooks.current() == testhooks.DISARMED, testhooks.current()\n"
        "print('alive')",
        tmp_path,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "alive"), done.stderr
    assert list(tmp_path.iterdir()) == [], "a disarmed process wrote a trace or request log"


def test_the_launcher_arms_what_the_environment_asks(tmp_path: Path) -> None:
    done = _python(
        "import os\n"
        "from kubeio import crashpoints, testhooks\n"
        "from localcluster import hooked\n"
        "testhooks.arm(hooked.hooks_from(os.environ))\n"
        "crashpoints.hit('before POST /api/v1/nodes')\n"
        "print('survived')",
        tmp_path,
    )
    assert done.returncode == 137, (done.stdout, done.stderr)
    assert (tmp_path / "trace.tsv").read_text() == "1\tbefore POST /api/v1/nodes\n"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, testhooks.DISARMED),
        ({hooked.CRASH_AT_ENV: "7"}, testhooks.Hooks(crash_at=7)),
        ({hooked.CRASH_AT_ENV: ""}, testhooks.DISARMED),
        ({hooked.RENEWAL_FAULT_ENV: "4"}, testhooks.Hooks(renewal_dies_after=4)),
        ({hooked.CRASH_TRACE_ENV: "/x/t"}, testhooks.Hooks(crash_trace=Path("/x/t"))),
        ({hooked.REQUEST_LOG_ENV: "/x/r"}, testhooks.Hooks(request_log=Path("/x/r"))),
    ],
)
def test_hooks_from_the_environment(environ: dict[str, str], expected: testhooks.Hooks) -> None:
    assert hooked.hooks_from(environ) == expected


@pytest.mark.parametrize("value", ["-1", "seven", "1.5"])
def test_a_malformed_count_is_an_error_not_zero(value: str) -> None:
    with pytest.raises(SystemExit, match=hooked.CRASH_AT_ENV):
        hooked.hooks_from({hooked.CRASH_AT_ENV: value})


def test_no_shipped_entry_point_is_the_launcher() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts, "pyproject.toml names no entry points"
    assert not [name for name, target in scripts.items() if target.startswith("localcluster")]
    assert set(hooked.PROGRAMS.values()) <= {target.split(":")[0] for target in scripts.values()}


def test_arm_returns_what_it_replaced() -> None:
    armed = testhooks.Hooks(crash_at=3)
    previous = testhooks.arm(armed)
    try:
        assert previous == testhooks.DISARMED
        assert testhooks.current() == armed
    finally:
        testhooks.arm(previous)
    assert testhooks.current() == testhooks.DISARMED


def test_a_scoped_crash_counts_only_the_points_of_its_own_objects(tmp_path: Path) -> None:
    """SIGNAL_CRASH_SCOPE: another test's objects on the shared cluster do not shift the count."""
    trace = tmp_path / "trace.tsv"
    previous = testhooks.arm(testhooks.Hooks(crash_trace=trace, crash_scope="crash-abc"))
    try:
        crashpoints.hit("before PATCH /api/v1/nodes/t-other-n0")
        crashpoints.hit("before PATCH /api/v1/nodes/crash-abc-n0")
        crashpoints.hit("before POST /api/v1/namespaces/default/events")
        crashpoints.hit("after PATCH /api/v1/nodes/crash-abc-n0")
    finally:
        testhooks.arm(previous)
    assert [line.split("\t")[1] for line in trace.read_text().splitlines()] == [
        "before PATCH /api/v1/nodes/crash-abc-n0",
        "after PATCH /api/v1/nodes/crash-abc-n0",
    ]
