"""Test lanes (issue 46): every test is in exactly one of

* ``unit``: no API server; a file under tests/unit (that asks for no cluster fixture);
* ``integration``: against the real local API server (tests/integration, the default);
* ``system``: the slow lane: real nodes (containerd and kubelets), image builds, the crash at
  every write, the chaos campaign, the demos. A file listed in ``SYSTEM_FILES``, anything under
  tests/chaos, or a test marked ``@pytest.mark.system`` (so a new system test needs no edit
  here: mark it).

tests/conftest.py marks each collected test with its lane, so ``pytest -m unit`` (``make
test-fast``) and ``pytest -m system`` (``make test-system``) select by lane and a new file is
in a lane without anyone listing it. Pure; no I/O."""

from collections.abc import Iterable
from pathlib import PurePath

LANES = {
    "unit": "no API server: pure code and fakes (tests/unit; make test-fast)",
    "integration": "against the real local API server (tests/integration)",
    "system": "slow: real nodes, image builds, crash at every write, chaos, demos (make test-system)",
}
SYSTEM_DIRECTORIES = frozenset({"chaos"})
SYSTEM_FILES = frozenset(
    {
        # the crash at every write of admission, release and rollback
        "test_recovery_after_crash.py",
        # real nodes: containerd, kubelets, CNI (run under flock /tmp/signal-realnode.lock)
        "test_real_nodes.py",
        "test_real_nodes_cleanup.py",
        "test_runs_on_real_nodes.py",
        "test_checks_on_real_nodes.py",
        "test_demo_real_nodes.py",
        "test_kubeflow_mpi_operator.py",
        # images built with buildah
        "test_container_images.py",
        "test_buildah_storage.py",
        # the demos and a fresh clone of the repository
        "test_demo.py",
        "test_self_contained.py",
    }
)
CLUSTER_FIXTURE = "cluster"
"""The session's local cluster (tests/conftest.py); ``admin`` and ``namespace`` depend on it, so
it is in the fixture closure of every test that uses the API server. (A parameter of a unit
test may be called ``namespace``: only the closure tells.)"""


def lane(path: PurePath, fixtures: Iterable[str], *, marked_system: bool) -> str:
    """The lane of a test in file ``path`` (any prefix; the parts under tests/ decide) whose
    fixture closure is ``fixtures``; ``marked_system``: it carries ``@pytest.mark.system``."""
    whole = path.parts
    # Only the parts under the last ``tests`` decide: a checkout under a directory named
    # ``chaos`` or ``unit`` must not change the lanes.
    parts = whole[len(whole) - whole[::-1].index("tests") :] if "tests" in whole else whole
    if marked_system or path.name in SYSTEM_FILES or SYSTEM_DIRECTORIES.intersection(parts):
        return "system"
    if "unit" in parts and CLUSTER_FIXTURE not in fixtures:
        return "unit"
    return "integration"
