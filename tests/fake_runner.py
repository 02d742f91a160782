"""A misbehaving runner for adapter tests: accepts signal-runner's ``run`` arguments and
writes a termination message chosen by the script's content, a JSON object mapping a
participant index to a mode:

* ``honest``: a correct Pass result for this Pod;
* ``malformed``: truncated JSON;
* ``oversized``: a valid result padded past 4 KiB;
* ``duplicated``: the correct result written twice;
* ``foreign-node``: a Pass claiming another Node;
* ``foreign-uid``: a Pass claiming another Pod uid;
* ``other-index``: a Pass claiming participant index 0.
"""

import argparse
import json
import os
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from shared.digests import sha256_digest
from shared.result import RunnerIdentity, RunnerResult, render_result
from shared.run import Verdict


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role")
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--deadline-seconds")
    parser.add_argument("--workdir")
    parser.add_argument("--termination-log", type=Path, required=True)
    args = parser.parse_args()
    index = int(os.environ["SIGNAL_PARTICIPANT_INDEX"])
    mode = json.loads(args.script.read_text())[str(index)]
    identity = {
        "participant_index": index,
        "node_name": os.environ["SIGNAL_NODE_NAME"],
        "pod_name": os.environ["SIGNAL_POD_NAME"],
        "pod_uid": os.environ["SIGNAL_POD_UID"],
    }
    if mode == "foreign-node":
        identity["node_name"] = "some-other-node"
    elif mode == "foreign-uid":
        identity["pod_uid"] = str(uuid.uuid4())
    elif mode == "other-index":
        identity["participant_index"] = 0
    now = datetime.now(UTC).replace(microsecond=0)
    measurements = {"padding": "x" * 120} if mode == "oversized" else {}
    result = RunnerResult(
        verdict=Verdict.PASS,
        reason="Succeeded: the script exited 0",
        identity=RunnerIdentity(**identity),  # type: ignore[arg-type]
        exit_code=0,
        measurements=measurements,
        started_at=now,
        finished_at=now,
        # What it executed, as the real runner reports it: the script's own bytes.
        script_digest=sha256_digest(args.script.read_bytes()),
    )
    payload = render_result(result)
    if mode == "malformed":
        payload = payload[: len(payload) // 2]
    elif mode == "duplicated":
        payload = payload + payload
    elif mode == "oversized":
        payload = payload[:-1] + b',"x":"' + b"y" * 4200 + b'"}'
    args.termination_log.write_bytes(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
