"""Issue 41 §2 against a real S3 API: SeaweedFS built from its Go module (localcluster/seaweedfs.py)
on loopback, the adapter holding the signer's credential (``$SIGNAL_ARTIFACT_STORE``, the
Secret's layout), backend Pods run by the process kubelet with the real runner, which stores
through the presigned URLs the adapter signed, and ``signalctl``'s verification with the
reader's credential.

* A check whose scripts write multi-MiB stdout and an output file: every artifact is stored,
  recorded in the check evidence with its sha256 and size, byte-for-byte what the store holds,
  and verifies OK; the evidence keeps only the bounded tail.
* The stored object replaced → MISMATCH; deleted → MISSING.
* The store going down while the check runs: the check ends Inconclusive saying the store did
  not take the log, the adapter exits in bounded time, and no backend Pod is left."""

import asyncio
import hashlib
import io
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from localcluster.cluster import LocalCluster
from localcluster.kube import KubeClient
from localcluster.seaweedfs import SeaweedFS
from shared.artifacts import STORE_ENV
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from signalctl.artifacts import verify_artifacts
from tests.adapter_support import AdapterWorld, check
from tests.controller_support import eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")

MIB = 1024 * 1024
# 3 MiB of distinct stdout per participant, a line of stderr, and one output file.
BIG = """#!/bin/sh
head -c 2359296 /dev/urandom | base64 -w 76
echo "participant $SIGNAL_PARTICIPANT_INDEX done" >&2
printf 'node=%s\\n' "$SIGNAL_NODE_NAME" > "$SIGNAL_OUTPUT_DIR/summary.txt"
"""
# Runs long enough for the store to be taken down while it does (the test waits for its Pods
# to be Running, then stops the store at once).
SLOW = """#!/bin/sh
sleep 15
head -c 1048576 /dev/urandom | base64
"""


@pytest.fixture(scope="module")
async def store() -> AsyncIterator[SeaweedFS]:
    server = SeaweedFS()
    await server.start()
    print(f"seaweedfs: started in {server.started_seconds:.1f}s, {server.rss_bytes() / MIB:.0f} MiB resident")
    try:
        yield server
    finally:
        print(f"seaweedfs: {server.rss_bytes() / MIB:.0f} MiB resident at the end")
        server.stop()


@pytest.fixture
async def world(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[AdapterWorld]:
    w = AdapterWorld(cluster, admin, namespace, tmp_path)
    yield w
    await w.cleanup()


def _stored(server: SeaweedFS, key: str) -> bytes:
    answer = server.client("admin").get_object(server.bucket, key)
    try:
        return bytes(answer.read())
    finally:
        answer.close()
        answer.release_conn()


async def test_full_logs_are_stored_bound_by_digest_and_a_replaced_or_missing_one_is_caught(
    world: AdapterWorld, store: SeaweedFS, tmp_path: Path
) -> None:
    await world.setup(2, {"big.sh": BIG}, [check("burn", "big.sh", deadline="120s")])
    signer = store.write_config(tmp_path / "signer", "signer")
    began = time.monotonic()
    outcome = await world.adapter(0, **{STORE_ENV: str(signer)})
    print(f"check of 2 participants with 3 MiB of stdout each, stored: {time.monotonic() - began:.1f}s")
    assert outcome.code == 0, outcome.log
    assert outcome.verdict == "Pass", outcome.log
    evidence_cm = await world.config_map(outcome.outputs["evidence-config-map"])
    document, _ = decode_document(evidence_cm, CHECK_EVIDENCE_SCHEMA)
    participants = document["results"]["participants"]
    assert len(participants) == 2
    for participant in participants:
        assert participant["verdict"] == "Pass", participant
        names = [a["name"] for a in participant["artifacts"]]
        assert names == ["stdout", "stderr", "out/summary.txt"], names
        assert len(participant["stdout"]["tail"]) <= 1024  # the evidence keeps the tail only
        for artifact in participant["artifacts"]:
            held = await asyncio.to_thread(_stored, store, artifact["key"])
            assert len(held) == artifact["bytes"], artifact
            assert "sha256:" + hashlib.sha256(held).hexdigest() == artifact["digest"], artifact
            # the key is the adapter's, under this Run's uid and this participant's slot
            assert world.run["metadata"]["uid"] in artifact["key"]
            assert f"/p{participant['index']}/" in artifact["key"]
        stdout = participant["artifacts"][0]
        assert stdout["bytes"] > 3 * MIB, stdout
        assert participant["stdout"]["tail"].rstrip("\n").split("\n")[-1] in (
            (await asyncio.to_thread(_stored, store, stdout["key"])).decode()
        )

    reader = store.store("reader")
    findings = await asyncio.to_thread(verify_artifacts, {0: evidence_cm}, reader)
    assert len(findings) == 6
    assert {f.state for f in findings} == {"OK"}, findings

    replaced, removed = participants[0]["artifacts"][0], participants[1]["artifacts"][2]
    admin_client = store.client("admin")
    forged = b"all GPUs healthy\n" * 10
    await asyncio.to_thread(admin_client.put_object, store.bucket, replaced["key"], io.BytesIO(forged), len(forged))
    await asyncio.to_thread(admin_client.remove_object, store.bucket, removed["key"])
    findings = await asyncio.to_thread(verify_artifacts, {0: evidence_cm}, reader)
    states = {f.subject: f.state for f in findings}
    bad = {s: v for s, v in states.items() if v != "OK"}
    assert sorted(bad.values()) == ["MISMATCH", "MISSING"], findings
    assert any(world.nodes[0] in s and "stdout" in s for s, v in bad.items() if v == "MISMATCH"), bad
    assert any(world.nodes[1] in s and "summary.txt" in s for s, v in bad.items() if v == "MISSING"), bad


async def test_the_store_down_during_the_check_is_inconclusive_and_leaves_nothing(
    world: AdapterWorld, tmp_path: Path
) -> None:
    down = SeaweedFS()
    await down.start()
    try:
        await world.setup(2, {"slow.sh": SLOW}, [check("burn", "slow.sh", deadline="90s")])
        signer = down.write_config(tmp_path / "signer", "signer")
        process, outputs = await world.spawn(0, **{STORE_ENV: str(signer)})

        async def running() -> bool:
            pods = await world.pods()
            return len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

        await eventually(running, timeout=60, what="both backend Pods Running")
        down.halt()  # the store goes away while the scripts run: their logs have nowhere to go
        began = time.monotonic()
        out, _ = await asyncio.wait_for(process.communicate(), timeout=240)
        print(f"adapter ended {time.monotonic() - began:.1f}s after the store went down")
    finally:
        down.stop()
    log = out.decode(errors="replace")
    assert process.returncode == 0, log
    values = {p.name: p.read_text() for p in outputs.iterdir()}
    assert values["verdict"] == "Inconclusive", log
    evidence_cm = await world.config_map(values["evidence-config-map"])
    document, _ = decode_document(evidence_cm, CHECK_EVIDENCE_SCHEMA)
    for participant in document["results"]["participants"]:
        assert participant["verdict"] == "Inconclusive", participant
        assert participant["reason"].startswith("ArtifactUploadFailed: the artifact store at 127.0.0.1"), participant
        assert "did not take stdout" in participant["reason"], participant
    assert document["cleanup"]["state"] == "Complete", document["cleanup"]
    assert await world.pods() == []  # nothing leaks
