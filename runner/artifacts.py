"""Uploading a participant's artifacts to the store through the presigned PUT URLs the adapter
gave it (shared/artifact_wire.py). Standard library only (``http.client``), loaded by the runner
only when such URLs are in its environment: a check without a store starts as before.

What is sent is what is hashed: each file is read once, block by block, each block hashed and
sent, with the Content-Length of the size read at the start; a file that changes size while it is
sent fails the upload. Every network step has a timeout (``UPLOAD_TIMEOUT_SECONDS``) and all of
them a budget (``UPLOAD_BUDGET_SECONDS``), so a store that is down or hangs costs seconds, never the
check's deadline; the caller makes the result Inconclusive (runner/main.py)."""

from __future__ import annotations

import http.client
import os
import re
import time
import urllib.parse
from hashlib import sha256

from runner.document import Artifact
from runner.execute import StreamError, StrPath, open_regular
from shared.artifact_wire import (
    MAX_OUTPUT_FILES,
    OUTPUT_NAME_PATTERN,
    OUTPUT_PREFIX,
    STDERR,
    STDOUT,
    UPLOAD_BUDGET_SECONDS,
    UPLOAD_ENV_PREFIX,
    UPLOAD_TIMEOUT_SECONDS,
    slot_of,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

BLOCK = 1 << 16


class UploadError(RuntimeError):
    """An artifact could not be stored (the store is down, refused it, or the file is unfit)."""


def upload_urls(environ: Mapping[str, str]) -> dict[str, str]:
    """The presigned PUT URL of each slot (``STDOUT``, ``OUT_0``...), empty without a store."""
    return {k.removeprefix(UPLOAD_ENV_PREFIX): v for k, v in environ.items() if k.startswith(UPLOAD_ENV_PREFIX)}


def output_files(directory: StrPath) -> list[tuple[str, str]]:
    """(artifact name, path) of each file the script left in ``directory``, sorted by name;
    UploadError for anything that is not a plain file of an acceptable name, or too many."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UploadError(f"cannot list the output directory: {exc.strerror}") from exc
    if len(names) > MAX_OUTPUT_FILES:
        raise UploadError(f"the script wrote {len(names)} files to its output directory; at most {MAX_OUTPUT_FILES}")
    pattern = re.compile(OUTPUT_NAME_PATTERN)
    for name in names:
        if not pattern.fullmatch(name):
            raise UploadError(f"output file name {name[:80]!r} does not match {OUTPUT_NAME_PATTERN}")
    return [(OUTPUT_PREFIX + name, os.path.join(directory, name)) for name in names]


def put(url: str, path: StrPath, name: str, deadline: float) -> Artifact:
    """PUT the file at ``path`` to ``url``; its artifact record (name, sha256 and size sent)."""
    try:
        fd = open_regular(path, name)
    except StreamError as exc:
        raise UploadError(str(exc)) from exc
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UploadError(f"the upload URL of {name} is not an http(s) URL")
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    timeout = max(0.1, min(UPLOAD_TIMEOUT_SECONDS, deadline - time.monotonic()))
    where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout)
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    digest, sent = sha256(), 0
    try:
        with open(fd if fd is not None else os.open(os.devnull, os.O_RDONLY), "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            connection.putrequest("PUT", target, skip_accept_encoding=True)
            connection.putheader("Content-Length", str(size))
            connection.putheader("Content-Type", "application/octet-stream")
            connection.endheaders()
            while sent < size:
                if time.monotonic() > deadline:
                    raise UploadError(f"storing {name} outlived the {UPLOAD_BUDGET_SECONDS:.0f}s upload budget")
                block = handle.read(min(BLOCK, size - sent))
                if not block:
                    break
                digest.update(block)
                connection.send(block)
                sent += len(block)
            if sent != size or handle.read(1):
                raise UploadError(f"{name} changed size while it was stored ({size} bytes at the start)")
            answer = connection.getresponse()
            body = answer.read(512)
    except (OSError, http.client.HTTPException) as exc:
        detail = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise UploadError(f"the artifact store at {where} did not take {name}: {detail}") from exc
    finally:
        connection.close()
    if answer.status not in (200, 201, 204):
        text = body.decode("utf-8", errors="replace").replace("\n", " ")[:160]
        raise UploadError(f"the artifact store at {where} refused {name}: HTTP {answer.status} {text}")
    return Artifact(name=name, digest="sha256:" + digest.hexdigest(), bytes=sent)


def upload(urls: Mapping[str, str], stdout: StrPath, stderr: StrPath, output_dir: StrPath) -> tuple[Artifact, ...]:
    """Store stdout, stderr and the output files through ``urls``; their records, in slot order.
    UploadError when any one cannot be stored (a missing URL included)."""
    deadline = time.monotonic() + UPLOAD_BUDGET_SECONDS
    files = [(STDOUT, stdout), (STDERR, stderr), *output_files(output_dir)]
    records = []
    outputs = 0
    for name, path in files:
        slot = slot_of(name, outputs)
        if name.startswith(OUTPUT_PREFIX):
            outputs += 1
        url = urls.get(slot)
        if not url:
            raise UploadError(f"no upload URL for {name} (slot {slot}); the Pod spec is wrong")
        records.append(put(url, path, name, deadline))
    return tuple(records)
