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

Pods that need their real mount paths (programs with fixed paths, such as Argo's executor
with ``/var/run/argo``, ``/mainctrfs`` and the ServiceAccount directory) run each container
in a private mount namespace instead (:data:`MOUNT_NAMESPACE_IMAGES`, or the annotation
:data:`MOUNT_NAMESPACES_ANNOTATION` set to ``"true"``): a small helper
(:data:`MOUNT_NAMESPACE_HELPER`) unshares the mount namespace, builds a private root in which
the host's directories are bind-mounted, binds the Pod's volumes (and the termination-message
file) at their real mount paths, gives the container a private ``/tmp`` unless a volume is
mounted there, chroots into it and execs the command, untranslated. Directories that must
gain a mount point are shadowed by a tmpfs copy inside the namespace, so nothing is created on
the host outside the Pod's own directory and nothing needs cleaning up: the mounts vanish with
the container's processes. Needs root (the simulation runs as root).
"""

import base64
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubeio.errors import NotFound
from localcluster.imageenv import image_env
from localcluster.kube import KubeClient, Obj, resource_path

RUNNER_IMAGE = "projectsignal.dev/runner"
"""The runner's image, without tag or digest."""
# Image (without tag or digest) -> entrypoint used when a container has no command.
IMAGE_ENTRYPOINTS: dict[str, list[str]] = {
    # As in the image (Dockerfile.runner): the runner isolated and without ``site``.
    RUNNER_IMAGE: [
        sys.executable,
        "-I",
        "-S",
        str(Path(__file__).resolve().parents[1] / "runner" / "launch.py"),
    ],
    "projectsignal.dev/adapter": ["signal-adapter"],
    "projectsignal.dev/controller": ["signal-controller"],
    "projectsignal.dev/portal": ["signal-portal"],
}
# Signal's own service images: their Pods run with only the distribution's runtime packages
# importable, as in the image (localcluster/imageenv.py).
AS_IN_IMAGE: frozenset[str] = frozenset(
    {"projectsignal.dev/adapter", "projectsignal.dev/controller", "projectsignal.dev/portal"}
)
# Images (without tag or digest) -> directories put first on PATH in their containers, standing
# in for the image's own files (e.g. Argo's executor image, whose containers run ``argoexec``).
IMAGE_PATH_DIRS: dict[str, list[str]] = {}
# Images whose Pods run every container in a private mount namespace with real mount paths.
MOUNT_NAMESPACE_IMAGES: set[str] = set()
MOUNT_NAMESPACES_ANNOTATION = "localcluster.projectsignal.dev/mount-namespaces"
DEFAULT_TERMINATION_PATH = "/dev/termination-log"

# The helper that enters a private mount namespace, run with the standard library only (so it
# starts fast): ``python -I -S localcluster/mountns.py <spec json> <argv...>``.
MOUNT_NAMESPACE_HELPER = Path(__file__).with_name("mountns.py")
REPO_ROOT = Path(__file__).resolve().parent.parent


class PodSpecError(ValueError):
    """The Pod asks for something the process kubelet cannot provide."""


@dataclass
class ProcessSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    termination_file: Path
    log_file: Path
    mounts: list[dict[str, Any]] | None = None
    """In a private mount namespace: what to bind where (None: paths are translated)."""
    root: Path | None = None
    keep: list[str] | None = None
    """In a private mount namespace: host paths that stay visible (see :func:`host_paths`)."""

    def launch_argv(self) -> list[str]:
        """The argv to start: the container's own, or the mount-namespace helper around it."""
        if self.mounts is None or self.root is None:
            return self.argv
        spec = {"root": str(self.root), "cwd": str(self.cwd), "mounts": self.mounts, "keep": self.keep}
        return [sys.executable, "-I", "-S", str(MOUNT_NAMESPACE_HELPER), json.dumps(spec), *self.argv]

    @property
    def host_cwd(self) -> Path:
        """Where the process starts on the host (the helper changes to ``cwd`` itself)."""
        return self.cwd if self.mounts is None else Path("/")


def needs_mount_namespaces(pod: Obj) -> bool:
    """Whether the Pod's containers run in private mount namespaces with real mount paths."""
    if pod["metadata"].get("annotations", {}).get(MOUNT_NAMESPACES_ANNOTATION) == "true":
        return True
    spec = pod["spec"]
    containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
    return any(_image_name(c.get("image", "")) in MOUNT_NAMESPACE_IMAGES for c in containers)


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
    if path in {"metadata.labels", "metadata.annotations"}:
        # The kubelet's format: one key="value" line per entry, sorted, values quoted.
        entries = meta.get(path.split(".")[1], {})
        return "\n".join(f"{key}={json.dumps(entries[key])}" for key in sorted(entries))
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


async def _optional_get(kube: KubeClient, path: str, source: Obj) -> Obj:
    """The ConfigMap or Secret a volume names; an absent one is empty when the source is
    ``optional`` (as the kubelet mounts an empty directory), an error otherwise."""
    try:
        return await kube.get(path)
    except NotFound:
        if source.get("optional") is True:
            return {}
        raise


async def _configmap_files(kube: KubeClient, namespace: str, source: Obj) -> tuple[dict[str, bytes], dict[str, int]]:
    cm = await _optional_get(kube, resource_path("v1", "configmaps", namespace, source["name"]), source)
    everything = {k: v.encode() for k, v in cm.get("data", {}).items()}
    everything.update({k: base64.b64decode(v) for k, v in cm.get("binaryData", {}).items()})
    return _select_keys(everything, source)


async def _secret_files(kube: KubeClient, namespace: str, source: Obj) -> tuple[dict[str, bytes], dict[str, int]]:
    secret = await _optional_get(kube, resource_path("v1", "secrets", namespace, source["secretName"]), source)
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


def _container_mounts(pod: Obj, container: Obj, volumes: dict[str, Path]) -> tuple[list[tuple[str, Path]], set[str]]:
    """(mount path, host directory or file) per volume mount, and the read-only mount paths:
    ConfigMap, Secret, projected and downward-API volumes are read-only, as a kubelet mounts them."""
    mounts: list[tuple[str, Path]] = []
    read_only: set[str] = set()
    read_only_volumes = {v["name"] for v in pod["spec"].get("volumes", []) if "emptyDir" not in v}
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volumes:
            raise PodSpecError(f"container {container['name']!r} mounts unknown volume {mount['name']!r}")
        host = volumes[mount["name"]]
        if mount.get("subPath"):
            host = host / mount["subPath"]
            if not host.exists():  # as the kubelet does, e.g. for an emptyDir's subPath
                host.mkdir(parents=True)
        mounts.append((mount["mountPath"], host))
        if mount.get("readOnly") or mount["name"] in read_only_volumes:
            read_only.add(mount["mountPath"])
    return mounts, read_only


def _isolated(
    pod_dir: Path, name: str, spec: ProcessSpec, mounts: list[tuple[str, Path]], read_only: set[str]
) -> ProcessSpec:
    """The spec of a container in a private mount namespace: binds instead of translations."""
    private_tmp = pod_dir / f"tmp-{name}"
    private_tmp.mkdir(exist_ok=True)
    if not any(path.rstrip("/") == "/tmp" for path, _host in mounts):
        mounts = [*mounts, ("/tmp", private_tmp)]
    spec.mounts = [
        {"source": str(host), "target": path, "readOnly": path in read_only, "file": not host.is_dir()}
        for path, host in mounts
    ]
    spec.root = pod_dir / f"root-{name}"
    spec.root.mkdir(exist_ok=True)
    spec.keep = host_paths()
    return spec


def host_paths() -> list[str]:
    """Host paths a container in a private mount namespace must still see where they are, even
    under a path it gets privately (``/tmp``): the checkout (the project's packages), the Python
    environment and every registered image's binaries (e.g. Argo's build)."""
    paths = {str(REPO_ROOT), sys.prefix, str(Path(sys.executable).parent)}
    paths.update(d for dirs in IMAGE_PATH_DIRS.values() for d in dirs)
    return sorted(paths | {os.path.realpath(p) for p in paths})


def process_spec(
    pod: Obj,
    container: Obj,
    pod_dir: Path,
    volumes: dict[str, Path],
    node_env: Mapping[str, str] | None = None,
) -> ProcessSpec:
    """argv, environment and paths for one container (pure apart from creating directories).
    ``node_env`` is what the simulated node adds to every container; the container's own
    ``env`` overrides it. In a Pod that :func:`needs_mount_namespaces`, nothing is translated:
    the spec lists the mounts the helper makes instead."""
    name = container["name"]
    isolated = needs_mount_namespaces(pod)
    termination_path = container.get("terminationMessagePath", DEFAULT_TERMINATION_PATH)
    termination_file = pod_dir / f"{name}.termination-log"
    termination_file.write_bytes(b"")
    mounts, read_only = _container_mounts(pod, container, volumes)
    mounts.append((termination_path, termination_file))
    mounts.sort(key=lambda m: len(m[0]), reverse=True)
    image = _image_name(container.get("image", ""))
    argv = list(container.get("command") or IMAGE_ENTRYPOINTS.get(image, []))
    argv += container.get("args", [])
    if not argv:
        raise PodSpecError(
            f"container {name!r}: no command and image {container.get('image')!r} has no known entrypoint"
        )
    home = pod_dir / "home"
    home.mkdir(exist_ok=True)
    tmp = pod_dir / "tmp"
    tmp.mkdir(exist_ok=True)
    bin_dirs = [*IMAGE_PATH_DIRS.get(image, []), str(Path(sys.executable).parent)]
    env = {
        "PATH": ":".join([*bin_dirs, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "HOSTNAME": pod["spec"].get("hostname") or pod["metadata"]["name"],
        "TMPDIR": str(tmp),
        **(node_env or {}),
        **(image_env({}) if image in AS_IN_IMAGE else {}),
    }
    if isolated:
        env["HOME"] = env["TMPDIR"] = "/tmp"
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = _field(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
        elif "valueFrom" in item:
            raise PodSpecError(f"env {item['name']!r}: only value and fieldRef are simulated")
    if not isolated:
        env = {k: _translate(v, mounts) for k, v in env.items()}
        argv = [_translate(a, mounts) for a in argv]
    if os.sep not in argv[0] and shutil.which(argv[0], path=env["PATH"]) is None:
        raise PodSpecError(f"container {name!r}: executable {argv[0]!r} not found")
    working_dir = container.get("workingDir")
    log_file = pod_dir / f"{name}.log"
    if not isolated:
        cwd = Path(_translate(working_dir, mounts)) if working_dir else home
        return ProcessSpec(argv, env, cwd, termination_file, log_file)
    spec = ProcessSpec(argv, env, Path(working_dir or "/"), termination_file, log_file)
    return _isolated(pod_dir, name, spec, mounts, read_only)


def pod_key(pod: Obj) -> str:
    meta: dict[str, Any] = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"
