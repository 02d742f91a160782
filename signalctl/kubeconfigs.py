"""Which kubeconfig signalctl uses, merged the way kubectl merges ``$KUBECONFIG``.

* ``--kubeconfig FILE``: that file alone (it must exist); nothing is merged.
* else every file of ``$KUBECONFIG`` (a path list, ``:`` on Linux), in order, duplicates and
  empty entries dropped, files that do not exist skipped; with ``$KUBECONFIG`` unset or empty,
  ``~/.kube/config``;
* merging: in ``clusters``, ``contexts`` and ``users`` the **first** file to define a name wins
  and that entry is taken whole (a later file's entry of the same name is ignored, field by
  field too); ``current-context`` (and ``preferences``) come from the first file that sets
  them; a relative path in an entry (certificate-authority, client-certificate, client-key,
  tokenFile, an exec plugin's command with a directory) is relative to the file that defined
  the entry;
* ``--context NAME`` replaces the merged ``current-context``;
* no file at all: the in-cluster configuration inside a Pod, else an error naming what was tried.

A file that exists but cannot be read or is not a kubeconfig is an error (kubectl fails too),
never skipped. ``merge`` and ``resolve_paths`` are pure; ``load`` reads the files."""

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubeio.client import Kube
from kubeio.transport import ConfigError, from_document, in_cluster
from signalctl.kubectx import FIELD_MANAGER, CommandError

Doc = dict[str, Any]
SECTIONS = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))
CLUSTER_PATHS = ("certificate-authority",)
USER_PATHS = ("client-certificate", "client-key", "tokenFile")


@dataclass(frozen=True)
class Loaded:
    """The merged kubeconfig and the files it came from, in precedence order."""

    document: Doc
    files: tuple[Path, ...]

    @property
    def origin(self) -> str:
        """How to name it in a message: the file, or ``$KUBECONFIG (a:b)``."""
        if len(self.files) == 1:
            return str(self.files[0])
        return f"$KUBECONFIG ({os.pathsep.join(map(str, self.files))})"


def candidates(flag: str | None, environ: Mapping[str, str], home: Path) -> tuple[list[Path], bool]:
    """The files to merge, in precedence order, and whether they were named explicitly."""
    if flag:
        return [Path(flag)], True
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not listed:
        return [home / ".kube" / "config"], False
    return [Path(p) for p in dict.fromkeys(listed)], False


def _absolute(entry: Mapping[str, Any], keys: Sequence[str], base: Path) -> Doc:
    out = dict(entry)
    for key in keys:
        value = out.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            out[key] = str(base / value)
    return out


def resolve_paths(document: Mapping[str, Any], base: Path) -> Doc:
    """``document`` with its entries' relative paths made relative to ``base`` (its file's
    directory), as kubectl resolves each file's paths before merging."""
    out = dict(document)
    clusters = []
    for entry in document.get("clusters") or []:
        if isinstance(entry, dict) and isinstance(entry.get("cluster"), dict):
            entry = {**entry, "cluster": _absolute(entry["cluster"], CLUSTER_PATHS, base)}  # noqa: PLW2901
        clusters.append(entry)
    users = []
    for item in document.get("users") or []:
        if isinstance(item, dict) and isinstance(item.get("user"), dict):
            user = _absolute(item["user"], USER_PATHS, base)
            plugin = user.get("exec")
            if isinstance(plugin, dict):
                command = plugin.get("command")
                if isinstance(command, str) and os.sep in command and not Path(command).is_absolute():
                    user["exec"] = {**plugin, "command": str(base / command)}
            item = {**item, "user": user}  # noqa: PLW2901
        users.append(item)
    if "clusters" in document:
        out["clusters"] = clusters
    if "users" in document:
        out["users"] = users
    return out


def merge(documents: Sequence[Mapping[str, Any]]) -> Doc:
    """kubectl's merge of kubeconfig documents given in precedence order (paths already resolved)."""
    merged: Doc = {"apiVersion": "v1", "kind": "Config"}
    for section, _ in SECTIONS:
        seen: dict[str, Any] = {}
        for document in documents:
            for item in document.get(section) or []:
                name = item.get("name") if isinstance(item, dict) else None
                if isinstance(name, str) and name not in seen:
                    seen[name] = item
        merged[section] = list(seen.values())
    for key in ("current-context", "preferences"):
        for document in documents:
            if document.get(key):
                merged[key] = document[key]
                break
    return merged


def with_context(document: Doc, context: str | None, origin: str) -> Doc:
    """``document`` using ``context`` (None: its current-context), refused when it has no such context."""
    names = [c.get("name") for c in document.get("contexts") or [] if isinstance(c, dict)]
    if context is None:
        return document
    if context not in names:
        known = ", ".join(sorted(str(n) for n in names)) or "none"
        raise CommandError(
            f"context {context!r} does not exist in {origin} (contexts: {known}); pass another --context"
        )
    return {**document, "current-context": context}


def load(flag: str | None, environ: Mapping[str, str], home: Path) -> Loaded | None:
    """The merged kubeconfig (None: use the in-cluster configuration)."""
    import yaml  # noqa: PLC0415 - only the commands that connect need it

    files, explicit = candidates(flag, environ, home)
    present = [f for f in files if f.is_file()]
    if explicit and not present:
        raise CommandError(f"kubeconfig {flag} does not exist; pass an existing file with --kubeconfig")
    if not present:
        if environ.get("KUBERNETES_SERVICE_HOST"):
            return None
        tried = ", ".join(map(str, files))
        raise CommandError(f"no kubeconfig found (tried {tried}); pass --kubeconfig FILE or set KUBECONFIG")
    documents = []
    for file in present:
        try:
            document = yaml.safe_load(file.read_text()) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise CommandError(f"cannot read kubeconfig {file}: {exc}; fix or remove it from KUBECONFIG") from exc
        if not isinstance(document, dict):
            raise CommandError(f"kubeconfig {file} is not a mapping; fix or remove it from KUBECONFIG")
        documents.append(resolve_paths(document, file.parent))
    return Loaded(merge(documents), tuple(present))


async def connect(flag: str | None, context: str | None, environ: Mapping[str, str], home: Path) -> Kube:
    """A client for the merged kubeconfig's (or ``context``'s) cluster and user, or in-cluster."""
    loaded = load(flag, environ, home)
    origin = loaded.origin if loaded is not None else "(in-cluster)"
    try:
        if loaded is None:
            if context:
                raise CommandError(f"--context {context} needs a kubeconfig; none was found (pass --kubeconfig)")
            endpoint = in_cluster(environ)
        else:
            document = with_context(loaded.document, context, origin)
            endpoint = from_document(document, loaded.files[0] if len(loaded.files) == 1 else Path(origin), context)
    except ConfigError as exc:
        raise CommandError(f"could not use kubeconfig {origin}: {exc}; check the file or pass --kubeconfig") from exc
    return Kube(endpoint, field_manager=FIELD_MANAGER)
