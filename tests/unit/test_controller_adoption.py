"""Admission never adopts a Run of the same name that belongs to another admission."""

from controller.admission import _same_admission
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
