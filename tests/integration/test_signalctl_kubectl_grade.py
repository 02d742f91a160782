"""signalctl's kubectl-grade commands as an operator runs them (a subprocess with a kubeconfig)
against the real API server: ``get profiles``/``get nodes`` in every output form, ``request
--dry-run`` (the controller's own reasons, nothing written), ``source push`` (the controller's
source verification accepts what it made; pushing again changes nothing), ``version``, and a
merged ``$KUBECONFIG`` with ``--context``."""

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.reconcile.state import Context
from controller.rules.sources import verify_source
from kubeio.client import Kube
from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.fleet import SimNode
from localcluster.kube import KubeClient, resource_path
from shared import keys
from shared.profile import CertificationProfile
from shared.version import VERSION
from tests.controller_support import install_rbac, profile_body
from tests.integration.test_signalctl import SIGNALCTL, _finished, signalctl

pytestmark = pytest.mark.asyncio(loop_scope="session")
API = keys.API_VERSION
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


async def test_get_profiles_and_nodes_in_every_form(
    ctx: Context, cluster: LocalCluster, admin: KubeClient, kubeconfig: Path
) -> None:
    profile = f"fl-{ctx.namespace}"
    run = await _finished(ctx, admin, cluster, profile)
    nodes = sorted(p["nodeName"] for p in run["spec"]["participants"])
    try:
        rc, out, err = await signalctl(kubeconfig, "get", "profiles", profile)
        assert rc == 0, err
        header, row = out.splitlines()
        assert header.split() == ["NAME", "NODES", "CHECKS", "READY", "ADMISSIBLE", "ELIGIBLE", "CERTIFIED", "AGE"]
        assert row.split()[:3] == [profile, "2", "2"]
        assert row.split()[6] == "2"  # both Nodes passed, in Signal's record
        rc, out, _ = await signalctl(kubeconfig, "get", "profiles", "-o", "name")
        assert f"certificationprofile.projectsignal.dev/{profile}" in out.splitlines()
        rc, out, _ = await signalctl(kubeconfig, "get", "profiles", profile, "-o", "json")
        assert json.loads(out)["metadata"]["name"] == profile
        rc, out, _ = await signalctl(kubeconfig, "get", "profiles", "-o", "yaml")
        assert profile in [p["metadata"]["name"] for p in yaml.safe_load(out)["items"]]

        rc, out, err = await signalctl(kubeconfig, "get", "nodes", "--profile", profile, "--no-headers")
        assert rc == 0, err
        rows = {line.split()[0]: line.split() for line in out.splitlines()}
        for name in nodes:
            # Pass in Signal's record, but stale (see staleReasons below).
            assert rows[name][1:5] == [profile, "Pass", "stale", "-"], rows[name]
        assert not out.startswith("NODE")
        rc, out, _ = await signalctl(kubeconfig, "get", "nodes", nodes[0], "--profile", profile, "-o", "wide")
        header, row = out.splitlines()
        assert header.split()[6:] == ["RUN", "REQUESTED", "NODE-LABEL", "EVIDENCE"]
        assert row.split()[6] == f"{ctx.namespace}/{run['metadata']['name']}"
        assert row.split()[9] == run["status"]["evidence"]["digest"]
        rc, out, _ = await signalctl(kubeconfig, "get", "nodes", "--profile", profile, "-o", "json")
        items = {i["node"]: i for i in json.loads(out)["items"]}
        assert items[nodes[0]]["result"] == "Pass"
        assert items[nodes[0]]["fresh"] is False
        # The test's Run certified another suite than the profile's current source digest.
        assert any(r.startswith("the suite changed since") for r in items[nodes[0]]["staleReasons"])
        rc, out, _ = await signalctl(kubeconfig, "get", "nodes", "--profile", profile, "-o", "name")
        assert set(out.split()) >= {f"node/{n}" for n in nodes}

        rc, out, _ = await signalctl(kubeconfig, "get", "runs", "-n", ctx.namespace, "-o", "name")
        assert out.split() == [f"certificationrun.projectsignal.dev/{run['metadata']['name']}"]
        rc, out, _ = await signalctl(kubeconfig, "get", "runs", "-n", ctx.namespace, "-o", "wide", "--no-headers")
        assert out.split()[-3] == run["metadata"]["uid"]  # the wide columns: UID COMPLETED EVIDENCE
        assert out.split()[-1] == run["status"]["evidence"]["digest"]
        rc, out, _ = await signalctl(
            kubeconfig, "describe", "run", run["metadata"]["name"], "-n", ctx.namespace, "-o", "json"
        )
        assert json.loads(out)["metadata"]["uid"] == run["metadata"]["uid"]
        rc, out, _ = await signalctl(kubeconfig, "describe", "node", nodes[0], "-o", "yaml")
        described = yaml.safe_load(out)
        assert described["kind"] == "NodeCertification"
        mine = next(p for p in described["profiles"] if p["profile"] == profile)
        assert mine["result"] == "Pass"
        assert mine["current"] is False

        rc, _, err = await signalctl(kubeconfig, "get", "nodes", "--profile", f"{profile}-absent")
        assert rc == 1
        assert f"CertificationProfile {profile}-absent not found; list profiles with `signalctl get profiles`" in err
    finally:
        await admin.delete(resource_path(API, keys.PROFILE_PLURAL, name=profile))


async def test_request_dry_run_says_per_node_why_and_writes_nothing(
    cluster: LocalCluster, admin: KubeClient, namespace: str, kubeconfig: Path
) -> None:
    profile = f"dry-{namespace}"
    await admin.create(resource_path(API, keys.PROFILE_PLURAL), profile_body(profile, namespace, 2))
    try:
        added = await cluster.add_nodes(
            [
                SimNode(f"{namespace}-ok", labels={"pool": "gpu"}),
                SimNode(f"{namespace}-cpu", labels={"pool": "cpu"}),
                SimNode(f"{namespace}-few", labels={"pool": "gpu"}, rdma=0),
                SimNode(f"{namespace}-held", labels={"pool": "gpu"}),
            ]
        )
        ok, cpu, few, held = (n["metadata"]["name"] for n in added)
        held_uid = "u-holder"
        reservation = json.dumps({"run": "holder", "namespace": namespace, "uid": held_uid, "index": 0})
        await admin.merge_patch(
            resource_path("v1", "nodes", name=held),
            {
                "metadata": {
                    "labels": {keys.RESERVED_BY_LABEL: held_uid},
                    "annotations": {keys.RESERVATION_ANNOTATION: reservation},
                },
                "spec": {"taints": [{"key": keys.RESERVED_TAINT_KEY, "value": held_uid, "effect": "NoSchedule"}]},
            },
        )
        absent = f"{namespace}-absent"
        args = ("request", profile, ok, cpu, few, held, absent, "--dry-run", "-n", namespace)
        rc, out, err = await signalctl(kubeconfig, *args)
        assert rc == 0, err
        rows = {line.split()[0]: line.split(None, 2) for line in out.splitlines()[1:]}
        assert rows[ok][1:] == ["yes", "-"]
        assert rows[cpu][1:] == ["no", "selector does not match"]
        assert rows[few][1] == "no"
        assert rows[few][2].startswith("insufficient allocatable: rdma/ib")
        assert rows[held][1:] == ["no", "reserved by Run holder"]
        assert rows[absent][1:] == ["no", "not found; list Nodes with `kubectl get nodes`"]
        assert f"dry run: 1 of 5 Nodes eligible for {profile} (2 per Run); nothing was requested" in err
        rc, out, _ = await signalctl(kubeconfig, *args, "-o", "json")
        by_node = {i["node"]: i for i in json.loads(out)["items"]}
        assert by_node[held]["requestRefused"].startswith(f"Node {held} is reserved by Run {namespace}/holder")
        assert by_node[ok]["eligible"] is True
        rc, _, err = await signalctl(kubeconfig, "request", profile, ok, "-o", "json", "-n", namespace)
        assert rc == 1
        assert "-o and --no-headers apply to request --dry-run only" in err
        for name in (ok, cpu, few, held):
            labels = (await admin.get(resource_path("v1", "nodes", name=name)))["metadata"].get("labels") or {}
            assert keys.CERTIFY_LABEL not in labels, "a dry run labels no Node"
    finally:
        await admin.delete(resource_path(API, keys.PROFILE_PLURAL, name=profile))


async def _source_config_maps(admin: KubeClient, namespace: str, profile: str) -> list[Obj]:
    listing = await admin.get(
        resource_path("v1", "configmaps", namespace), labelSelector=f"{keys.PROFILE_LABEL}={profile}"
    )
    return list(listing.get("items", []))


async def test_source_push_makes_what_the_controller_verifies_and_is_idempotent(
    admin: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    profile = f"src-{namespace}"
    await admin.create(resource_path(API, keys.PROFILE_PLURAL), profile_body(profile, namespace, 2))
    try:
        scripts = tmp_path / "scripts"
        scripts.mkdir()
        (scripts / "inventory.sh").write_text("#!/bin/sh\nnvidia-smi -L\n")
        # Refused before anything is written: the profile's nccl check runs nccl.sh.
        rc, _, err = await signalctl(kubeconfig, "source", "push", str(scripts), "--profile", profile)
        assert rc == 1
        assert "has no file for nccl.sh (check nccl)" in err
        assert "Nothing was written" in err
        assert await _source_config_maps(admin, namespace, profile) == []

        (scripts / "nccl.sh").write_bytes(b"#!/bin/sh\nexec all_reduce_perf\n\xff")  # not UTF-8: binaryData
        rc, out, err = await signalctl(kubeconfig, "source", "push", str(scripts), "--profile", profile)
        assert rc == 0, err
        assert "created (immutable, sha256:" in out
        made = await _source_config_maps(admin, namespace, profile)
        assert len(made) == 1
        assert made[0]["immutable"] is True
        assert set(made[0]["binaryData"]) == {"nccl.sh"}
        patched = await admin.get(resource_path(API, keys.PROFILE_PLURAL, name=profile))
        assert patched["spec"]["source"]["name"] == made[0]["metadata"]["name"]
        # The controller's own verification of the source accepts it.
        check = verify_source(CertificationProfile.model_validate(patched), made[0])
        assert (check.ok, check.reason) == (True, "SourceVerified"), check.message
        assert check.digest == patched["spec"]["source"]["digest"]

        rc, out, err = await signalctl(kubeconfig, "source", "push", str(scripts), "--profile", profile)
        assert rc == 0, err
        assert "unchanged (already holds" in out
        assert f"CertificationProfile {profile} unchanged" in out
        again = await admin.get(resource_path(API, keys.PROFILE_PLURAL, name=profile))
        assert again["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
        assert len(await _source_config_maps(admin, namespace, profile)) == 1
    finally:
        await admin.delete(resource_path(API, keys.PROFILE_PLURAL, name=profile))


async def test_version_reads_the_controller_deployment(admin: KubeClient, namespace: str, kubeconfig: Path) -> None:
    rc, out, _ = await signalctl(kubeconfig, "version", "-n", namespace)
    assert rc == 1
    assert f"Client Version: {VERSION}" in out
    assert f"Deployment {namespace}/signal-controller not found" in out
    labels = {"app.kubernetes.io/component": "controller"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "signal-controller", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "controller", "image": "projectsignal.dev/controller:9.8.7"}]},
            },
        },
    }
    await admin.create(resource_path("apps/v1", "deployments", namespace), deployment)
    rc, out, err = await signalctl(kubeconfig, "version", "-n", namespace, "-o", "json")
    assert rc == 0, err
    answer = json.loads(out)
    assert answer["clientVersion"] == {"version": VERSION}
    assert answer["controllerVersion"]["version"] == "9.8.7"
    assert answer["controllerVersion"]["image"] == "projectsignal.dev/controller:9.8.7"


async def test_merged_kubeconfig_and_context(cluster: LocalCluster, tmp_path: Path) -> None:
    good = yaml.safe_load(identities.admin(cluster.plane).kubeconfig(tmp_path / "admin").read_text())
    # The first file: current-context "broken" (a server nothing listens on) and a cluster
    # named like the admin's ("local") that must win over it, so its context is renamed.
    first = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "broken",
        "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "nobody", "user": {"token": "x"}}],
        "contexts": [{"name": "broken", "context": {"cluster": "nowhere", "user": "nobody"}}],
    }
    good["contexts"][0]["name"] = "admin"
    del good["current-context"]
    (tmp_path / "first").write_text(yaml.safe_dump(first))
    (tmp_path / "second").write_text(yaml.safe_dump(good))
    env = {**os.environ, "KUBECONFIG": f"{tmp_path / 'absent'}:{tmp_path / 'first'}:{tmp_path / 'second'}"}

    async def run(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            SIGNALCTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        return int(process.returncode or 0), out.decode(), err.decode()

    rc, _, err = await run("get", "profiles")
    assert rc == 1
    # current-context from the first file:
    assert "could not list CertificationProfiles: no answer from the API server" in err
    assert "https://127.0.0.1:9" in err
    rc, _, err = await run("get", "profiles", "--context", "admin")
    assert rc == 0, err  # the second file's context, cluster and user, merged in
    rc, _, err = await run("--context", "nope", "get", "profiles")
    assert rc == 1
    assert "context 'nope' does not exist in $KUBECONFIG" in err
    assert "(contexts: admin, broken)" in err
