"""Turns one container of a Pod into a local process specification: argv, a clean
environment (env, downward API, ConfigMap keys), and volumes materialised as
directories (ConfigMap, Secret and projected volumes read-only, emptyDir writable).
Each Pod gets its own temporary directory (``TMPDIR``), standing in for the Pod's
private ``/tmp``.

Processes cannot see the Pod's mount paths, so every occurrence of a mount path (or of
the termination-message path) in argv and env values, including inside ``sh -c``
scripts, is translated to the host directory that stands in for it. Paths inside files
(e.g. a mounted script) are not translated: Signal's runner takes every path from its
arguments or environment. The project's own images map to their Python
entrypoints when a container has no command.
"""

import base64
import os
import re
import shutil
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.kube import KubeClient, Obj, resource_path

# Image (without tag or digest) -> entrypoint used when a container has no command.
IMAGE_ENTRYPOINTS: dict[str, list[str]] = {
    "projectsignal.dev/runner": ["signal-runner"],
    "projectsignal.dev/adapter": ["signal-adapter"],
    "projectsignal.dev/controller": ["signal-controller"],
    "projectsignal.dev/portal": ["signal-portal"],
}
DEFAULT_TERMINATION_PATH = "/dev/termination-log"


class PodSpecError(ValueError):
    """The Pod asks for something the process kubelet cannot provide."""


@dataclass
class ProcessSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    termination_file: Path
    log_file: Path


def _image_name(image: str) -> str:
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return name


def _field(pod: Obj, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", "127.0.0.1"),
        "status.hostIP": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path])
    for prefix, source in (
        ("metadata.labels['", meta.get("labels", {})),
        ("metadata.annotations['", meta.get("annotations", {})),
    ):
        if path.startswith(prefix) and path.endswith("']"):
            return str(source.get(path[len(prefix) : -2], ""))
    raise PodSpecError(f"unsupported downward API field {path!r}")


def _write_files(target: Path, files: dict[str, bytes], modes: dict[str, int] | None = None) -> None:
    """Write a read-only volume: files get mode 0444, or the requested ``mode``/``defaultMode``
    without write bits (0600 becomes 0400, 0555 stays 0555); directories get 0555."""
    target.mkdir(parents=True, exist_ok=True)
    for rel, payload in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload)
        path.chmod((modes or {}).get(rel, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH) & ~0o222)
    for directory in [target, *(p for p in target.rglob("*") if p.is_dir())]:
        directory.chmod(0o555)


def _select_keys(everything: dict[str, bytes], source: Obj) -> tuple[dict[str, bytes], dict[str, int]]:
    """Apply a ConfigMap/Secret volume source's ``items`` and modes to its keys."""
    default_mode = source.get("defaultMode")
    items = source.get("items") or [{"key": key, "path": key} for key in everything]
    files: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    for item in items:
        if item["key"] in everything:
            files[item["path"]] = everything[item["key"]]
            mode = item.get("mode", default_mode)
            if mode is not None:
                modes[item["path"]] = int(mode)
    return files, modes


async def _configmap_files(kube: KubeClient, namespace: str, source: Obj) -> tuple[dict[str, bytes], dict[str, int]]:
    cm = await kube.get(resource_path("v1", "configmaps", namespace, source["name"]))
    everything = {k: v.encode() for k, v in cm.get("data", {}).items()}
    everything.update({k: base64.b64decode(v) for k, v in cm.get("binaryData", {}).items()})
    return _select_keys(everything, source)


async def _secret_files(kube: KubeClient, namespace: str, source: Obj) -> tuple[dict[str, bytes], dict[str, int]]:
    secret = await kube.get(resource_path("v1", "secrets", namespace, source["secretName"]))
    everything = {k: base64.b64decode(v) for k, v in secret.get("data", {}).items()}
    return _select_keys(everything, {k: v for k, v in source.items() if k != "secretName"})


async def _projected_files(kube: KubeClient, pod: Obj, source: Obj) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    namespace = pod["metadata"]["namespace"]
    for part in source.get("sources", []):
        if "configMap" in part:
            files.update((await _configmap_files(kube, namespace, part["configMap"]))[0])
        elif "secret" in part:
            secret_source = {**part["secret"], "secretName": part["secret"]["name"]}
            files.update((await _secret_files(kube, namespace, secret_source))[0])
        elif "downwardAPI" in part:
            for item in part["downwardAPI"].get("items", []):
                files[item["path"]] = _field(pod, item["fieldRef"]["fieldPath"]).encode()
        elif "serviceAccountToken" in part:
            token_source = part["serviceAccountToken"]
            account = pod["spec"].get("serviceAccountName") or "default"
            request = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": token_source.get("expirationSeconds", 3600),
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod["metadata"]["name"],
                        "uid": pod["metadata"]["uid"],
                    },
                },
            }
            answer = await kube.create(resource_path("v1", "serviceaccounts", namespace, account, "token"), request)
            files[token_source["path"]] = answer["status"]["token"].encode()
        else:
            raise PodSpecError(f"unsupported projected volume source {sorted(part)}")
    return files


async def materialise_volumes(kube: KubeClient, pod: Obj, pod_dir: Path) -> dict[str, Path]:
    """Create a directory per volume; returns volume name -> host directory."""
    volumes: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes", []):
        target = pod_dir / "volumes" / volume["name"]
        if "configMap" in volume:
            _write_files(target, *await _configmap_files(kube, pod["metadata"]["namespace"], volume["configMap"]))
        elif "secret" in volume:
            _write_files(target, *await _secret_files(kube, pod["metadata"]["namespace"], volume["secret"]))
        elif "projected" in volume:
            _write_files(target, await _projected_files(kube, pod, volume["projected"]))
        elif "emptyDir" in volume:
            target.mkdir(parents=True, exist_ok=True)
        elif "downwardAPI" in volume:
            files = {
                i["path"]: _field(pod, i["fieldRef"]["fieldPath"]).encode() for i in volume["downwardAPI"]["items"]
            }
            _write_files(target, files)
        else:
            raise PodSpecError(
                f"volume {volume['name']!r}: only configMap, secret, projected, emptyDir and downwardAPI are simulated"
            )
        volumes[volume["name"]] = target
    return volumes


def _translate(value: str, mounts: list[tuple[str, Path]]) -> str:
    """Replace every occurrence of a mount path in ``value`` (as a whole path or a path
    prefix, anywhere in the string, e.g. inside ``sh -c`` scripts) by its host directory."""
    for mount_path, host in mounts:
        root = mount_path.rstrip("/") or "/"
        pattern = re.compile(r"(?<![\w./-])" + re.escape(root) + r"(?=/|$|[^\w.-])")
        replacement = str(host).replace("\\", "\\\\")
        value = pattern.sub(replacement, value)
    return value


def process_spec(
    pod: Obj,
    container: Obj,
    pod_dir: Path,
    volumes: dict[str, Path],
    node_env: Mapping[str, str] | None = None,
) -> ProcessSpec:
    """argv, environment and paths for one container (pure apart from creating directories).
    ``node_env`` is what the simulated node adds to every container; the container's own
    ``env`` overrides it."""
    name = container["name"]
    termination_path = container.get("terminationMessagePath", DEFAULT_TERMINATION_PATH)
    termination_file = pod_dir / f"{name}.termination-log"
    termination_file.write_bytes(b"")
    mounts: list[tuple[str, Path]] = [(termination_path, termination_file)]
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volumes:
            raise PodSpecError(f"container {name!r} mounts unknown volume {mount['name']!r}")
        host = volumes[mount["name"]]
        if mount.get("subPath"):
            host = host / mount["subPath"]
        mounts.append((mount["mountPath"], host))
    mounts.sort(key=lambda m: len(m[0]), reverse=True)
    argv = list(container.get("command") or IMAGE_ENTRYPOINTS.get(_image_name(container.get("image", "")), []))
    argv += container.get("args", [])
    if not argv:
        raise PodSpecError(
            f"container {name!r}: no command and image {container.get('image')!r} has no known entrypoint"
        )
    home = pod_dir / "home"
    home.mkdir(exist_ok=True)
    tmp = pod_dir / "tmp"
    tmp.mkdir(exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "HOSTNAME": pod["spec"].get("hostname") or pod["metadata"]["name"],
        "TMPDIR": str(tmp),
        **(node_env or {}),
    }
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = _field(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
        elif "valueFrom" in item:
            raise PodSpecError(f"env {item['name']!r}: only value and fieldRef are simulated")
    env = {k: _translate(v, mounts) for k, v in env.items()}
    argv = [_translate(a, mounts) for a in argv]
    if os.sep not in argv[0] and shutil.which(argv[0], path=env["PATH"]) is None:
        raise PodSpecError(f"container {name!r}: executable {argv[0]!r} not found")
    working_dir = container.get("workingDir")
    cwd = Path(_translate(working_dir, mounts)) if working_dir else home
    return ProcessSpec(argv, env, cwd, termination_file, pod_dir / f"{name}.log")


def pod_key(pod: Obj) -> str:
    meta: dict[str, Any] = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"
