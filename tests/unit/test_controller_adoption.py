"""Admission never adopts a Run of the same name that belongs to another admission."""

import pytest

from controller.reconcile.admission import _same_admission
from controller.rules.manifests import controlled_by, owner_reference
from tests.builders import run_manifest as wire_run


def test_an_existing_run_is_adopted_only_when_it_is_the_same_admission() -> None:
    wanted = wire_run("r", participants=2)
    assert _same_admission({**wanted, "status": {}}, wanted)
    assert _same_admission({**wanted, "status": {"phase": "Admitted"}}, wanted)
    assert not _same_admission({**wanted, "status": {"phase": "Succeeded"}}, wanted), "a finished Run is never adopted"
    other_group = wire_run("r", participants=3)
    assert not _same_admission(other_group, wanted)
    other_attempt = wire_run("r", participants=2, attempt=2)
    assert not _same_admission(other_attempt, wanted)


RUN = {"metadata": {"name": "r", "uid": "uid-r"}}


@pytest.mark.parametrize(
    ("owners", "adopted"),
    [
        pytest.param([owner_reference(RUN)], True, id="controlled by the Run"),
        pytest.param(None, False, id="no owner at all"),
        pytest.param([{**owner_reference(RUN), "uid": "uid-other"}], False, id="another Run of the same name"),
        pytest.param([{**owner_reference(RUN), "controller": False}], False, id="owned but not controlled"),
        pytest.param([{**owner_reference(RUN), "controller": "true"}], False, id="controller is not boolean true"),
        pytest.param([{**owner_reference(RUN), "kind": "Pod"}], False, id="same uid, another kind"),
        pytest.param(["garbage", owner_reference(RUN)], True, id="a malformed entry beside the real one"),
    ],
)
def test_a_child_is_adopted_only_when_the_run_controls_it(owners: list | None, adopted: bool) -> None:
    child = {"metadata": {"name": "r"} if owners is None else {"name": "r", "ownerReferences": owners}}
    assert controlled_by(child, RUN) is adopted
