"""Issue 42 M-B, on the real API server: an unparsable admission ledger stops admission only.

Before, a malformed ledger made the controller exit (status 2) at its next read: at start-up
(taking the fence) it exited again and again, so acceptance, releases and the re-assertion of
Node projections stopped with admission. Now, with the ledger made unparsable under a running
controller and the controller restarted on it: the profile says ``Admissible=False``
(``AdmissionLedgerUnreadable``) with a Warning Event, the metric reads 1, no new group is
admitted, and the admitted Run is still released (its Nodes given back) by the same, still
running, process.

(Who can write the ledger at all is deploy/base/identity-admission-policy.yaml's business:
tests/integration/test_attacks_identities.py. Here an admin, whom that policy trusts, breaks it.)
"""

from pathlib import Path

import httpx
import pytest

from controller.reconcile.profiles import LEDGER_UNREADABLE
from controller.rules.ledger import LEDGER_NAME
from localcluster.cluster import LocalCluster
from localcluster.controlplane import free_port
from localcluster.kube import KubeClient, Obj, resource_path
from shared import keys
from shared.conditions import condition
from tests.controller_support import ControllerProcess, World, eventually, profile_body, reserved_by

API = keys.API_VERSION


async def test_an_unparsable_ledger_stops_admission_only(
    cluster: LocalCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    world = World(cluster, admin, namespace)
    await world.setup()
    controller = ControllerProcess(cluster, namespace, tmp_path, resync=1.0, metrics_port=free_port())
    try:
        await controller.start()
        first, later = world.node_names(2), world.node_names(2, prefix="later")
        profile = f"{namespace}-p"
        await world.add_nodes(first, requested_for=profile)
        await world.add_profile(profile_body(profile, namespace, 2))

        async def running() -> Obj | None:
            runs = await world.runs()
            return runs[0] if runs and runs[0].get("status", {}).get("phase") == "Running" else None

        run = await eventually(running, what=f"a Running Run\n{controller.logs()}")
        ledger = resource_path("v1", "configmaps", namespace, LEDGER_NAME)
        await admin.merge_patch(ledger, {"data": {"groups": '{"not": json'}})
        # A restart on the broken ledger (what a crash loop would be made of).
        controller.stop()
        await controller.start()

        # The restarted process, not the one before it: that one may already have read the
        # broken ledger at its last resync and said so on the profile (make test, 2026-12-07:
        # the metrics below were asked of a restarted process that had not started yet).
        async def restarted() -> bool:
            return "fence taken on an unparsable admission ledger" in controller.logs(tail=None)

        async def logs() -> str:
            return controller.logs()

        await eventually(restarted, timeout=60, what="the restarted controller on the broken ledger", explain=logs)
        await world.add_nodes(later, requested_for=profile)

        async def stopped() -> Obj | None:
            found = condition((await world.profile(profile)).get("status", {}).get("conditions") or [], "Admissible")
            return found if found and found.get("reason") == LEDGER_UNREADABLE else None

        admissible = await eventually(stopped, timeout=60, what=f"Admissible={LEDGER_UNREADABLE}\n{controller.logs()}")
        assert admissible["status"] == "False"
        assert LEDGER_NAME in admissible["message"]
        # (Events about a cluster-scoped profile are in `default`: docs/reference.md.)
        events = (await admin.get(resource_path("v1", "events", "default")))["items"]
        assert any(
            e["reason"] == "AdmissionStopped" and e["type"] == "Warning" and e["involvedObject"]["name"] == profile
            for e in events
        ), [e["reason"] for e in events if e["involvedObject"]["name"] == profile]
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://127.0.0.1:{controller.metrics_port}/metrics")).text
        assert "signal_admission_ledger_unreadable 1.0" in text

        # Releases go on: the admitted Run ends and is released by the same process.
        run_path = resource_path(API, keys.RUN_PLURAL, namespace, run["metadata"]["name"])
        await admin.merge_patch(f"{run_path}/status", {"status": {"phase": "Failed", "reason": "CheckFailed"}})
        await admin.merge_patch(run_path, {"spec": {"release": True}})

        async def released() -> bool:
            current = await admin.get(run_path)
            return any(
                c["type"] == "Released" and c["status"] == "True" for c in current["status"].get("conditions", [])
            )

        await eventually(released, timeout=60, what=f"Released=True\n{controller.logs()}")
        assert all(reserved_by(n) is None for n in await world.nodes(first))
        assert controller.process is not None
        assert controller.process.poll() is None, f"the controller exited:\n{controller.logs()}"
        # ... and nothing was admitted meanwhile: the later Nodes are free, one Run only.
        assert all(reserved_by(n) is None for n in await world.nodes(later))
        assert len(await world.runs()) == 1
        assert (await admin.get(ledger))["data"]["groups"] == '{"not": json', "the broken ledger is left for a human"
    finally:
        controller.stop()
        await world.cleanup()


pytestmark = pytest.mark.timeout(300)
