"""Benchmark (issue 15, goal 5, first half): the per-check overhead of a whole certification, with
the real controller as its ServiceAccount, the real Argo workflow-controller running the adapter
WorkflowTemplate from deploy/, the real adapter and runner on simulated Nodes.

One profile of ``--checks`` Pod checks whose script takes ``--script-seconds``, one group
requested; the Run followed from its create to its end:

    per-check overhead = (Run Succeeded - Run created - the scripts' own time) / checks

where a check's script time is its longest participant's runner time (the runner's own
``startedAt``/``finishedAt`` in the evidence, milliseconds). The Run's create and the Workflow's
create are read from the controller's request log (goal 7: the window opens there); the end is
the moment the bench, polling the Run every 20 ms, first sees it Succeeded with every check's
verdict (the controller writes the verdicts once, when it accepts the Run's evidence).

Where the seconds go, per check, from the evidence's millisecond timestamps (printed as a table):
``step``: the previous check's workloads proven gone (or, for the first, the Run's create) ->
this check's adapter start (the check evidence written, the adapter exits, Argo starts the next
step Pod, the adapter process starts and checks its inputs and policies; the first also holds
the admission's writes and the Workflow's create); ``start``: -> the first runner started (the
Pods created, the kubelet starts them); ``script``; ``notice``: the last runner finished -> the
results collected; ``quiesce``: -> every workload proven gone (results persisted, Pods deleted).
Then once, ``accept``: the last check's workloads gone -> the Run Succeeded (its check evidence,
the adapter's exit, Argo ending the Workflow, the controller verifying the evidence, recording
and projecting it).

The step floor (bench/floors.py) is a bare one-step Argo Workflow that starts one trivial Pod
on a simulated Node and waits for it, with the same Argo, executor and kubelet. Growth (goal 8):
the same at 1/``--factor`` of the participants.

    .venv/bin/python bench/check_overhead.py [--checks 3] [--participants 4] [--factor 4]
"""

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.floors import growth, row, step_floor
from bench.polling import POLL
from bench.requestlog import RequestLog
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from shared.digests import bundle_digest
from shared.evidence import decode_document
from shared.runevidence import RUN_EVIDENCE_SCHEMAS, config_map_names, materialize
from tests.controller_support import ControllerProcess, World, install_rbac, profile_body
from tests.realnode_support import install_workflow_template

TERMINAL = {"Succeeded", "Failed", "Inconclusive", "Canceled"}
PHASES = ("step", "start", "script", "notice", "quiesce")


def _at(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class CheckTimes:
    """One check's moments (``time.time()`` seconds)."""

    begun: float
    """The previous check's workloads proven gone, or the Run's create for the first check."""
    adapter_started: float
    runner_started: float
    runner_finished: float
    script: float
    """The longest participant's runner time."""
    collected: float
    quiesced: float

    def phases(self) -> dict[str, float]:
        return {
            "step": self.adapter_started - self.begun,
            "start": self.runner_started - self.adapter_started,
            "script": self.script,
            "notice": self.collected - self.runner_finished,
            "quiesce": self.quiesced - self.collected,
        }


def check_times(document: Obj, created: float) -> list[CheckTimes]:
    """Each check's moments from the Run evidence document."""
    found: list[CheckTimes] = []
    for check in sorted(document["checks"], key=lambda c: c["index"]):
        results = check["evidence"]["results"]
        runs = [(_at(p["startedAt"]), _at(p["finishedAt"])) for p in results["participants"]]
        found.append(
            CheckTimes(
                begun=found[-1].quiesced if found else created,
                adapter_started=_at(results["startedAt"]),
                runner_started=min(s for s, _ in runs),
                runner_finished=max(f for _, f in runs),
                script=max(f - s for s, f in runs),
                collected=_at(results["collectedAt"]),
                quiesced=_at(check["evidence"]["cleanup"]["finishedAt"]),
            )
        )
    return found


def checks_of(count: int, script_key: str) -> list[Obj]:
    return [
        {"name": f"check-{i}", "scriptKey": script_key, "backend": "Pod", "gpuCount": 1, "backendActiveDeadline": "60s"}
        for i in range(count)
    ]


@dataclass
class Timeline:
    """What the bench saw while following the Run (``time.time()`` of the first sight)."""

    ended: float = 0.0
    workflow_succeeded: float = 0.0
    step_created: dict[str, float] = field(default_factory=dict)
    """Argo's step Pods (checks first, in order of creation)."""
    step_succeeded: dict[str, float] = field(default_factory=dict)

    def steps(self) -> list[tuple[float, float]]:
        """(created, Succeeded) of each step Pod, in order of creation."""
        order = sorted(self.step_created, key=self.step_created.__getitem__)
        return [(self.step_created[n], self.step_succeeded.get(n, 0.0)) for n in order]


async def follow(admin: KubeClient, namespace: str, name: str, timeout: float = 600.0) -> tuple[Obj, Timeline]:
    """Poll the Run, its Workflow and Argo's step Pods until the Run ends."""
    path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace, name)
    workflows = resource_path("argoproj.io/v1alpha1", "workflows", namespace)
    pods = resource_path("v1", "pods", namespace)
    seen = Timeline()
    deadline = time.monotonic() + timeout
    while True:
        run = await admin.get(path)
        status = run.get("status") or {}
        workflow = (status.get("workflow") or {}).get("name")
        steps = await admin.get(pods, labelSelector="workflows.argoproj.io/workflow")
        now = time.time()
        for pod in steps["items"]:
            pod_name = pod["metadata"]["name"]
            seen.step_created.setdefault(pod_name, now)
            if (pod.get("status") or {}).get("phase") == "Succeeded":
                seen.step_succeeded.setdefault(pod_name, now)
        if workflow and not seen.workflow_succeeded:
            found = await admin.get(f"{workflows}/{workflow}")
            if (found.get("status") or {}).get("phase") == "Succeeded":
                seen.workflow_succeeded = time.time()
        if status.get("phase") in TERMINAL:
            seen.ended = time.time()
            return run, seen
        if time.monotonic() > deadline:
            raise TimeoutError(f"Run {path} did not end within {timeout}s: {status}")
        await asyncio.sleep(POLL)


async def run(cluster: LocalCluster, checks: int, participants: int, seconds: float, tag: str) -> dict[str, Any]:
    namespace = f"bench-checks-{tag}"
    await cluster.create_namespace(namespace)
    scripts = {"work.sh": f"#!/bin/sh\nsleep {seconds}\n"}
    world = World(cluster, cluster.admin, namespace)
    await world.setup(scripts=scripts)
    await install_rbac(cluster.admin, namespace, "adapter-rbac.yaml")
    await install_workflow_template(cluster.admin, namespace)
    profile = f"{namespace}-p"
    names = world.node_names(participants)
    await world.add_nodes(names, requested_for=None)
    body = profile_body(
        profile, namespace, participants, digest=bundle_digest(scripts, {}), checks=checks_of(checks, "work.sh")
    )
    await world.add_profile(body)
    workdir = Path(tempfile.mkdtemp(prefix=f"signal-bench-checks-{tag}-"))
    log = RequestLog(workdir / "requests.tsv")
    controller = ControllerProcess(
        cluster, namespace, workdir, resync=300, workflow_instance_id=cluster.workflow_instance_id
    )
    await controller.start(SIGNAL_REQUEST_LOG=str(log.path))
    try:
        await world.request(profile, names)
        runs_path = resource_path(keys.API_VERSION, keys.RUN_PLURAL, namespace)
        deadline = time.monotonic() + 120
        while not (items := (await cluster.admin.get(runs_path))["items"]):
            if time.monotonic() > deadline:
                raise SystemExit(f"no Run admitted for {profile} within 120 s:\n{controller.logs()}")
            await asyncio.sleep(POLL)
        name = items[0]["metadata"]["name"]
        final, seen = await follow(cluster.admin, namespace, name)
        ended = seen.ended
    finally:
        controller.stop()
    phase = final["status"]["phase"]
    verdicts = final["status"].get("checkVerdicts") or []
    if phase != "Succeeded" or len(verdicts) != checks:
        raise SystemExit(f"Run {namespace}/{name} ended {phase} with verdicts {verdicts}:\n{controller.logs()}")
    requests = log.read()
    created = next(r.at for r in requests if r.verb == "POST" and r.path.endswith(f"/{keys.RUN_PLURAL}"))
    submitted = next(r.at for r in requests if r.verb == "POST" and r.path.endswith("/workflows"))
    evidence = await cluster.admin.get(
        resource_path("v1", "configmaps", namespace, final["status"]["evidence"]["configMap"])
    )
    document, _ = decode_document(evidence, RUN_EVIDENCE_SCHEMAS)
    stored = {
        i: await cluster.admin.get(resource_path("v1", "configmaps", namespace, cm))
        for i, cm in config_map_names(final, document).items()
    }
    times = check_times(materialize(final, document, stored), created)
    total = ended - created
    scripts_total = sum(t.script for t in times)
    overhead = (total - scripts_total) / checks
    print(f"{participants} participant(s), {checks} checks of `sleep {seconds}`: Run {name} {phase}")
    print(f"Run created -> Succeeded {total:.3f}s, scripts {scripts_total:.3f}s, per-check overhead {overhead:.3f}s")
    print(f"Run created -> Workflow created (admission's writes) {submitted - created:.3f}s")
    print("check      " + "".join(f"{p:>9}" for p in PHASES) + "    (seconds)")
    for i, t in enumerate(times):
        print(f"check-{i:<4}" + "".join(f"{v:9.3f}" for v in t.phases().values()))
    mean = {p: sum(t.phases()[p] for t in times) / checks for p in PHASES}
    print("mean      " + "".join(f"{mean[p]:9.3f}" for p in PHASES))
    accept = ended - times[-1].quiesced
    print(
        f"accept (the last check's workloads gone -> the Run Succeeded): {accept:.3f}s, of which "
        f"-> the Workflow Succeeded {seen.workflow_succeeded - times[-1].quiesced:.3f}s, "
        f"-> the Run Succeeded {ended - seen.workflow_succeeded:.3f}s"
    )
    steps = seen.steps()
    for i, t in enumerate(times):
        if i < len(steps):
            created, succeeded = steps[i]
            after = f", -> step Pod Succeeded {succeeded - t.quiesced:6.3f}s" if succeeded else ""
            print(
                f"check-{i}: step Pod seen {created - t.begun:6.3f}s after the step began, "
                f"adapter started {t.adapter_started - created:6.3f}s after that{after} (the bench polls every {POLL}s)"
            )
    step = await step_floor(cluster, names[0], namespace, repeats=3)
    print(step.describe())
    await world.cleanup()
    shutil.rmtree(workdir, ignore_errors=True)  # kept when the run fails: its logs are named then
    return {"overhead": overhead, "step": step.best, "total": total}


async def main(checks: int, participants: int, factor: int, seconds: float) -> None:
    async with LocalCluster(heartbeat_seconds=24 * 3600) as cluster:
        small = await run(cluster, checks, max(1, participants // factor), seconds, "small")
        print()
        full = await run(cluster, checks, participants, seconds, "full")
        print()
    small_n = max(1, participants // factor)
    print(
        row(
            f"5 per-check overhead ({small_n} participant)",
            small["step"],
            small["overhead"],
            "s",
            "<= 1.3x the step floor",
        )
    )
    print(
        row(
            f"5 per-check overhead ({participants} participants)",
            full["step"],
            full["overhead"],
            "s",
            "<= 1.3x the step floor",
        )
    )
    print(growth("per-check overhead", small["overhead"], full["overhead"], participants // small_n, "s"))
    print(growth("Run created -> Succeeded", small["total"], full["total"], participants // small_n, "s"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=3)
    parser.add_argument("--participants", type=int, default=4)
    parser.add_argument("--factor", type=int, default=4, help="also run at 1/factor of the participants (growth)")
    parser.add_argument("--script-seconds", type=float, default=1.0, help="what each check's script sleeps")
    args = parser.parse_args()
    asyncio.run(main(args.checks, args.participants, args.factor, args.script_seconds))
