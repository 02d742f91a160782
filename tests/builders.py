"""Fluent builders of wire-form test objects (kueue-style wrappers):
``ProfileBuilder("p").count(4).check("inventory")...build()``."""

import copy
from dataclasses import dataclass, field
from typing import Any, Self

from shared.digests import bundle_digest

Obj = dict[str, Any]
SCRIPTS = {"inventory.sh": "#!/bin/sh\necho gpus=8\nexit 0\n", "nccl.sh": "#!/bin/sh\nexit 0\n"}
SCRIPTS_DIGEST = bundle_digest(SCRIPTS, {})


@dataclass
class ProfileBuilder:
    name: str
    obj: Obj = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.obj = {
            "apiVersion": "projectsignal.dev/v1alpha1",
            "kind": "CertificationProfile",
            "metadata": {"name": self.name},
            "spec": {
                "source": {
                    "namespace": "signal-scripts",
                    "name": "scripts",
                    "digest": SCRIPTS_DIGEST,
                },
                "participants": {"selector": {"matchLabels": {"pool": "gpu"}}, "count": 2},
                "checks": [
                    {
                        "name": "inventory",
                        "scriptKey": "inventory.sh",
                        "backend": "Pod",
                        "gpuCount": 8,
                        "backendActiveDeadline": "5m",
                    },
                ],
            },
        }

    def spec(self, **fields: Any) -> Self:
        self.obj["spec"].update(fields)
        return self

    def count(self, n: Any) -> Self:
        self.obj["spec"]["participants"]["count"] = n
        return self

    def selector(self, selector: Obj) -> Self:
        self.obj["spec"]["participants"]["selector"] = selector
        return self

    def source(self, **fields: Any) -> Self:
        self.obj["spec"]["source"].update(fields)
        return self

    def check(self, name: str, **fields: Any) -> Self:
        check = {
            "name": name,
            "scriptKey": "inventory.sh",
            "backend": "Pod",
            "backendActiveDeadline": "1m",
            **fields,
        }
        self.obj["spec"]["checks"].append(check)
        return self

    def checks(self, checks: list[Obj]) -> Self:
        self.obj["spec"]["checks"] = checks
        return self

    def edit_check(self, index: int, **fields: Any) -> Self:
        self.obj["spec"]["checks"][index].update(fields)
        return self

    def build(self) -> Obj:
        return copy.deepcopy(self.obj)


def run_manifest(name: str, participants: int = 2, **spec: Any) -> Obj:
    body: Obj = {
        "apiVersion": "projectsignal.dev/v1alpha1",
        "kind": "CertificationRun",
        "metadata": {"name": name},
        "spec": {
            "profile": {
                "name": "gpu-basic",
                "uid": "0b0c7f8e-1111-4c4c-9d9d-aaaaaaaaaaaa",
                "generation": 1,
            },
            "checks": [
                {
                    "name": "inventory",
                    "scriptKey": "inventory.sh",
                    "backend": "Pod",
                    "gpuCount": 8,
                    "backendActiveDeadline": "5m",
                }
            ],
            "source": {"digest": SCRIPTS_DIGEST, "snapshotConfigMap": f"{name}-snapshot"},
            "participants": [
                {
                    "index": i,
                    "nodeName": f"gpu-{i:03d}",
                    "nodeUID": f"uid-{i}",
                    "capacity": {"nvidia.com/gpu": "8"},
                    "allocatable": {"nvidia.com/gpu": "8"},
                }
                for i in range(participants)
            ],
            "suiteDeadlineSeconds": 600,
            "attempt": 1,
        },
    }
    body["spec"].update(spec)
    return body
