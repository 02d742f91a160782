"""Issue 41 §1, evidence that scales with the group: an all-pass certification of 64 Nodes with
the design's suite of 15 checks, and with the largest suite the CRD allows (32), each
participant writing 1 KiB of distinct stdout, 256 B of stderr and measurements, ends
Succeeded; all 64 Nodes are projected Pass and released; ``signalctl evidence verify`` is OK.

The real controller runs as its ServiceAccount with Signal's admission policies in force, on
simulated Nodes. Nothing runs the checks: the test does the adapter's part (each check's results
and evidence ConfigMaps, written as ``signal-adapter``, which the evidence policy requires) and
Argo's (the Workflow's status: Succeeded, each check step reporting its evidence digest).

Before issue 41 the Run's evidence document embedded every check's evidence and the Run ended
Inconclusive ``EvidenceTooLarge``. The sizes of every stored object are printed (``-s``) and
bounded here; docs/reference.md ("Evidence sizes") gives the arithmetic.
"""

import asyncio
import base64
import json
import secrets
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import identities
from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from shared.digests import bundle_digest
from shared.evidence import (
    CHECK_EVIDENCE_SCHEMA,
    RESULTS_SCHEMA,
    CheckEvidence,
    CheckResults,
    config_map,
    decode_document,
    encode,
)
from tests import evidence_builders as eb
from tests.controller_support import ControllerProcess, World, eventually, install_rbac, profile_body, reserved_by

pytestmark = pytest.mark.asyncio(loop_scope="session")
API = keys.API_VERSION
PARTICIPANTS = 64
SIGNALCTL = str(Path(sys.executable).parent / "signalctl")
API_SERVER_OBJECT_LIMIT = 1024 * 1024  # etcd's default request limit is 1.5 MiB; a ConfigMap's data 1 MiB


def _output(size: int) -> Obj:
    """A stream of ``size`` distinct bytes (hex: what real logs compress better than)."""
    tail = secrets.token_hex(size // 2)
    return {"digest": "sha256:" + secrets.token_hex(32), "bytes": size, "tail": tail}


def _documents(run: Obj, index: int) -> tuple[Obj, Obj]:
    """(results, evidence) of check ``index`` as the adapter writes them: every participant
    passed with 1 KiB of stdout, 256 B of stderr and measurements."""
    evidence = eb.check_evidence(run, index)
    for participant in evidence["results"]["participants"]:
        participant["stdout"] = _output(1024)
        participant["stderr"] = _output(256)
        participant["measurements"] = {
            "gpus": 8,
            "busBandwidthGBps": 187.5 + participant["index"] / 10,
            "driver": "570.86.15",
            "healthy": True,
        }
        participant["startedAt"] = participant["finishedAt"] = eb.STAMP
    evidence = eb.seal(evidence)
    return evidence["results"], evidence


def _labels(run: Obj, check: str) -> dict[str, str]:
    meta = run["metadata"]
    return {
        keys.RUN_NAME_LABEL: meta["name"],
        keys.RUN_UID_LABEL: meta["uid"],
        keys.CHECK_LABEL: check,
        keys.COMPONENT_LABEL: "evidence",
    }


async def _adapter_part(cluster: LocalCluster, run: Obj) -> dict[int, str]:
    """Store every check's results and evidence as signal-adapter; the evidence digests."""
    meta = run["metadata"]
    owner = {"apiVersion": API, "kind": keys.RUN_KIND, "name": meta["name"], "uid": meta["uid"]}
    adapter = await identities.service_account(cluster.plane, meta["namespace"], "signal-adapter", create=False)
    digests: dict[int, str] = {}
    async with adapter.client() as kube:
        path = resource_path("v1", "configmaps", meta["namespace"])
        for index, check in enumerate(run["spec"]["checks"]):
            results, evidence = _documents(run, index)
            labels = _labels(run, check["name"])
            for name, document in (
                (keys.check_results_name(meta["name"], index), results),
                (keys.check_evidence_name(meta["name"], index), evidence),
            ):
                body, digest, _ = config_map(
                    name=name, namespace=meta["namespace"], owner=owner, labels=labels, document=document
                )
                await kube.create(path, body)
            digests[index] = digest
    return digests


async def _argo_part(admin: KubeClient, run: Obj, digests: dict[int, str]) -> None:
    """The Workflow as Argo ends it: Succeeded, each check step with its reported digest."""
    name = run["metadata"]["name"]
    nodes = {
        f"{name}-{index}": {
            "id": f"{name}-{index}",
            "name": f"{name}[{index}].check",
            "type": "Pod",
            "templateName": "check",
            "phase": "Succeeded",
            "inputs": {"parameters": [{"name": "index", "value": str(index)}]},
            "outputs": {"parameters": [{"name": "evidence-digest", "value": digest}]},
        }
        for index, digest in digests.items()
    }
    path = resource_path(keys.ARGO_API_VERSION, keys.WORKFLOW_PLURAL, run["metadata"]["namespace"])
    await admin.merge_patch(f"{path}/{name}", {"status": {"phase": "Succeeded", "nodes": nodes}})


def _stored(cm: Obj) -> tuple[int, int]:
    """(raw canonical bytes, stored gzip bytes) of an evidence ConfigMap."""
    compressed = base64.b64decode(cm["binaryData"]["evidence.json.gz"])
    schema = cm["metadata"]["annotations"]["projectsignal.dev/evidence-schema"]
    document, _ = decode_document(cm, schema)
    return len(encode(document)[0]), len(compressed)


def _object_bytes(obj: Obj) -> int:
    """The object's size as the API server serves it (JSON), managedFields included."""
    return len(json.dumps(obj, separators=(",", ":")).encode())


async def _sizes(admin: KubeClient, run: Obj, names: list[str]) -> dict[str, Any]:
    meta = run["metadata"]
    ns, name = meta["namespace"], meta["name"]
    path = resource_path("v1", "configmaps", ns)
    results, evidence = [], []
    for index in range(len(run["spec"]["checks"])):
        results.append(_stored(await admin.get(f"{path}/{keys.check_results_name(name, index)}")))
        evidence.append(_stored(await admin.get(f"{path}/{keys.check_evidence_name(name, index)}")))
    run_cm = await admin.get(f"{path}/{keys.run_evidence_name(name)}")
    nodes = [await admin.get(resource_path("v1", "nodes", name=n)) for n in names]
    annotations = [len(json.dumps(n["metadata"].get("annotations") or {}).encode()) for n in nodes]
    return {
        "checks": len(results),
        "results_raw_max": max(r[0] for r in results),
        "results_gzip_max": max(r[1] for r in results),
        "evidence_raw_max": max(e[0] for e in evidence),
        "evidence_gzip_max": max(e[1] for e in evidence),
        "evidence_cm_object_max": max(
            [_object_bytes(await admin.get(f"{path}/{keys.check_evidence_name(name, i)}")) for i in range(len(results))]
        ),
        "run_evidence_raw_gzip": _stored(run_cm),
        "run_evidence_cm_object": _object_bytes(run_cm),
        "run_object": _object_bytes(run),
        "node_annotations_max": max(annotations),
        "node_object_max": max(_object_bytes(n) for n in nodes),
    }


async def _verify(cluster: LocalCluster, tmp_path: Path, run: Obj) -> tuple[int, str]:
    kubeconfig = identities.admin(cluster.plane).kubeconfig(tmp_path / "admin.kubeconfig")
    process = await asyncio.create_subprocess_exec(
        SIGNALCTL,
        "evidence",
        "verify",
        run["metadata"]["name"],
        "-n",
        run["metadata"]["namespace"],
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode()


@pytest.fixture
async def world(cluster: LocalCluster, admin: KubeClient, namespace: str) -> AsyncIterator[World]:
    w = World(cluster, admin, namespace)
    await w.setup()
    await install_rbac(admin, namespace, "adapter-rbac.yaml")
    yield w
    await w.cleanup()


@pytest.mark.parametrize("checks", [15, 32])
async def test_a_full_group_with_a_large_suite_succeeds_and_verifies(
    world: World, admin: KubeClient, tmp_path: Path, checks: int
) -> None:
    began = time.monotonic()
    ns = world.namespace
    profile = f"{ns}-scale"
    names = world.node_names(PARTICIPANTS)
    await world.add_nodes(names, requested_for=profile)
    suite = [
        {"name": f"check-{i:02d}", "scriptKey": "inventory.sh", "backend": "Pod", "backendActiveDeadline": "5m"}
        for i in range(checks)
    ]
    await world.add_profile(profile_body(profile, ns, PARTICIPANTS, checks=suite))
    controller = ControllerProcess(world.cluster, ns, tmp_path, resync=2.0)
    await controller.start()
    try:

        async def running() -> Obj | None:
            runs = await world.runs()
            return runs[0] if runs and (runs[0].get("status") or {}).get("phase") == "Running" else None

        run = await eventually(running, timeout=180, interval=1.0, what=f"a Running Run\n{controller.logs()}")
        assert len(run["spec"]["participants"]) == PARTICIPANTS
        admitted = time.monotonic()
        digests = await _adapter_part(world.cluster, run)
        await _argo_part(admin, run, digests)
        stored = time.monotonic()

        async def ended() -> Obj | None:
            current = await admin.get(resource_path(API, keys.RUN_PLURAL, ns, run["metadata"]["name"]))
            return current if (current.get("status") or {}).get("completionTime") else None

        done = await eventually(ended, timeout=180, interval=1.0, what=f"the Run's end\n{controller.logs()}")
        status = done["status"]
        assert (status["phase"], status["reason"]) == ("Succeeded", "AllChecksPassed"), status["message"]
        assert status["checkVerdicts"] == [{"name": c["name"], "verdict": "Pass"} for c in suite]

        async def released() -> list[Obj] | None:
            nodes = await world.nodes(names)
            return nodes if all(reserved_by(n) is None for n in nodes) else None

        nodes = await eventually(released, timeout=180, interval=1.0, what="all 64 Nodes released")
        label = keys.certified_label(profile)
        assert [n["metadata"]["labels"].get(label) for n in nodes] == ["Pass"] * PARTICIPANTS
        finished = time.monotonic()

        rc, out = await _verify(world.cluster, tmp_path, done)
        assert rc == 0, out
        assert "evidence verified" in out, out
        lines = out.splitlines()
        assert sum(1 for line in lines if line.startswith("OK") and " evidence: ConfigMap " in line) == checks
        assert not [line for line in lines if line.startswith(("MISMATCH", "MISSING"))], out

        # Re-assertion proves each recorded Pass from this Run's evidence (issue 42): still Pass.
        nodes = await world.nodes(names)
        assert [n["metadata"]["labels"].get(label) for n in nodes] == ["Pass"] * PARTICIPANTS
        events = (await admin.get(resource_path("v1", "events", "default")))["items"]
        assert not [
            e for e in events if e["reason"] == "CertifiedRecordUnproven" and e["involvedObject"]["name"] in names
        ]
        done = await admin.get(resource_path(API, keys.RUN_PLURAL, ns, run["metadata"]["name"]))
        sizes = await _sizes(admin, done, names)
        sizes["seconds"] = {
            "admission": round(admitted - began, 1),
            "store": round(stored - admitted, 1),
            "accept_and_release": round(finished - stored, 1),
            "verify": round(time.monotonic() - finished, 1),
        }
        print(f"\nevidence sizes at {PARTICIPANTS} x {checks}: {json.dumps(sizes)}")
        # The Run document grows with the checks, not with what they printed.
        raw, gzipped = sizes["run_evidence_raw_gzip"]
        assert raw < 64 * 1024, sizes
        assert gzipped < 32 * 1024, sizes
        for key in ("evidence_cm_object_max", "run_evidence_cm_object", "run_object", "node_object_max"):
            assert sizes[key] < API_SERVER_OBJECT_LIMIT // 2, (key, sizes)
    finally:
        controller.stop()


async def test_the_check_evidence_stored_here_is_what_the_adapter_stores() -> None:
    """The documents this test stores pass the adapter's own models (so the sizes are real)."""
    run = {
        "metadata": {"name": "r", "namespace": "ns", "uid": "u"},
        "spec": {
            "checks": [{"name": "c", "scriptKey": "s.sh", "backend": "Pod"}],
            "source": {"digest": bundle_digest({"s.sh": "exit 0"}, {})},  # a suite the builders know
            "participants": [{"index": i, "nodeName": f"n{i}", "nodeUID": f"u{i}"} for i in range(PARTICIPANTS)],
        },
    }
    results, evidence = _documents(run, 0)
    assert results["schema"] == RESULTS_SCHEMA
    assert evidence["schema"] == CHECK_EVIDENCE_SCHEMA
    CheckResults.model_validate(results)
    CheckEvidence.model_validate(evidence)
