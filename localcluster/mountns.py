"""Enter a private mount namespace for one container of the process kubelet, then exec it.

Run by the process kubelet (localcluster/podprocess.py) as
``python -I -S localcluster/mountns.py <spec json> <argv...>``, standard library only so that
it starts fast: spec = {"root": empty host directory, "cwd": path in the container, "mounts":
[{"source", "target", "readOnly", "file"}], "keep": [host paths]}. It unshares the mount
namespace, builds a private root in which the host's directories are visible and each volume is
bind-mounted at its real path (creating missing mount points inside the namespace only), binds
again each ``keep`` path that a volume covers (the checkout, the virtual environment and the
images' binaries must stay where they are even when they live under ``/tmp``, which the
container gets privately), chroots there and execs argv. Local test infrastructure; needs root.
"""

import ctypes
import json
import os
import sys
from typing import NoReturn

CLONE_NEWNS, MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20000, 1, 32, 4096, 16384, 1 << 18
libc = ctypes.CDLL(None, use_errno=True)


def fail(what: str) -> NoReturn:
    sys.stderr.write(f"process kubelet: mount namespace: {what}: {os.strerror(ctypes.get_errno())}\n")
    sys.exit(127)


def mount(source: str | None, target: str, fstype: str | None, flags: int, what: str) -> None:
    def encode(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    if libc.mount(encode(source), encode(target), encode(fstype), flags, None) != 0:
        fail(what)


def split(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def existing_prefix(path: str) -> tuple[str, list[str]]:
    """(realpath of the longest existing prefix of path, the missing components)."""
    parts = split(path)
    for cut in range(len(parts), -1, -1):
        prefix = "/" + "/".join(parts[:cut])
        if os.path.lexists(prefix):
            return os.path.realpath(prefix), parts[cut:]
    return "/", parts


def populate(root: str, host: str, shadowed: set[str]) -> None:
    """Make root+host a tmpfs holding host's entries: shadowed directories recursively,
    everything else bind-mounted (recursively, except the branch holding root itself)."""
    here = root + host.rstrip("/")
    mount("tmpfs", here, "tmpfs", 0, f"tmpfs at {host}")
    os.chmod(here, os.stat(host).st_mode & 0o7777)
    for name in os.listdir(host):
        source = os.path.join(host, name)
        target = here + "/" + name
        if os.path.islink(source):
            os.symlink(os.readlink(source), target)
        elif os.path.isdir(source):
            os.mkdir(target)
            if source in shadowed:
                populate(root, source, shadowed)
            else:
                holds_root = (root + "/").startswith(source + "/")
                mount(source, target, None, MS_BIND | (0 if holds_root else MS_REC), f"bind {source}")
        else:
            open(target, "a").close()
            mount(source, target, None, MS_BIND, f"bind {source}")


def main() -> None:
    spec = json.loads(sys.argv[1])
    argv = sys.argv[2:]
    root = spec["root"]
    mounts = sorted(spec["mounts"], key=lambda m: len(split(m["target"])))
    if libc.unshare(CLONE_NEWNS) != 0:
        fail("unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE, "make / private")
    # Opened before anything is covered (and inside the new namespace, as bind mounts require).
    sources = [os.open(m["source"], os.O_PATH | os.O_CLOEXEC) for m in mounts]
    targets = [os.path.normpath(m["target"]) for m in mounts]
    keep = [
        (path, os.open(path, os.O_PATH | os.O_CLOEXEC))
        for path in (os.path.normpath(k) for k in spec.get("keep") or [])
        if os.path.isdir(path) and any(path.startswith(t.rstrip("/") + "/") for t in targets)
    ]
    # Directories of the host that must gain a mount point are shadowed by a tmpfs copy.
    shadowed: set[str] = set()
    plan: list[str] = []
    planned: dict[str, str] = {}
    for m in mounts:
        target = os.path.normpath(m["target"])
        above = [t for t in planned if target.startswith(t.rstrip("/") + "/")]
        if above:  # created inside the volume mounted above it
            parent = max(above, key=len)
            real = planned[parent].rstrip("/") + target[len(parent.rstrip("/")) :]
        else:
            real, missing = existing_prefix(target)
            if missing:
                ancestors = split(real)
                shadowed.update("/" + "/".join(ancestors[:i]) for i in range(1, len(ancestors) + 1))
            real = real.rstrip("/") + "".join("/" + part for part in missing)
        planned[target] = real or "/"
        plan.append(real or "/")
    populate(root, "/", shadowed)
    for m, target, fd in zip(mounts, plan, sources, strict=True):
        inside = root + target
        if m.get("file"):
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            if not os.path.lexists(inside):
                open(inside, "a").close()
        else:
            os.makedirs(inside, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", inside, None, MS_BIND | MS_REC, f"bind {m['source']} at {m['target']}")
        if m.get("readOnly"):
            mount(None, inside, None, MS_BIND | MS_REMOUNT | MS_RDONLY, f"read-only {m['target']}")
        os.close(fd)
    for path, fd in sorted(keep, key=lambda k: len(k[0])):
        inside = root + path
        os.makedirs(inside, exist_ok=True)
        holds_root = (root + "/").startswith(path + "/")
        mount(f"/proc/self/fd/{fd}", inside, None, MS_BIND | (0 if holds_root else MS_REC), f"keep {path}")
        os.close(fd)
    os.chroot(root)
    os.chdir(spec["cwd"])
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
