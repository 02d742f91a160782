"""``signalctl`` as an operator runs it: a subprocess with a kubeconfig, against the real API
server. Evidence is produced the way the acceptance corpus does it (tests/integration/
test_acceptance_corpus.py): a Run created as admin, check evidence from tests/evidence_builders.py,
then the controller's own acceptance (controller.reconcile.accept.accept) in-process."""

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controller.reconcile.accept import accept, check_evidence_name
from controller.reconcile.state import Context
from controller.rules.runview import run_view
from kubeio.client import Kube
from kubeio.errors import AlreadyExists
from localcluster import identities
from localcluster.binaries import kplane_binary
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import KubeClient, resource_path
from shared import keys
from signalctl import actions
from signalctl.kubectx import CommandError
from tests import evidence_builders as eb
from tests.controller_support import install_rbac, profile_body
from tests.run_builders import running_run, store, store_results, workflow_status

STARTED = "2026-11-30T00:00:00Z"

pytestmark = pytest.mark.asyncio(loop_scope="session")
API = keys.API_VERSION
SIGNALCTL = str(Path(sys.executable).parent / "signalctl")
Obj = dict[str, Any]


@pytest.fixture
async def ctx(cluster: LocalCluster, namespace: str, admin: KubeClient) -> AsyncIterator[Context]:
    await install_rbac(admin, namespace)
    kube = Kube(identities.admin(cluster.plane).endpoint(), field_manager="signal-controller")
    yield Context(kube, namespace, "signalctl-test")
    await kube.close()


@pytest.fixture
def kubeconfig(cluster: LocalCluster, tmp_path: Path) -> Path:
    return identities.admin(cluster.plane).kubeconfig(tmp_path / "admin.kubeconfig")


async def signalctl(kubeconfig: Path, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        SIGNALCTL,
        *args,
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _nodes(cluster: LocalCluster, prefix: str, count: int = 2) -> list[Obj]:
    return await cluster.add_nodes([SimNode(f"{prefix}-{i}") for i in range(count)])


async def _finished(ctx: Context, admin: KubeClient, cluster: LocalCluster, profile: str, checks: int = 2) -> Obj:
    """A Run whose checks all passed, accepted by the controller's code."""
    nodes = await _nodes(cluster, f"{ctx.namespace}-{profile}")
    # The profile holds Signal's authoritative record of the results (status.certifiedNodes).
    with contextlib.suppress(AlreadyExists):
        await admin.create(resource_path(API, keys.PROFILE_PLURAL), profile_body(profile, ctx.namespace, 2))
    run = await running_run(admin, ctx.namespace, nodes, profile, checks, started=STARTED)
    digests = {}
    for index in range(checks):
        document = eb.check_evidence(run, index)
        digests[index] = eb.digest_of(document)
        name = check_evidence_name(run["metadata"]["name"], index)
        await store_results(admin, ctx.namespace, run, document)
        await store(admin, ctx.namespace, name, eb.config_map(name, document))
    await accept(ctx, run_view(run), workflow_status(run, digests), deadline_passed=False)
    return await admin.get(resource_path(API, keys.RUN_PLURAL, ctx.namespace, run["metadata"]["name"]))


def _lines(out: str, state: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(state)]


async def test_verify_passes_then_catches_a_replaced_and_a_missing_check(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, kubeconfig: Path
) -> None:
    run = await _finished(ctx, admin, cluster, "vfy")
    name, ns = run["metadata"]["name"], ctx.namespace
    assert run["status"]["phase"] == "Succeeded"
    rc, out, err = await signalctl(kubeconfig, "evidence", "verify", name, "-n", ns)
    assert rc == 0, out + err
    assert not _lines(out, "MISMATCH"), out
    assert not _lines(out, "MISSING"), out
    assert "OK        Run evidence digest" in out
    assert "check 1 check-1 verdict: Pass" in out
    assert "Run decision: Succeeded (AllChecksPassed) follows from the recorded checks" in out
    assert out.strip().endswith("evidence verified")

    # ConfigMaps are immutable: an attacker deletes check 1's evidence and creates a forged one.
    cm = check_evidence_name(name, 1)
    await admin.delete(resource_path("v1", "configmaps", ns, cm))
    forged = eb.check_evidence(run, 1, verdicts={0: "Fail"})
    await store(admin, ns, cm, eb.config_map(cm, forged))
    rc, out, err = await signalctl(kubeconfig, "evidence", "verify", name, "-n", ns)
    assert rc == 1, out + err
    mismatched = _lines(out, "MISMATCH")
    assert any("check 1 check-1 evidence" in line for line in mismatched), out
    assert any("check 1 check-1 results" in line for line in mismatched), out  # its results link
    assert any("check 1 check-1 verdict" in line and "re-validation gives Fail" in line for line in mismatched), out
    assert "check 0 check-0 evidence: ConfigMap" in out
    assert "DOES NOT VERIFY" in out

    await admin.delete(resource_path("v1", "configmaps", ns, check_evidence_name(name, 0)))
    rc, out, err = await signalctl(kubeconfig, "evidence", "verify", name, "-n", ns)
    assert rc == 2, out + err
    assert any("check 0 check-0 evidence" in line and "not found" in line for line in _lines(out, "MISSING")), out


CORPUS = ["failing-participant", "other-run-uid", "cleanup-failed-but-pass", "missing-evidence", "truncated-gzip"]


@pytest.mark.parametrize("case", [*CORPUS, "digest-reported-differently", "workflow-failed", "node-replaced"])
async def test_verify_agrees_with_every_recorded_decision(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, kubeconfig: Path, case: str
) -> None:
    """Negative outcomes verify too: verify checks the record, not that the Run passed."""
    nodes = await _nodes(cluster, f"{ctx.namespace}-{case[:12]}")
    run = await running_run(admin, ctx.namespace, nodes, "corpus", started=STARTED)
    valid = eb.check_evidence(run)
    name = check_evidence_name(run["metadata"]["name"], 0)
    reported, phase, stored = eb.digest_of(valid), "Succeeded", eb.config_map(name, valid)
    results = valid
    if case == "failing-participant":
        results = eb.check_evidence(run, verdicts={1: "Fail"})
        stored, reported = eb.config_map(name, results), eb.digest_of(results)
    elif case in eb.DOCUMENT_MUTATIONS:
        bad = results = eb.DOCUMENT_MUTATIONS[case](valid)
        stored, reported = eb.config_map(name, bad, owner=run), eb.digest_of(bad)
    elif case == "truncated-gzip":
        stored = eb.config_map(name, None, raw=eb.truncated_gzip(valid), owner=run)
    elif case == "digest-reported-differently":
        reported = eb.digest_of(eb.check_evidence(run, verdicts={1: "Fail"}))
    elif case == "workflow-failed":
        phase = "Failed"
    if case != "missing-evidence":
        await store_results(admin, ctx.namespace, run, results)
        await store(admin, ctx.namespace, name, stored)
    if case == "node-replaced":
        await cluster.remove_node(nodes[1]["metadata"]["name"])
        await cluster.add_nodes([SimNode(nodes[1]["metadata"]["name"])])
    await accept(ctx, run_view(run), workflow_status(run, {0: reported}, phase), deadline_passed=False)
    done = await admin.get(resource_path(API, keys.RUN_PLURAL, ctx.namespace, run["metadata"]["name"]))
    assert done["status"]["phase"] in {"Failed", "Inconclusive"}, done["status"]
    rc, out, err = await signalctl(kubeconfig, "evidence", "verify", run["metadata"]["name"], "-n", ctx.namespace)
    assert rc == 0, f"{done['status']}\n{out}{err}"
    assert f"Run decision: {done['status']['phase']} ({done['status']['reason']})" in out


async def test_get_and_describe_show_phase_verdicts_and_nodes(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, kubeconfig: Path
) -> None:
    run = await _finished(ctx, admin, cluster, "show")
    name, ns = run["metadata"]["name"], ctx.namespace
    rc, out, err = await signalctl(kubeconfig, "get", "runs", "-n", ns)
    assert rc == 0, err
    header, row = out.splitlines()[0].split(), next(line for line in out.splitlines() if line.startswith(name))
    assert header == ["NAME", "PROFILE", "PHASE", "REASON", "NODES", "CHECKS", "AGE"]
    assert row.split()[1:4] == ["show", "Succeeded", "AllChecksPassed"]
    assert "2/2 passed" in row
    ordered = [p["nodeName"] for p in sorted(run["spec"]["participants"], key=lambda p: p["index"])]
    assert ",".join(ordered) in row
    assert sorted(ordered) == [f"{ns}-show-0", f"{ns}-show-1"]
    rc, out, _ = await signalctl(kubeconfig, "get", "runs", "-A", "--profile", "show")
    assert rc == 0
    assert out.splitlines()[0].split()[0] == "NAMESPACE"
    assert any(line.split()[:2] == [ns, name] for line in out.splitlines()[1:])
    rc, out, err = await signalctl(kubeconfig, "get", "runs", "-n", ns, "--profile", "nothing-like-it")
    assert rc == 0
    assert out == ""  # like kubectl: nothing found is said on stderr, so that scripts read nothing
    assert "No Runs of profile nothing-like-it found" in err

    rc, out, err = await signalctl(kubeconfig, "describe", "run", name, "-n", ns)
    assert rc == 0, err
    assert "Phase:            Succeeded" in out
    assert "Reason:           AllChecksPassed" in out
    assert f"ConfigMap:        {run['status']['evidence']['configMap']}" in out
    assert run["status"]["evidence"]["digest"] in out
    assert "EvidencePersisted" in out
    checks = out.split("Checks:")[1].split("Participants:")[0]
    assert [line.split()[1::3] for line in checks.strip().splitlines()[1:]] == [
        ["check-0", "Pass"],
        ["check-1", "Pass"],
    ]
    participants = out.split("Participants:")[1].split("Events:")[0]
    for p in run["spec"]["participants"]:
        assert any(
            line.split() == [str(p["index"]), p["nodeName"], p["nodeUID"], "Pass"] for line in participants.splitlines()
        ), participants
    events = out.split("Events:")[1]
    assert "RunSucceeded" in events
    assert "AllChecksPassed" in events


async def test_errors_say_what_failed_and_what_to_do(cluster: LocalCluster, namespace: str, tmp_path: Path) -> None:
    kubeconfig = identities.admin(cluster.plane).kubeconfig(tmp_path / "admin")
    rc, _, err = await signalctl(kubeconfig, "describe", "run", "nope", "-n", namespace)
    assert rc == 1
    assert f"Run {namespace}/nope not found; list Runs with `signalctl get runs -A`" in err
    rc, _, err = await signalctl(kubeconfig, "evidence", "verify", "nope", "-n", namespace)
    assert rc == 2, err
    assert "not found" in err
    nobody = identities.user(cluster.plane, "carol").kubeconfig(tmp_path / "carol")
    rc, _, err = await signalctl(nobody, "get", "runs", "-n", namespace)
    assert rc == 1
    assert f"not allowed to list Runs in namespace {namespace}" in err
    assert "RBAC" in err


async def test_request_labels_nodes_and_refuses_reserved_ones(
    cluster: LocalCluster, admin: KubeClient, namespace: str, kubeconfig: Path
) -> None:
    profile = f"p-{namespace}"
    await admin.create(resource_path(API, keys.PROFILE_PLURAL), profile_body(profile, namespace, 2))
    try:
        free, held = [n["metadata"]["name"] for n in await _nodes(cluster, f"{namespace}-rq")]
        reservation = json.dumps({"run": "holder", "namespace": namespace, "uid": "u-1", "index": 0, "request": ""})
        await admin.merge_patch(
            resource_path("v1", "nodes", name=held),
            {
                "metadata": {
                    "labels": {keys.RESERVED_BY_LABEL: "u-1"},
                    "annotations": {keys.RESERVATION_ANNOTATION: reservation},
                }
            },
        )
        rc, out, err = await signalctl(kubeconfig, "request", profile, free, held, "-n", namespace)
        assert rc == 1, out + err
        assert f"Node {held} is reserved by Run {namespace}/holder (uid u-1)" in err
        assert "--force" in err
        for name in (free, held):
            labels = (await admin.get(resource_path("v1", "nodes", name=name)))["metadata"].get("labels") or {}
            assert keys.CERTIFY_LABEL not in labels, "a refused request labels no Node"

        rc, out, err = await signalctl(kubeconfig, "request", profile, free, "-n", namespace)
        assert rc == 0, err
        assert f"Node {free}: requested for certification by {profile}" in out
        rc, out, err = await signalctl(kubeconfig, "request", profile, held, "--force", "-n", namespace)
        assert rc == 0, err
        for name in (free, held):
            labels = (await admin.get(resource_path("v1", "nodes", name=name)))["metadata"]["labels"]
            assert labels[keys.CERTIFY_LABEL] == profile

        rc, _, err = await signalctl(kubeconfig, "request", profile, f"{namespace}-absent", "-n", namespace)
        assert rc == 1
        assert f"Node {namespace}-absent not found" in err
        rc, _, err = await signalctl(kubeconfig, "request", f"{profile}-x", free, "-n", namespace)
        assert rc == 1
        assert f"CertificationProfile {profile}-x not found" in err
    finally:
        await admin.delete(resource_path(API, keys.PROFILE_PLURAL, name=profile))


async def _line_with(stream: asyncio.StreamReader, text: str, seen: list[str], timeout: float = 30) -> str:
    """Read lines until one contains ``text`` (all lines read go to ``seen``)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, f"no line with {text!r} within {timeout}s; got:\n" + "\n".join(seen)
        line = (await asyncio.wait_for(stream.readline(), left)).decode()
        assert line, f"output ended before a line with {text!r}:\n" + "\n".join(seen)
        seen.append(line.rstrip())
        if text in line:
            return line


@contextlib.asynccontextmanager
async def _request_waiting(
    cluster: LocalCluster, admin: KubeClient, kubeconfig: Path, namespace: str, profile: str, timeout: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[Obj], list[str]]]:
    """A profile ``profile`` of two Nodes and two new Nodes, and `signalctl request PROFILE NODE...
    --wait` running over them, once it has said the Nodes are requested. Yields the process, the
    Nodes and the lines it printed so far; on the way out the process is killed if still running
    and the profile deleted."""
    await admin.create(resource_path(API, keys.PROFILE_PLURAL), profile_body(profile, namespace, 2))
    process = None
    try:
        nodes = await _nodes(cluster, f"{profile}-n", 2)
        process = await asyncio.create_subprocess_exec(
            SIGNALCTL,
            *("request", profile, *(n["metadata"]["name"] for n in nodes), "--wait", "--timeout", timeout),
            *("-n", namespace, "--kubeconfig", str(kubeconfig)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        seen: list[str] = []
        await _line_with(process.stdout, "requested for certification", seen)
        yield process, nodes, seen
    finally:
        if process is not None and process.returncode is None:
            process.kill()
            await process.communicate()
        await admin.delete(resource_path(API, keys.PROFILE_PLURAL, name=profile))


async def test_request_wait_follows_each_check_node_by_node_to_the_end(
    cluster: LocalCluster, admin: KubeClient, namespace: str, kubeconfig: Path
) -> None:
    """The progress display: admission, each check advancing (Nodes done / total: a backend Pod
    really ran and ended on each Node under the process kubelet), its verdict as its evidence
    lands, and the Run's end."""
    profile = f"w-{namespace}"
    async with _request_waiting(cluster, admin, kubeconfig, namespace, profile, "90s") as (process, nodes, seen):
        assert process.stdout is not None
        names = [n["metadata"]["name"] for n in nodes]
        # Stand in for the controller and the adapter: admit the Nodes into a Run, run one
        # backend Pod per Node (really, under the process kubelet), store the evidence, finish.
        run = await running_run(admin, namespace, nodes, profile, started=STARTED)
        name = run["metadata"]["name"]
        await _line_with(process.stdout, f"admitted into Run {name} as participant 1", seen)
        labels = {
            keys.RUN_UID_LABEL: run["metadata"]["uid"],
            keys.CHECK_LABEL: "check-0",
            keys.COMPONENT_LABEL: "backend",
        }
        for index, node in enumerate(names):
            script = "exit 0" if index == 0 else "sleep 300"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"backend-{index}", "labels": {**labels, keys.PARTICIPANT_LABEL: str(index)}},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "check", "image": "busybox", "command": ["sh", "-c", script]}],
                },
            }
            await admin.create(resource_path("v1", "pods", namespace), pod)
        await _line_with(process.stdout, f"Run {name}: check 1/1 check-0 (Pod): 1/2 Nodes done", seen)
        await admin.delete(resource_path("v1", "pods", namespace, "backend-1"), {"gracePeriodSeconds": 0})
        evidence = check_evidence_name(name, 0)
        await store(admin, namespace, evidence, eb.config_map(evidence, eb.check_evidence(run, 0)))
        line = await _line_with(process.stdout, f"Run {name}: check 1/1 check-0 (Pod): Pass", seen)
        assert f"[{names[0]} Pass, {names[1]} Pass] evidence sha256:" in line
        status_path = resource_path(API, keys.RUN_PLURAL, namespace, name, "status")
        await admin.merge_patch(
            status_path, {"status": {"phase": "Succeeded", "reason": "AllChecksPassed", "message": "ok"}}
        )
        rest, err = await asyncio.wait_for(process.communicate(), 30)
        out = "\n".join(seen) + "\n" + rest.decode()
        assert process.returncode == 0, out + err.decode()
        assert f"Node {names[0]}: admitted into Run {name} as participant 0" in out
        assert f"Run {namespace}/{name}: Succeeded (AllChecksPassed: ok)" in out
        assert out.index("1/2 Nodes done") < out.index("check-0 (Pod): Pass") < out.index("Succeeded (")


async def test_describe_node_shows_every_projection_the_run_and_evidence_and_whether_current(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, kubeconfig: Path
) -> None:
    run = await _finished(ctx, admin, cluster, "dn")
    ns, name = ctx.namespace, run["metadata"]["name"]
    node = run["spec"]["participants"][0]["nodeName"]
    profile = f"dn-{ns}"
    body = profile_body(profile, ns, 2, digest=run["spec"]["source"]["digest"])
    # The Run's profile ("dn", created by _finished) as registered for this Run's suite, and another
    # profile that never certified the Node.
    await admin.merge_patch(resource_path(API, keys.PROFILE_PLURAL, name="dn"), {"spec": body["spec"]})
    await admin.create(resource_path(API, keys.PROFILE_PLURAL), body)
    try:
        rc, out, err = await signalctl(kubeconfig, "describe", "node", node)
        assert rc == 0, out + err
        section = out.split("Profile dn:")[1].split("Profile ")[0]
        assert "Result:         Pass" in section
        assert f"Run:            {ns}/{name} (uid {run['metadata']['uid']})" in section
        assert "Run phase:      Succeeded (AllChecksPassed)" in section
        assert "check-0=Pass, check-1=Pass" in section
        assert f"{run['status']['evidence']['digest']} (re-verified" in section
        assert "Current:        yes" in section
        assert f"Profile {profile}:\n  <never certified by this profile>" in out
        summary = out.split("Summary:")[1]
        assert any(line.split() == ["dn", "Pass", "yes", name] for line in summary.splitlines()), summary

        # The evidence is replaced by a forgery: the projection is no longer current.
        cm = check_evidence_name(name, 1)
        await admin.delete(resource_path("v1", "configmaps", ns, cm))
        await store(admin, ns, cm, eb.config_map(cm, eb.check_evidence(run, 1, verdicts={0: "Fail"})))
        rc, out, err = await signalctl(kubeconfig, "describe", "node", node)
        assert rc == 0, out + err
        section = out.split("Profile dn:")[1].split("Profile ")[0]
        assert "Current:        NO" in section
        assert "- evidence: MISMATCH check 1 check-1" in section

        # The profile's suite changes: not current either, and it says why.
        await admin.merge_patch(
            resource_path(API, keys.PROFILE_PLURAL, name="dn"), {"spec": {"source": {"digest": "sha256:" + "0" * 64}}}
        )
        rc, out, _ = await signalctl(kubeconfig, "describe", "node", node)
        assert "the profile's suite changed since" in out

        rc, out, err = await signalctl(kubeconfig, "describe", "node", "no-such-node")
        assert rc == 1
        assert "Node no-such-node not found; list Nodes with `kubectl get nodes`" in err
    finally:
        for name_ in ("dn", profile):
            await admin.delete(resource_path(API, keys.PROFILE_PLURAL, name=name_))


async def test_signalctl_is_a_kubectl_plugin(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, kubeconfig: Path
) -> None:
    """`kubectl signal ...` with the local control plane's real kubectl finds `kubectl-signal`
    (installed by pyproject.toml) on the PATH and gives what `signalctl` gives."""
    run = await _finished(ctx, admin, cluster, "plug")
    ns = ctx.namespace
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    process = await asyncio.create_subprocess_exec(
        str(kplane_binary()),
        *("kubectl", "signal", "get", "runs", "-n", ns, "--kubeconfig", str(kubeconfig)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    _, direct, _ = await signalctl(kubeconfig, "get", "runs", "-n", ns)
    assert out.decode().split()[:12] == direct.split()[:12]
    assert run["metadata"]["name"] in out.decode()
    process = await asyncio.create_subprocess_exec(
        str(kplane_binary()), "kubectl", "signal", "--help", stdout=asyncio.subprocess.PIPE, env=env
    )
    usage, _ = await asyncio.wait_for(process.communicate(), 60)
    assert usage.decode().startswith("usage: kubectl signal COMMAND")


async def test_release_refuses_a_running_run_and_cancel_sets_the_flag(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, kubeconfig: Path
) -> None:
    ns = ctx.namespace
    nodes = await _nodes(cluster, f"{ns}-rel")
    run = await running_run(admin, ns, nodes, "rel", started=STARTED)
    name = run["metadata"]["name"]
    path = resource_path(API, keys.RUN_PLURAL, ns, name)
    rc, out, err = await signalctl(kubeconfig, "release", name, "-n", ns)
    assert rc == 1, out
    assert f"Run {ns}/{name} is Running, not finished" in err
    assert f"signalctl cancel {name} --wait" in err
    assert not (await admin.get(path))["spec"].get("release")

    rc, out, err = await signalctl(kubeconfig, "cancel", name, "-n", ns)
    assert rc == 0, err
    assert "cancel requested" in out
    assert (await admin.get(path))["spec"]["cancel"] is True

    await admin.merge_patch(f"{path}/status", {"status": {"phase": "Canceled", "reason": "Canceled"}})
    rc, out, err = await signalctl(kubeconfig, "release", name, "-n", ns)
    assert rc == 0, err
    assert "release requested" in out
    assert (await admin.get(path))["spec"]["release"] is True
    rc, out, _ = await signalctl(kubeconfig, "cancel", name, "-n", ns)
    assert rc == 0
    assert "already ended Canceled; nothing to cancel" in out


class _ReplacedAfterRead:
    """The operator's client while someone deletes the Run and creates another under its name
    between signalctl's read of it and its write (as a rolled-back admission's name is taken
    again): the read returns the Run as it was, then the replacement happens."""

    def __init__(self, kube: Kube, path: str, replace: Any) -> None:
        self.kube, self.path, self.replace, self.replaced = kube, path, replace, False

    async def get(self, path: str, **query: str) -> Obj:
        answer = await self.kube.get(path, **query)
        if path == self.path and not self.replaced:
            self.replaced = True
            await self.replace()
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


@pytest.mark.parametrize(("command", "first_phase"), [("cancel", "Running"), ("release", "Failed")])
async def test_cancel_and_release_act_only_on_the_run_they_read(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, command: str, first_phase: str
) -> None:
    """`cancel` and `release` patched spec by name alone: a Run replaced under the same name
    between the read and the write was canceled, or released (its Nodes given back unreviewed)."""
    ns = ctx.namespace
    nodes = await _nodes(cluster, f"{ns}-{command[:3]}x")
    run = await running_run(admin, ns, nodes, "swap", started=STARTED)
    name = run["metadata"]["name"]
    path = resource_path(API, keys.RUN_PLURAL, ns, name)
    await admin.merge_patch(f"{path}/status", {"status": {"phase": first_phase}})
    body = {k: run[k] for k in ("apiVersion", "kind", "spec")}
    body["metadata"] = {k: run["metadata"][k] for k in ("name", "namespace", "labels")}

    async def replace() -> None:
        await admin.delete(path)
        await admin.create(resource_path(API, keys.RUN_PLURAL, ns), body)
        await admin.merge_patch(f"{path}/status", {"status": {"phase": first_phase}})

    client = _ReplacedAfterRead(ctx.kube, path, replace)
    args = argparse.Namespace(namespace=ns, name=name, wait=False)
    handler = actions.cmd_cancel if command == "cancel" else actions.cmd_release
    with pytest.raises(CommandError) as raised:
        await handler(client, args)  # type: ignore[arg-type]
    assert "changed meanwhile" in raised.value.message
    assert f"(uid {run['metadata']['uid']})" in raised.value.message
    replacement = await admin.get(path)
    assert replacement["metadata"]["uid"] != run["metadata"]["uid"]
    assert not replacement["spec"].get(command), f"the replacement Run got spec.{command}"


@pytest.mark.parametrize(
    "detail",
    [
        {"verdict": "Pass", "run": 5, "namespace": "signal-system"},
        {"verdict": "Pass", "run": "r", "namespace": ["signal-system"]},
        {"verdict": "Pass", "completionTime": "yesterday"},
        {"verdict": "Pass", "completionTime": "2026-11-30T00:00:00"},
    ],
    ids=["run-a-number", "namespace-a-list", "time-not-a-time", "time-without-offset"],
)
async def test_describe_node_reports_a_detail_the_node_garbled_instead_of_a_traceback(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, kubeconfig: Path, detail: Obj
) -> None:
    """The detail annotation is the Node's kubelet's to write: its values were used as they came,
    as a path to look the Run up by and as times, and `describe node` ended in a traceback."""
    node = (await _nodes(cluster, f"{ctx.namespace}-garb", 1))[0]["metadata"]["name"]
    profile = "garbled"
    label = keys.certified_label(profile)
    await admin.merge_patch(
        resource_path("v1", "nodes", name=node),
        {"metadata": {"labels": {label: "Pass"}, "annotations": {label: json.dumps(detail)}}},
    )
    rc, out, err = await signalctl(kubeconfig, "describe", "node", node)
    assert "Traceback" not in err, err
    assert rc == 0, out + err
    section = out.split(f"Profile {profile}:")[1]
    assert "Current:        NO" in section


async def test_request_wait_never_counts_a_run_of_another_profile(
    cluster: LocalCluster, admin: KubeClient, namespace: str, kubeconfig: Path
) -> None:
    """`request P NODE --wait` took any new Run that held the Nodes for the one certifying them by
    P: a Run of another profile (its request replaced this one, or its admission read the Nodes
    just before this request) that succeeded made it exit 0, though P certified nothing."""
    profile = f"mine-{namespace}"
    async with _request_waiting(cluster, admin, kubeconfig, namespace, profile, "6s") as (process, nodes, seen):
        other = await running_run(admin, namespace, nodes, f"other-{namespace}", started=STARTED)
        await admin.merge_patch(
            resource_path(API, keys.RUN_PLURAL, namespace, other["metadata"]["name"], "status"),
            {"status": {"phase": "Succeeded", "reason": "AllChecksPassed", "message": "ok"}},
        )
        rest, err = await asyncio.wait_for(process.communicate(), 30)
        out = "\n".join(seen) + "\n" + rest.decode()
        assert process.returncode == 1, out + err.decode()
        assert f"admitted into Run {other['metadata']['name']} as participant" not in out
        assert f"of profile other-{namespace}, not {profile}" in out
        assert "timed out" in err.decode()


async def test_describe_node_escapes_what_the_node_and_events_wrote(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, kubeconfig: Path
) -> None:
    """Issue 42, Low: a Node's annotations are its kubelet's to write (and Events, which
    `describe run` prints, anyone's with Event rights); `describe node` printed their terminal
    escape sequences raw (a clear screen, an OSC 52 clipboard write). Everything signalctl prints
    goes through signalctl/terminal.py, which shows them as visible escapes."""
    node = (await _nodes(cluster, f"{ctx.namespace}-esc", 1))[0]["metadata"]["name"]
    profile = "escapes"
    label = keys.certified_label(profile)
    detail = {"verdict": "Pass", "run": "r\x1b[2J", "namespace": ctx.namespace, "runUID": "u\x1b]52;c;eA==\x07"}
    await admin.merge_patch(
        resource_path("v1", "nodes", name=node),
        {"metadata": {"labels": {label: "Pass"}, "annotations": {label: json.dumps(detail)}}},
    )
    rc, out, err = await signalctl(kubeconfig, "describe", "node", node)
    assert rc == 0, out + err
    assert "\x1b" not in out + err, repr(out)
    assert "\x07" not in out + err, repr(out)
    assert "\\x1b[2J" in out, out
