"""Every process a local cluster starts dies with the process that started it, and what a killed
run left behind is removed by the next start (localcluster/procs.py, localcluster/reaper.py;
issue 11). Real processes, real signals: an owner process records a run, starts children the
ways the local cluster does (``procs.popen``, from the main thread and from another thread; a
child with a grandchild in its process group; a child in a session of its own without the
parent-death signal, as the process kubelet starts Pods), and is then killed with SIGKILL."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import procs

OWNER = textwrap.dedent(
    """
    import json, subprocess, sys, threading
    from pathlib import Path
    from localcluster import procs

    workdir = Path(sys.argv[1])
    workdir.mkdir()
    record = procs.RunRecord.open(workdir, keep=False)
    main = procs.popen(["sleep", "300"])
    box = {}
    thread = threading.Thread(target=lambda: box.update(p=procs.popen(["sleep", "301"])))
    thread.start()
    thread.join()  # that thread is gone: the child must not die with it, only with this process
    group = procs.popen(["sh", "-c", "sleep 302 & echo $! > " + str(workdir / "grandchild") + "; wait"])
    pod = subprocess.Popen(["sleep", "303"], start_new_session=True)
    pod_child = subprocess.Popen(["sh", "-c", "sleep 304 & echo $! > " + str(workdir / "pod-child") + "; wait"],
                                 start_new_session=True)
    while not (workdir / "grandchild").exists() or not (workdir / "pod-child").exists():
        pass
    pids = [main.pid, box["p"].pid, group.pid, int((workdir / "grandchild").read_text()), pod.pid,
            pod_child.pid, int((workdir / "pod-child").read_text())]
    print(json.dumps({"pids": pids, "record": str(record.path), "watchdog": record.watchdog.pid}), flush=True)
    sys.stdin.read()
    """
)


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _wait_seen(info: dict[str, object], timeout: float = 10) -> None:
    """Wait until the watchdog has remembered every child (it polls /proc; a process started in
    the last fraction of a second before its owner dies is found by its work directory instead)."""
    pids = {int(p) for p in info["pids"]}  # type: ignore[attr-defined]
    seen_file = Path(str(info["record"]) + ".seen")
    deadline = time.monotonic() + timeout
    seen: set[int] = set()
    while time.monotonic() < deadline:
        seen = {row[0] for row in json.loads(seen_file.read_text())} if seen_file.exists() else set()
        if pids <= seen:
            return
        time.sleep(0.05)
    raise AssertionError(f"the watchdog never saw {sorted(pids - seen)}")


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "runs"
    monkeypatch.setenv("SIGNAL_RUNS_DIR", str(directory))
    return directory


@pytest.fixture
def owner(tmp_path: Path, runs_dir: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, object]]]:
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "work")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "SIGNAL_RUNS_DIR": str(runs_dir)},
    )
    assert process.stdout is not None
    assert process.stdin is not None
    try:
        line = process.stdout.readline()
        if not line:
            process.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"the owner process did not start its children:\n{err}")
        yield process, json.loads(line)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        for stream in (process.stdout, process.stdin, process.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        info = json.loads(line) if line else {"pids": []}
        for pid in _alive([*info["pids"], info.get("watchdog", 0)]):  # never leak into the next test
            os.kill(pid, signal.SIGKILL)


def test_sigkill_of_the_owner_leaves_nothing_behind(
    owner: tuple[subprocess.Popen[str], dict[str, object]], tmp_path: Path
) -> None:
    process, info = owner
    pids = [int(p) for p in info["pids"]]  # type: ignore[attr-defined]
    assert len(_alive(pids)) == 7
    assert (tmp_path / "work").is_dir()
    _wait_seen(info)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    assert _wait_gone(pids, 10) == []
    deadline = time.monotonic() + 10
    while (Path(str(info["record"])).exists() or (tmp_path / "work").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (tmp_path / "work").exists(), "the killed run's work directory was not removed"
    assert not Path(str(info["record"])).exists(), "the killed run's record was not removed"
    assert _wait_gone([int(str(info["watchdog"]))], 10) == []


def test_the_next_start_sweeps_a_run_whose_owner_and_watchdog_were_killed(
    owner: tuple[subprocess.Popen[str], dict[str, object]], tmp_path: Path
) -> None:
    process, info = owner
    pids = [int(p) for p in info["pids"]]  # type: ignore[attr-defined]
    _wait_seen(info)
    os.kill(int(str(info["watchdog"])), signal.SIGKILL)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    # The parent-death signal alone kills the owner's direct children started by procs.popen
    # (pids 0-2); the grandchild in one of their groups and the Pod-like processes (sessions of
    # their own, no parent-death signal) survive it: only the watchdog or the sweep kills them.
    assert _wait_gone(pids[:3], 10) == []
    survivors = _alive(pids)
    assert survivors, "expected the Pod-like processes to outlive their owner until the sweep"
    assert (tmp_path / "work").is_dir()
    cleaned = procs.sweep()
    assert cleaned == [str(tmp_path / "work")]
    assert _wait_gone(pids, 10) == []
    assert not (tmp_path / "work").exists()
    assert not Path(str(info["record"])).exists()
    assert procs.sweep() == []


CLEAN_STOP = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from pathlib import Path
    from localcluster import procs, reaper

    workdir = Path(sys.argv[1])
    workdir.mkdir()
    record = procs.RunRecord.open(workdir, keep=True)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    forgotten = subprocess.Popen(["sleep", "305"], cwd=workdir, **quiet)
    unrelated = subprocess.Popen(["sleep", "306"], **quiet)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        seen = reaper.load_seen(str(record.path) + ".seen")
        if forgotten.pid in seen and unrelated.pid in seen:
            break
        time.sleep(0.05)
    record.close()
    print(json.dumps({"forgotten": forgotten.pid, "unrelated": unrelated.pid}), flush=True)
    """
)


def test_a_clean_stop_kills_only_what_the_run_forgot(tmp_path: Path, runs_dir: Path) -> None:
    """A Pod's process that nothing stopped (it names the run's work directory) dies at the
    clean stop; a process of the owner that has nothing to do with the run is left alone."""
    done = subprocess.run(
        [sys.executable, "-c", CLEAN_STOP, str(tmp_path / "work")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "SIGNAL_RUNS_DIR": str(runs_dir)},
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    try:
        assert _wait_gone([info["forgotten"]], 10) == []
        assert _alive([info["unrelated"]]) == [info["unrelated"]]
        assert "killed 1 process(es) left behind by the stopped run" in done.stderr
        assert (tmp_path / "work").is_dir(), "a kept work directory stays"
        assert list(runs_dir.iterdir()) == []
    finally:
        for pid in _alive([info["forgotten"], info["unrelated"]]):
            os.kill(pid, signal.SIGKILL)
