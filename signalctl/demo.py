"""``signalctl demo``: the local demo, end to end, on real nodes. Starts the local control plane
and five real nodes (kubelet, containerd, kube-proxy; a system node and gpu-001..gpu-004), builds
the images from this repository's Dockerfiles, installs Signal with ``deploy/overlays/local``,
Argo's workflow-controller and the Kubeflow MPI operator as Pods on the system node, registers the
example profile (examples/demo: a Pod check, an MPIJob check with real OpenMPI ranks over SSH, a
Pod burn-in that gpu-003 fails), requests four Nodes (two groups of two), shows progress live,
and ends with the Runs, the Nodes' projections, ``signalctl evidence verify`` for each Run and
what the portal serves. ``--simulated`` runs the same on simulated Nodes (the process kubelet,
the controller and portal as local processes) for machines without root or containerd, with
the Pod checks only: nothing simulates the MPI operator or SSH, so MPIJob checks run only on
real nodes. Ctrl-C stops everything cleanly."""

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import structlog

from localcluster import install
from localcluster.binaries import kplane_binary
from localcluster.cluster import LocalCluster
from localcluster.controlplane import ControlPlane
from localcluster.kube import ApiError, KubeClient, resource_path
from shared import keys
from shared.evidence import CHECK_EVIDENCE_SCHEMA, EvidenceError, decode_document
from signalctl import demo_outcome as outcome
from signalctl import progress
from signalctl.demo_signal import PodSignal, Portal, ProcessSignal, Signal, real_shapes
from signalctl.tables import NODE_HEADERS, node_rows, render

NAMESPACE = "signal-system"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "demo"
REQUESTED = ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
TERMINAL = {"Succeeded", "Failed", "Inconclusive", "Canceled"}
Obj = dict[str, Any]


_BEGAN = time.monotonic()


def _say(message: str) -> None:
    """A stage of the demo, with the seconds since the demo started (``make``'s own stages,
    before it, print theirs: hack/stage.py)."""
    print(f"==> {message} [{time.monotonic() - _BEGAN:.0f}s]", flush=True)


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    parse = datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


class Progress:
    """Prints each change once: Run phases, and each check of each Run advancing Node by Node
    until its verdict lands with its evidence (signalctl/progress.py)."""

    def __init__(self, admin: KubeClient) -> None:
        self.admin = admin
        self.phases: dict[str, str] = {}
        self.checks = progress.Tracker()

    async def poll(self) -> list[Obj]:
        runs = (await self.admin.get(resource_path(keys.API_VERSION, keys.RUN_PLURAL, NAMESPACE)))["items"]
        for line in await progress.observe(self.admin.get, NAMESPACE, runs, self.checks, (ApiError,)):
            print(f"    {line}", flush=True)
        for run in sorted(runs, key=lambda r: r["metadata"]["name"]):
            name, status = run["metadata"]["name"], run.get("status") or {}
            phase = status.get("phase", "Pending")
            released = phase == "Succeeded" and outcome.is_released(run)
            shown = f"{phase}, released" if released else phase
            if self.phases.get(name) != shown:
                self.phases[name] = shown
                nodes = ", ".join(p["nodeName"] for p in run["spec"]["participants"])
                detail = f" ({status.get('reason')}: {status.get('message')})" if phase in TERMINAL else ""
                print(f"    Run {name} [{nodes}]: {phase}{detail}{' (Nodes released)' if released else ''}", flush=True)
        return list(runs)


async def _overhead(admin: KubeClient, runs: list[Obj]) -> list[str]:
    """Per check: how long its workloads lived beyond the scripts' own run time."""
    lines = []
    for run in sorted(runs, key=lambda r: r["metadata"]["name"]):
        for index in range(len(run["spec"]["checks"])):
            name = progress.evidence_name(run["metadata"]["name"], index)
            try:
                document, _ = decode_document(
                    await admin.get(resource_path("v1", "configmaps", NAMESPACE, name)), CHECK_EVIDENCE_SCHEMA
                )
            except (ApiError, EvidenceError):
                continue
            results = document["results"]
            total = _seconds(results["startedAt"], document["cleanup"]["finishedAt"])
            scripts = [
                _seconds(p.get("startedAt"), p.get("finishedAt")) for p in results["participants"] if p.get("startedAt")
            ]
            script = max((s for s in scripts if s is not None), default=0.0)
            if total is not None:
                lines.append(
                    f"{run['metadata']['name']} {results['check']['name']:<10} adapter {total:5.0f}s  "
                    f"scripts {script:4.0f}s  overhead {total - script:5.0f}s"
                )
    return lines


async def run_demo(
    nodes: int, workdir: Path | None, exit_after: float | None, timeout: float, real_nodes: bool = False
) -> int:
    began = time.monotonic()
    _say("locating the local control plane binaries (built once, then cached)")
    binary = kplane_binary(show_progress=True)
    plane = ControlPlane(workdir=workdir, keep_workdir=True, binary=binary) if workdir else ControlPlane(binary=binary)
    if real_nodes:
        cluster = LocalCluster(plane=plane, real_nodes=real_shapes(), install_upstream=False, with_argo=False)
        backend: Signal = PodSignal(cluster)
    else:
        cluster = LocalCluster(plane=plane)
        backend = ProcessSignal(cluster)
    kept = "kept" if plane.keep_workdir else "removed at exit; --workdir DIR keeps it"
    _say(f"work directory: {plane.workdir} ({kept})")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    code = 0
    try:
        await cluster.start(progress=_say)
        await _install_and_request(cluster, backend, nodes)
        code, runs = await _certification(cluster, backend, stop, timeout)
        if code == 0:
            code = await _conclude(cluster, backend, runs, began)
            if code == 0:
                print("    press Ctrl-C to stop and clean up", flush=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=exit_after)
        _say("stopping")
    finally:
        backend.stop()
        await cluster.stop()
    _say("stopped cleanly")
    return code


async def _certification(
    cluster: LocalCluster, backend: Signal, stop: asyncio.Event, timeout: float
) -> tuple[int, list[Obj]]:
    """Show progress until everything the demo reports has happened (outcome.settled: every Run
    ended, every Node projected, the Succeeded Run released). (0 or the exit code, the Runs)."""
    admin = cluster.admin
    watcher = Progress(admin)
    deadline = time.monotonic() + timeout
    runs: list[Obj] = []
    while not stop.is_set():
        runs = await watcher.poll()
        if outcome.settled(runs, await _nodes(admin), TERMINAL):
            return 0, runs
        problem = await backend.controller_problem()
        if time.monotonic() > deadline or problem is not None:
            _say(problem or "the certification did not finish in time")
            print(await backend.controller_log())
            return 1, runs
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
    _say("interrupted before the certification finished")
    return 130, runs


async def _conclude(cluster: LocalCluster, backend: Signal, runs: list[Obj], began: float) -> int:
    """The report, then the portal; exit code 1 (and why) unless all of it is as expected."""
    admin, plane = cluster.admin, cluster.plane
    verify_codes = await _report(admin, runs, plane, began)
    found = outcome.problems(runs, await _nodes(admin), verify_codes)
    if not found:
        found = await _show_portal(await backend.start_portal(), backend, runs)
    if not found:
        _say("the demo ended as expected")
        return 0
    _say("the demo did NOT end as expected:")
    for problem in found:
        print(f"    - {problem}", flush=True)
    keep = "" if plane.keep_workdir else " (removed at exit: pass --workdir DIR to keep them)"
    print(f"    logs: {plane.workdir}{keep}", flush=True)
    return 1


async def _install_and_request(cluster: LocalCluster, backend: Signal, nodes: int) -> None:
    """Fleet, Signal, the example profile, the controller, and the request of four Nodes."""
    admin = cluster.admin
    if cluster.realnodes is None:
        _say(f"creating {nodes} simulated GPU Nodes")
    await backend.fleet(nodes)
    listing = await admin.get(resource_path("v1", "nodes"))
    gpus = [n for n in listing["items"] if n["metadata"]["name"].startswith("gpu-")]
    print(render(NODE_HEADERS, node_rows(gpus)))
    await backend.install(_say)
    digest = await install.source_config_map(admin, "signal-scripts", "demo-gpu-scripts", EXAMPLE / "scripts")
    profile = install.profile_from(EXAMPLE / "profile.yaml", digest)
    if cluster.realnodes is None:
        checks = profile["spec"]["checks"]
        left_out = [c["name"] for c in checks if c["backend"] == "MPIJob"]
        profile["spec"]["checks"] = [c for c in checks if c["backend"] != "MPIJob"]
        print(
            f"    simulated Nodes run no MPIJob: check(s) {', '.join(left_out)} left out "
            "(`signalctl demo` without --simulated runs them on real nodes)"
        )
    await admin.create(resource_path(keys.API_VERSION, keys.PROFILE_PLURAL), profile)
    print(f"    profile {profile['metadata']['name']}: {len(profile['spec']['checks'])} checks, source {digest}")
    await backend.start_controller()
    _say(f"requesting {', '.join(REQUESTED)} (groups of 2; gpu-003 is made to fail the burn-in)")
    for name in REQUESTED:
        patch = {"metadata": {"labels": {keys.CERTIFY_LABEL: profile["metadata"]["name"]}}}
        await admin.merge_patch(resource_path("v1", "nodes", name=name), patch)


async def _show_portal(portal: Portal, backend: Signal, runs: list[Obj]) -> list[str]:
    """Wait for the portal, print what it serves for the requested Nodes; what differs from the
    expected end (outcome.portal_problems)."""
    base = portal.base
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=base, timeout=5, **portal.client) as http:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get("/readyz", **portal.request)).status_code == 200:
                    break
            problem = await backend.portal_problem()
            if problem is not None:
                return [problem]
            if time.monotonic() > deadline:
                return ["the portal did not become ready within 60s; see portal.log in the demo's work directory"]
            await asyncio.sleep(0.5)
        rows = []
        for name in REQUESTED:
            summary = (await http.get(f"/api/v1/nodes/{name}", **portal.request)).json()
            for check in summary.get("checks", []):
                rows.append([name, check.get("check", ""), check.get("state", ""), check.get("reason", "")])
    print()
    _say(f"the portal ({portal.note}): {base}/")
    print(render(["NODE", "CHECK", "STATE", "REASON"], rows))
    print(f"    API: {base}/api/v1/results   OpenAPI: {base}/api/v1/openapi.json")
    profile = runs[0]["spec"]["profile"]["name"]
    burn_in = f"{profile}/{runs[0]['spec']['checks'][-1]['name']}"
    return outcome.portal_problems({(r[0], r[1]): r[2] for r in rows}, burn_in)


async def _nodes(admin: KubeClient) -> list[Obj]:
    return [await admin.get(resource_path("v1", "nodes", name=n)) for n in REQUESTED]


async def _report(admin: KubeClient, runs: list[Obj], plane: ControlPlane, began: float) -> dict[str, int]:
    """Print the Runs, the Nodes, ``signalctl evidence verify`` of each Run (returns their exit
    codes by Run) and the timings."""
    profile = runs[0]["spec"]["profile"]["name"]
    print()
    _say("Runs")
    rows = []
    for run in sorted(runs, key=lambda r: r["metadata"]["name"]):
        status = run.get("status") or {}
        checks = ", ".join(f"{c['name']}={c['verdict']}" for c in status.get("checkVerdicts", []))
        nodes = ",".join(p["nodeName"] for p in run["spec"]["participants"])
        rows.append([run["metadata"]["name"], status.get("phase", ""), status.get("reason", ""), nodes, checks])
    print(render(["RUN", "PHASE", "REASON", "NODES", "CHECKS"], rows))
    print()
    _say(f"Node projections ({keys.certified_label(profile)})")
    rows = []
    for node in await _nodes(admin):
        labels = node["metadata"].get("labels") or {}
        reserved = "reserved+cordoned" if labels.get(keys.RESERVED_BY_LABEL) else "released"
        rows.append([node["metadata"]["name"], labels.get(keys.certified_label(profile), "-"), reserved])
    print(render(["NODE", "RESULT", "STATE"], rows))
    print()
    signalctl = str(Path(sys.executable).parent / "signalctl")
    codes: dict[str, int] = {}
    for run in sorted(runs, key=lambda r: r["metadata"]["name"]):
        name = run["metadata"]["name"]
        _say(f"signalctl evidence verify {name}")
        argv = [signalctl, "evidence", "verify", name, "--kubeconfig", str(plane.admin_kubeconfig), "-n", NAMESPACE]
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await process.communicate()
        print(out.decode(errors="replace").rstrip())
        print(f"    (exit {process.returncode})")
        codes[name] = process.returncode if process.returncode is not None else -1
    print()
    _say("time per Run (admission to verdict; the demo's scripts take well under a second)")
    for run in sorted(runs, key=lambda r: r["metadata"]["name"]):
        status = run.get("status") or {}
        total = _seconds(status.get("startTime"), status.get("completionTime"))
        count = len(run["spec"]["checks"])
        if total is not None:
            print(f"    {run['metadata']['name']}: {total:.0f}s for {count} checks, ~{total / count:.1f}s per check")
    _say("per check: adapter start to every workload gone (1-second timestamps), against the scripts' run time")
    for line in await _overhead(admin, runs):
        print(f"    {line}")
    _say(f"demo finished in {time.monotonic() - began:.0f}s")
    print(f"    kubeconfig: {plane.admin_kubeconfig}")
    print(f"    try:        signalctl --help; signalctl get runs -n {NAMESPACE} --kubeconfig {plane.admin_kubeconfig}")
    return codes


def _quiet_infrastructure_logs(path: Path) -> None:
    """The local cluster's own components log to a file, so the demo's output is Signal's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=path.open("a", encoding="utf-8")))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="signalctl demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nodes", type=int, default=8, help="with --simulated: GPU Nodes to create (default 8, at least 4)"
    )
    parser.add_argument("--workdir", type=Path, help="keep the control plane's files here")
    parser.add_argument("--exit-after", type=float, help="stop this many seconds after the report, not on Ctrl-C")
    parser.add_argument("--timeout", type=float, default=900, help="give up on the certification after this long")
    parser.add_argument(
        "--simulated",
        action="store_true",
        help="simulated GPU Nodes and the process kubelet, the controller and portal as local processes "
        "(for a machine without root or containerd; Pod checks only: MPIJob checks need real nodes); "
        "default: real nodes with everything as Pods",
    )
    args = parser.parse_args(argv)
    if args.nodes < len(REQUESTED):
        parser.error(f"--nodes must be at least {len(REQUESTED)}")
    log_dir = args.workdir or Path(tempfile.gettempdir())
    _quiet_infrastructure_logs(log_dir / "signal-demo-localcluster.log")
    print(f"==> local cluster logs: {log_dir / 'signal-demo-localcluster.log'}", flush=True)
    try:
        return asyncio.run(run_demo(args.nodes, args.workdir, args.exit_after, args.timeout, not args.simulated))
    except Exception as exc:
        print(f"signalctl demo failed: {exc}", file=sys.stderr)
        return 1
