"""The catalog's checks (checks/*) on real nodes (issue 44 acceptance): real kubelets, containerd,
the runner image built from this repository (it has python3 and none of the GPU tools), the adapter
as a process (tests/realnode_support.py).

* each check, its tool absent from the image, ends Inconclusive with a reason naming the tool -
  never Pass;
* each check with a stand-in tool that prints a recorded real output (tests/data/checks) ends with
  that output's class. The stand-in and the check's file are written into the check's work
  directory by a small wrapper (the snapshot mounts one script per check), which also sets the
  check's parameters as SIGNAL_PARAM_<NAME> the way the runner will once Checks carry parameters.
"""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from localcluster.kube import Obj
from shared.evidence import CHECK_EVIDENCE_SCHEMA, decode_document
from tests.adapter_support import AdapterOutcome, check
from tests.realnode_support import (
    RealCluster,
    RealWorld,
    keep_cluster_dir,
    leftovers,
    start_real_cluster,
    stop_real_cluster,
)

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
CHECKS = REPO / "checks"
DATA = REPO / "tests" / "data" / "checks"
NODES = ("node-1",)
CATALOG = {
    # check directory: (script, tool)
    "gpu-inventory": ("gpu_inventory.py", "nvidia-smi"),
    "dcgm-diag": ("dcgm_diag.py", "dcgmi"),
    "nccl-intranode": ("nccl_intranode.py", "all_reduce_perf"),
    "ib-bandwidth": ("ib_bandwidth.py", "ib_write_bw"),
}
STAND_INS = [
    # (check, recorded output, parameters, extra environment, expected verdict)
    ("gpu-inventory", "text_l4.txt", {"expectedGpuCount": "1"}, {}, "Pass"),
    ("gpu-inventory", "text_a100x4.txt", {"expectedGpuCount": "4"}, {}, "Fail"),
    ("dcgm-diag", "text_3.3.9_r3_a10g_targeted_power_fail.txt", {"level": "3"}, {}, "Fail"),
    ("dcgm-diag", "err_hostengine_unreachable.txt", {"level": "1"}, {}, "Inconclusive"),
    ("nccl-intranode", "shm_fallback_nvswitch.log", {"minBusbwGbps": "100"}, {}, "Fail"),
    ("nccl-intranode", "a100x2_sendrecv_p2p_direct_complete.log", {"minBusbwGbps": "70"}, {}, "Pass"),
    ("ib-bandwidth", "roce_server_98gbps.txt", {"minGbps": "90"}, {"SIGNAL_RANK": "0"}, "Pass"),
]


def wrapper(check_dir: str, recorded: str, params: dict[str, str], extra: dict[str, str]) -> str:
    """A POSIX sh script that installs the check and a stand-in tool in the work directory, then
    runs the check as the runner would (its #! line, the parameters in the environment)."""
    script, tool = CATALOG[check_dir]
    body = (CHECKS / check_dir / script).read_text(encoding="utf-8")
    output = (DATA / check_dir / recorded).read_text(encoding="utf-8").split("\n", 1)[1]
    exports = " ".join(f"SIGNAL_PARAM_{k.upper()}='{v}'" for k, v in params.items())
    exports += "".join(f" {k}='{v}'" for k, v in extra.items())
    return (
        "#!/bin/sh\nset -e\n"
        'd="${SIGNAL_WORKDIR:-/tmp}/catalog"; mkdir -p "$d/bin"\n'
        f"cat > \"$d/recorded\" <<'SIGNAL_RECORDED_END'\n{output.rstrip(chr(10))}\nSIGNAL_RECORDED_END\n"
        f'printf \'#!/bin/sh\\ncat "%s/recorded"\\n\' "$d" > "$d/bin/{tool}"\n'
        f'chmod +x "$d/bin/{tool}"\n'
        f"cat > \"$d/{script}\" <<'SIGNAL_CHECK_END'\n{body.rstrip(chr(10))}\nSIGNAL_CHECK_END\n"
        f'chmod +x "$d/{script}"\n'
        f'export PATH="$d/bin:$PATH" {exports}\n'
        f'exec "$d/{script}"\n'
    )


@pytest.fixture(scope="module")
async def real() -> AsyncIterator[RealCluster]:
    started = await start_real_cluster(keep_cluster_dir())
    try:
        yield started
    finally:
        await stop_real_cluster(started)


@pytest.fixture
async def world(real: RealCluster, tmp_path: Path) -> AsyncIterator[RealWorld]:
    w = RealWorld(real.cluster, real.admin, real.namespace, tmp_path)
    yield w
    await w.cleanup()


async def evidence(world: RealWorld, outcome: AdapterOutcome) -> Obj:
    assert outcome.code == 0, outcome.log
    document, digest = decode_document(
        await world.config_map(outcome.outputs["evidence-config-map"]), CHECK_EVIDENCE_SCHEMA
    )
    assert digest == outcome.outputs["evidence-digest"]
    return document


async def test_each_catalog_check_without_its_tool_is_inconclusive_naming_the_tool(world: RealWorld) -> None:
    scripts = {script: (CHECKS / name / script).read_text(encoding="utf-8") for name, (script, _) in CATALOG.items()}
    checks = [check(name, script, deadline="60s") for name, (script, _) in CATALOG.items()]
    await world.setup_real(NODES, scripts, checks)
    for index, (name, (_, tool)) in enumerate(CATALOG.items()):
        document = await evidence(world, await world.adapter(index))
        [participant] = document["results"]["participants"]
        assert participant["verdict"] == "Inconclusive", (name, participant)
        assert f"{tool} is not on PATH" in participant["stderr"]["tail"], (name, participant["stderr"])
    assert await leftovers(world) == []


async def test_each_catalog_check_with_a_stand_in_tool_ends_with_the_recorded_outputs_class(world: RealWorld) -> None:
    scripts = {
        f"stand_in_{i}.sh": wrapper(name, recorded, params, extra)
        for i, (name, recorded, params, extra, _) in enumerate(STAND_INS)
    }
    checks = [check(f"stand-in-{i}", f"stand_in_{i}.sh", deadline="60s") for i in range(len(STAND_INS))]
    await world.setup_real(NODES, scripts, checks)
    for index, (name, recorded, _, _, expected) in enumerate(STAND_INS):
        document = await evidence(world, await world.adapter(index))
        [participant] = document["results"]["participants"]
        assert participant["verdict"] == expected, (name, recorded, participant)
        assert participant["measurements"]["outcome"] == expected, participant["measurements"]
    assert await leftovers(world) == []
