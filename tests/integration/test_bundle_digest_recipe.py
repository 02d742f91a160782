"""Acceptance 6: the Python bundle digest of a ConfigMap read back from the API server
equals what the documented shell recipe (deploy/tools/bundle-digest.sh) computes."""

import base64
import json
import subprocess
from pathlib import Path

from localcluster.kube import KubeClient, resource_path
from shared.digests import bundle_digest

RECIPE = Path(__file__).resolve().parents[2] / "deploy" / "tools" / "bundle-digest.sh"


async def test_python_and_shell_agree_on_a_configmap_from_the_cluster(admin: KubeClient, namespace: str) -> None:
    cms = resource_path("v1", "configmaps", namespace)
    await admin.create(
        cms,
        {
            "metadata": {"name": "scripts"},
            "immutable": True,
            "data": {
                "inventory.sh": "#!/bin/sh\nnvidia-smi -L\n",
                "README": "ünïcode ✓\n",
                "-dash": "",
                "z.py": "print(1)",
            },
            "binaryData": {"blob.bin": base64.b64encode(bytes(range(256)) * 3).decode()},
        },
    )
    read_back = await admin.get(f"{cms}/scripts")
    python = bundle_digest(read_back.get("data", {}), read_back.get("binaryData", {}))
    shell = subprocess.run(
        ["bash", str(RECIPE)],
        input=json.dumps(read_back),
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.strip() == python
    assert python.startswith("sha256:")
    assert len(python) == 71
