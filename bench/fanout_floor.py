"""The Pod fan-out floor with its client in a process of its own, waiting with a watch (issue 15
goal 5): N trivial Pods (``true``), one per simulated Node, created (at most ``--concurrency`` at
once), run to Succeeded, then deleted until gone, by a bare httpx client with the admin's token.
``command`` replaces ``true``: bench/adapter_pods.py also measures the fan-out of Pods that only
start the runner's interpreter as the runner image starts it (``python -I -S -c pass``), to tell
the Python start every participant pays from what Signal's runner adds to it.

Why apart from bench/floors.py's :func:`~bench.floors.pod_fanout_floor`: the process kubelet of
the local cluster runs in the benchmark's own process, on one event loop, and that floor's client
shared it, parsing a LIST of every Pod each 50 ms; so the floor measured the kubelet slowed by
its own client (in bench/adapter_pods.py that process used a whole core in the floor's window).
Signal's adapter is a process of its own and watches its Pods; so is this client. The clock runs
inside the client, from its first create; its start is not counted.

Run by :func:`pod_fanout_floor_apart`; as a script it prints one JSON line:
``{"succeeded": seconds, "gone": seconds}``.
"""

import argparse
import asyncio
import json
import os
import resource
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.floors import FanoutFloor

TOKEN_ENV = "BENCH_FLOOR_TOKEN"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def client(
    server: str, ca_file: str, namespace: str, nodes: Sequence[str], concurrency: int, command: Sequence[str]
) -> dict[str, float]:
    import httpx  # noqa: PLC0415 - the client process's alone

    from bench.lanes import Lanes  # noqa: PLC0415 - ditto

    tag = uuid.uuid4().hex[:8]
    selector = f"bench.projectsignal.dev/floor={tag}"
    path = f"/api/v1/namespaces/{namespace}/pods"
    names = [f"floor-{tag}-{i}" for i in range(len(nodes))]
    bodies = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"bench.projectsignal.dev/floor": tag}},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "main", "image": "busybox", "command": list(command)}],
            },
        }
        for name, node in zip(names, nodes, strict=True)
    ]
    headers = {"Authorization": f"Bearer {os.environ[TOKEN_ENV]}", "Content-Type": "application/json"}
    verify = ssl.create_default_context(cafile=ca_file)
    # The watch on a client of its own; the creates and deletes ``concurrency`` at once at most,
    # one connection each (bench/lanes.py says why not one pooled client).
    lanes = Lanes(concurrency, base_url=server, verify=verify, headers=headers, timeout=120)
    try:
        async with httpx.AsyncClient(base_url=server, verify=verify, headers=headers, timeout=120) as http:
            listing = (await http.get(path, params={"labelSelector": selector})).json()

            async def send(method: str, target: str, body: object = None) -> None:
                answer = await lanes.request(method, target, content=None if body is None else json.dumps(body))
                if answer.status_code >= 300:
                    raise RuntimeError(f"{method} {target}: {answer.status_code} {answer.text[:300]}")

            phases: dict[str, str] = {}
            marks: dict[str, float] = {}
            params = {
                "watch": "1",
                "labelSelector": selector,
                "resourceVersion": listing["metadata"]["resourceVersion"],
                "allowWatchBookmarks": "false",
            }
            began, cpu_began = time.perf_counter(), _cpu()
            creates: asyncio.Future[object] | None = None
            deletes: asyncio.Future[object] | None = None
            while "gone" not in marks:  # the API server may end a watch: resumed where it ended
                async with http.stream("GET", path, params=params, timeout=None) as events:
                    if creates is None:  # the clock starts with the first watch open
                        began, cpu_began = time.perf_counter(), _cpu()
                        creates = asyncio.ensure_future(asyncio.gather(*(send("POST", path, b) for b in bodies)))
                    async for line in events.aiter_lines():
                        if not line:
                            continue
                        if creates.done() and creates.exception() is not None:
                            raise RuntimeError(f"creating the floor's Pods failed: {creates.exception()}")
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            raise RuntimeError(f"the floor's watch of {selector} failed: {event['object']}")
                        params["resourceVersion"] = event["object"]["metadata"]["resourceVersion"]
                        name = event["object"]["metadata"]["name"]
                        if event["type"] == "DELETED":
                            phases[name] = "Gone"
                        else:
                            phases[name] = (event["object"].get("status") or {}).get("phase", "")
                        if deletes is None and all(phases.get(n) == "Succeeded" for n in names):
                            marks["succeeded"] = time.perf_counter() - began
                            await creates
                            deletes = asyncio.ensure_future(
                                asyncio.gather(*(send("DELETE", f"{path}/{n}") for n in names))
                            )
                        if deletes is not None and all(phases.get(n) == "Gone" for n in names):
                            marks["gone"] = time.perf_counter() - began
                            marks["cpu_window"] = _cpu() - cpu_began
                            await deletes
                            break
    finally:
        await lanes.aclose()
    marks["cpu_total"] = _cpu()
    return marks


async def pod_fanout_floor_apart(
    server: str,
    ca_file: Path,
    token: str,
    namespace: str,
    nodes: Sequence[str],
    concurrency: int = 64,
    command: Sequence[str] = ("true",),
) -> tuple["FanoutFloor", float, float]:
    """The floor measured by this file run as a client process of its own (see the docstring),
    each Pod running ``command``, with the client's CPU seconds in the floor's window and in its
    whole life."""
    from bench.floors import FanoutFloor  # noqa: PLC0415 - not in the client process: its start is light

    argv = [sys.executable, __file__, server, str(ca_file), namespace, ",".join(nodes), str(concurrency)]
    argv += ["--", *command]
    process = await asyncio.create_subprocess_exec(
        *argv, env={**os.environ, TOKEN_ENV: token}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    if process.returncode != 0:
        raise RuntimeError(f"the fan-out floor's client failed (exit {process.returncode}): {err.decode()[-2000:]}")
    marks = json.loads(out.decode().strip().splitlines()[-1])
    how = "bare httpx in a process of its own, watching"
    floor = FanoutFloor(len(nodes), marks["succeeded"], marks["gone"], how, " ".join(command))
    return floor, marks["cpu_window"], marks["cpu_total"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("server")
    parser.add_argument("ca_file")
    parser.add_argument("namespace")
    parser.add_argument("nodes", help="comma-separated Node names, one Pod each")
    parser.add_argument("concurrency", type=int)
    parser.add_argument("command", nargs="+", help="each Pod's command (after --)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.lanes, as the benchmarks import it
    nodes = args.nodes.split(",")
    result = asyncio.run(client(args.server, args.ca_file, args.namespace, nodes, args.concurrency, args.command))
    print(json.dumps(result))
