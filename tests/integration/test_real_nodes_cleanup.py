"""Real nodes leave nothing on the host: not after a clean stop, not after their owner is
SIGKILLed (the janitor cleans within seconds), and not after owner and janitor are both killed
(the next start sweeps). Each test runs a one-node cluster with a running Pod in a child
process, takes note of everything it put on the host, and checks it is all gone: processes
(node processes, containerd's shims, the containers), the bridge, the cgroups, the record,
mounts, ``/run/containerd``, ``/run/netns/cni-*``, ``/var/lib/cni``, the host's iptables and
nftables rules and ``ip_forward``."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.controlplane import ControlPlane
from localcluster.realnode import hoststate
from localcluster.realnode.pool import RealNodes, gpu_nodes

pytestmark = pytest.mark.timeout(600)
REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import structlog
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout: the test's
    from localcluster.cluster import LocalCluster
    from localcluster.controlplane import ControlPlane
    from localcluster.kube import resource_path
    from localcluster.realnode import hoststate
    from localcluster.realnode.images import TEST_IMAGE

    async def main():
        cluster = LocalCluster(plane=ControlPlane(), real_nodes=1, install_upstream=False, with_argo=False)
        await cluster.start()
        await cluster.create_namespace("leftovers")
        while True:  # the namespace's default ServiceAccount comes from the controller-manager
            try:
                await cluster.admin.get(resource_path("v1", "serviceaccounts", "leftovers", "default"))
                break
            except Exception:
                await asyncio.sleep(0.1)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"}, "spec": {
            "nodeName": "node-1", "restartPolicy": "Never", "containers": [
                {"name": "main", "image": TEST_IMAGE, "imagePullPolicy": "Never", "args": ["sleep", "600"]}]}}
        await cluster.admin.create(resource_path("v1", "pods", "leftovers"), pod)
        deadline = time.monotonic() + 120
        while (await cluster.admin.get(resource_path("v1", "pods", "leftovers", "sleeper")))["status"].get(
                "phase") != "Running":
            assert time.monotonic() < deadline, "the Pod never ran"
            await asyncio.sleep(0.1)
        nodes = cluster.realnodes
        record = json.loads(nodes._record.read_text())
        while not record.get("janitor"):
            record = json.loads(nodes._record.read_text())
        info = {
            "bridge": nodes.network.bridge, "cgroup": nodes.cgroup, "record": str(nodes._record),
            "nftTable": nodes.network.nft_table,
            "janitor": record["janitor"], "owner": record["owner"], "workdir": str(cluster.plane.workdir),
            # Each process as [pid, start time]: a pid the host gives to a later process is not it.
            "processes": [
                [pid, start] for pid in sorted(hoststate._pids_in(nodes.cgroup))
                if (start := hoststate.start_time(pid)) is not None
            ],
        }
        print(json.dumps(info), flush=True)
        if (await asyncio.to_thread(sys.stdin.readline)).strip() == "stop":
            await cluster.stop()
            print("stopped", flush=True)

    asyncio.run(main())
    """
)


def host_view() -> dict[str, Any]:
    """What real nodes could change on the host outside their records."""
    iptables = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    rules = sorted(line for line in iptables.splitlines() if not line.startswith("#"))
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False).stdout
    return {
        "run_containerd": Path("/run/containerd").exists(),
        "cni_netns": sorted(p.name for p in Path("/run/netns").glob("cni-*")) if Path("/run/netns").exists() else [],
        "var_lib_cni": sorted(str(p) for p in Path("/var/lib/cni").rglob("*")) if Path("/var/lib/cni").exists() else [],
        "iptables": rules,
        # Every table but the clusters' own (another test's cluster may come and go meanwhile;
        # this cluster's table is checked by name in leftovers()).
        "nftables": sorted(line for line in tables.splitlines() if not line.startswith("table inet signal_br")),
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
    }


def _alive(entry: list[int]) -> bool:
    """Whether the process noted as ``[pid, start time]`` is still that process (not a zombie)."""
    return hoststate.alive(entry)


def _described(entry: list[int]) -> str:
    """A noted process as the host has it now, for a failure's message."""
    pid = entry[0]
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
        cgroups = ";".join(Path(f"/proc/{pid}/cgroup").read_text().split())
    except OSError as exc:
        return f"{pid}: gone while described ({exc})"
    return f"{pid}: state {stat[stat.rindex(')') + 2]} {command!r} cgroups {cgroups}"


def leftovers(info: dict[str, Any]) -> list[str]:
    """Everything of the child's cluster still on the host."""
    found = [f"process {_described(entry)}" for entry in info["processes"] if _alive(entry)]
    found += [f"bridge {info['bridge']}"] if Path("/sys/class/net", info["bridge"]).exists() else []
    found += [f"cgroup {d}" for d in hoststate.cgroup_dirs(info["cgroup"]) if d.exists()]
    found += [f"record {info['record']}"] if Path(info["record"]).exists() else []
    table = subprocess.run(["nft", "list", "table", "inet", info["nftTable"]], capture_output=True, check=False)
    found += [f"nftables table {info['nftTable']}"] if table.returncode == 0 else []
    mounts = Path("/proc/self/mountinfo").read_text()
    found += [f"mount under {info['workdir']}"] if info["workdir"] in mounts else []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if info["workdir"] in cmdline and pid != os.getpid():
            found.append(f"process {pid}: {cmdline[:120]}")
    return found


def wait_clean(info: dict[str, Any], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := leftovers(info)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture
def child() -> Iterator[tuple[subprocess.Popen[str], dict[str, Any], dict[str, Any]]]:
    """A child process running a one-node cluster with a Pod: (process, what it made, the
    host as it was before it started)."""
    before = host_view()
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        assert line, f"the child cluster did not start (exit {process.wait()})"
        info = json.loads(line)
        assert len(info["processes"]) >= 5, info  # holder, containerd, kubelet, kube-proxy, a shim, the Pod
        yield process, info, before
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def test_a_stopped_cluster_leaves_no_host_state(
    child: tuple[subprocess.Popen[str], dict[str, Any], dict[str, Any]],
) -> None:
    process, info, before = child
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write("stop\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "stopped"
    assert process.wait(60) == 0
    assert leftovers(info) == []
    assert not _alive(info["janitor"])
    assert host_view() == before


def test_a_sigkilled_cluster_is_cleaned_by_its_janitor_within_seconds(
    child: tuple[subprocess.Popen[str], dict[str, Any], dict[str, Any]],
) -> None:
    process, info, before = child
    began = time.monotonic()
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert wait_clean(info, 30) == []
    print(f"\nSIGKILLed cluster cleaned in {time.monotonic() - began:.1f}s")
    assert host_view() == before


def test_the_next_start_cleans_what_a_killed_cluster_and_janitor_left(
    child: tuple[subprocess.Popen[str], dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    process, info, before = child
    os.kill(info["janitor"][0], signal.SIGKILL)
    process.send_signal(signal.SIGKILL)
    process.wait()
    # Nobody cleans up: the Pod's container and containerd's shim outlive everything else.
    assert Path("/sys/class/net", info["bridge"]).exists()
    assert f"nftables table {info['nftTable']}" in leftovers(info)
    assert any(_alive(entry) for entry in info["processes"])
    # The premise of the sweep: owner and janitor are both gone (else the record is left alone).
    assert not _alive(info["owner"]), _described(info["owner"])
    assert not _alive(info["janitor"]), _described(info["janitor"])
    assert Path(info["record"]).exists()
    nodes = RealNodes(gpu_nodes(1))
    nodes.prepare(ControlPlane(workdir=tmp_path / "next"))  # the next start sweeps first
    try:
        assert [_described(entry) for entry in info["processes"] if _alive(entry)] == []
        assert [d for d in hoststate.cgroup_dirs(info["cgroup"]) if d.exists()] == []
        # The slot is free again, so the new cluster may take the same bridge and record names.
        assert nodes._record is not None
        assert json.loads(nodes._record.read_text())["owner"][0] == os.getpid()
    finally:
        nodes.stop()
        nodes.release()
    assert leftovers(info) == []
    assert host_view() == before
