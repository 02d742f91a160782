"""The artifact store's pure parts (issue 41 §2): its configuration, the URLs the adapter signs
for a backend Pod, the evidence records it makes from a runner's report, and what the runner
takes from the output directory."""

import json
import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from adapter import artifacts
from adapter.inputs import Inputs, parse_inputs
from runner import artifacts as runner_artifacts
from shared.artifact_wire import UPLOAD_ENV_PREFIX, slots
from shared.artifacts import StoreConfig, StoreError, load_store
from shared.evidence import ParticipantResult
from shared.result import RunnerResult
from shared.run import Verdict

STORE = StoreConfig(
    endpoint="http://127.0.0.1:9000", bucket="signal-artifacts", access_key="a", secret_key="the-signing-secret"
)
DIGEST = "sha256:" + "ab" * 32


def _inputs() -> Inputs:
    check = {"name": "nccl", "scriptKey": "s.sh", "backend": "Pod", "backendActiveDeadline": "1m"}
    participants = [{"index": 0, "nodeName": "gpu-0", "nodeUID": "u0"}]
    return parse_inputs(
        run_namespace="ns",
        run_name="r1",
        run_uid="uid-1",
        participants_json=json.dumps(participants),
        snapshot="r1-scripts",
        check_index="2",
        check_json=json.dumps(check),
    )


def test_the_configuration_is_read_from_the_secrets_files_or_yaml(tmp_path: Path) -> None:
    assert load_store(None) is None
    assert load_store(tmp_path / "absent") is None
    (tmp_path / "empty").mkdir()
    assert load_store(tmp_path / "empty") is None  # the optional Secret is absent: no store
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for key, value in {"endpoint": "https://s3.example", "bucket": "b-1", "accessKey": "a", "secretKey": "s"}.items():
        (mounted / key).write_text(value + "\n")
    store = load_store(mounted)
    assert store is not None
    assert (store.host, store.secure, store.prefix) == ("s3.example", True, "signal")
    (tmp_path / "store.yaml").write_text("endpoint: http://h:1\nbucket: bkt\naccessKey: a\nsecretKey: s\nprefix: x/y\n")
    assert load_store(tmp_path / "store.yaml") == StoreConfig(
        endpoint="http://h:1", bucket="bkt", access_key="a", secret_key="s", prefix="x/y"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("endpoint: ftp://h\nbucket: bkt\naccessKey: a\nsecretKey: s\n", "endpoint"),
        ("endpoint: http://h\nbucket: bkt\naccessKey: a\n", "secretKey"),
        ("endpoint: http://h\nbucket: B!\naccessKey: a\nsecretKey: s\n", "bucket"),
        ("- a list\n", "must be a mapping"),
    ],
)
def test_a_malformed_configuration_is_refused_naming_the_key(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "store.yaml").write_text(text)
    with pytest.raises(StoreError, match=says):
        load_store(tmp_path / "store.yaml")


def test_each_backend_pod_gets_one_url_per_slot_for_its_own_keys_only() -> None:
    env = artifacts.upload_env(STORE, _inputs(), 0)
    assert [e["name"] for e in env] == [UPLOAD_ENV_PREFIX + s for s in slots()]
    for entry, slot in zip(env, slots(), strict=True):
        url = urlsplit(entry["value"])
        assert url.path == f"/signal-artifacts/signal/ns/r1/uid-1/c2/p0/{slot.lower()}"
        query = parse_qs(url.query)
        assert query["X-Amz-Credential"][0].startswith("a/")
        assert 60 < int(query["X-Amz-Expires"][0]) <= 60 + 120 + 300 + 120  # the deadline, budget, margin
    assert all("the-signing-secret" not in json.dumps(e) for e in env)  # signed with it, never carrying it


def _reported(names: list[str], verdict: str = "Pass") -> RunnerResult:
    return RunnerResult.model_validate(
        {
            "verdict": verdict,
            "reason": "r",
            "identity": {"nodeName": "gpu-0", "podName": "p", "podUid": "u", "participantIndex": 0},
            "startedAt": "2026-12-07T00:00:00Z",
            "finishedAt": "2026-12-07T00:00:01Z",
            "artifacts": [{"name": n, "digest": DIGEST, "bytes": 3} for n in names],
        }
    )


def _participant() -> ParticipantResult:
    return ParticipantResult(index=0, node_name="gpu-0", node_uid="u0", verdict=Verdict.PASS, reason="ok")


def test_the_evidence_records_the_key_the_adapter_signed_never_the_runners() -> None:
    recorded = artifacts.record(STORE, _inputs(), _participant(), _reported(["stdout", "stderr", "out/a", "out/b"]))
    assert recorded.verdict == Verdict.PASS
    assert [(a.name, a.key.rsplit("/", 1)[1]) for a in recorded.artifacts or []] == [
        ("stdout", "stdout"),
        ("stderr", "stderr"),
        ("out/a", "out_0"),
        ("out/b", "out_1"),
    ]
    # Without a store nothing changes, whatever the runner claims.
    assert artifacts.record(None, _inputs(), _participant(), _reported(["stdout"])) == _participant()


def test_a_pass_without_its_logs_stored_is_inconclusive() -> None:
    for names in ([], ["stdout"], ["stderr", "stdout"]):
        recorded = artifacts.record(STORE, _inputs(), _participant(), _reported(names))
        assert recorded.verdict == Verdict.INCONCLUSIVE
        assert recorded.reason.startswith("MissingArtifacts: ")


def test_a_runner_report_names_only_its_own_kinds_of_artifact() -> None:
    for name in ("../stdout", "out/", "out/.hidden", "other", "out/a/b"):
        with pytest.raises(ValueError, match="artifact name"):
            _reported([name])


def test_the_runner_takes_only_plain_files_of_good_names_from_the_output_directory(tmp_path: Path) -> None:
    assert runner_artifacts.output_files(tmp_path / "none") == []
    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "a.txt").write_text("x")
    assert runner_artifacts.output_files(tmp_path) == [
        ("out/a.txt", str(tmp_path / "a.txt")),
        ("out/b.json", str(tmp_path / "b.json")),
    ]
    for name in ("c", "d", "e"):
        (tmp_path / name).write_text("x")
    with pytest.raises(runner_artifacts.UploadError, match="at most 4"):
        runner_artifacts.output_files(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "-rf").write_text("x")
    with pytest.raises(runner_artifacts.UploadError, match="does not match"):
        runner_artifacts.output_files(bad)
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink("/etc/hostname", linked / "host")
    with pytest.raises(runner_artifacts.UploadError, match="symlink is not followed"):
        runner_artifacts.upload({"STDOUT": "http://127.0.0.1:9/x"}, linked / "host", linked / "host", linked)
