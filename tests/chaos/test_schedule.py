"""The fault schedule: the same seed gives the same faults at the same times, every kind appears
when there are enough faults, and all of them fall inside the span."""

from tests.chaos.faults import KINDS, schedule


def test_a_seed_fixes_the_schedule() -> None:
    assert schedule(7, 50, 180.0) == schedule(7, 50, 180.0)
    assert schedule(7, 50, 180.0) != schedule(8, 50, 180.0)


def test_every_kind_appears_within_the_span() -> None:
    plan = schedule(1, 52, 180.0)
    assert len(plan) == 52
    assert {p.kind for p in plan} == set(KINDS)
    assert all(0.0 <= p.at <= 180.0 for p in plan)
    assert [p.at for p in plan] == sorted(p.at for p in plan)


def test_fewer_faults_than_kinds() -> None:
    plan = schedule(3, 5, 60.0)
    assert len(plan) == 5
    assert len({p.kind for p in plan}) == 5
