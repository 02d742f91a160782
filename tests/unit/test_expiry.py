"""controller/reconcile/expiry.py and the Stale copy (controller/rules/projection.expected_copy): a result on a
Node stops saying its verdict once its freshness window passes, its profile's suite changes or
its profile is gone (issue 43, item 4). Pure."""

from datetime import UTC, datetime, timedelta

import pytest

from controller.reconcile.expiry import EXPIRED, SUITE_CHANGED, orphaned_keys, stale_reason
from controller.rules.projection import LABEL, STALE, expected_copy, node_copy, reassert_patches
from shared import certified, keys
from tests.unit.node_builders import make_node
from tests.unit.test_certified_record import PROFILE, entry

COMPLETED = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
SUITE = "sha256:" + "b" * 64


def spec(**changes: object) -> dict[str, object]:
    return {"source": {"namespace": "s", "name": "n", "digest": SUITE}} | changes


@pytest.mark.parametrize(
    ("profile_spec", "after", "expected"),
    [
        pytest.param(spec(), timedelta(hours=167), None, id="within the default 168h"),
        pytest.param(spec(), timedelta(hours=169), EXPIRED, id="past the default 168h"),
        pytest.param(spec(freshness="1h"), timedelta(minutes=59), None, id="within freshness"),
        pytest.param(spec(freshness="1h"), timedelta(minutes=61), EXPIRED, id="past freshness"),
        pytest.param(spec(recurrence={"interval": "2h"}), timedelta(minutes=90), None, id="recurrence as window"),
        pytest.param(spec(recurrence={"interval": "2h"}), timedelta(hours=3), EXPIRED, id="past recurrence"),
        pytest.param(
            spec(source={"namespace": "s", "name": "n", "digest": "sha256:" + "c" * 64}),
            timedelta(minutes=1),
            SUITE_CHANGED,
            id="the suite changed",
        ),
        pytest.param({}, timedelta(minutes=1), SUITE_CHANGED, id="no suite named"),
    ],
)
def test_stale_reason(profile_spec: dict[str, object], after: timedelta, expected: str | None) -> None:
    why = stale_reason(profile_spec, entry("Pass"), COMPLETED + after)
    assert (why.split(":", 1)[0] if why else None) == expected


@pytest.mark.parametrize("completed", ["yesterday", "2026-11-30T01:00:00", ""])
def test_an_unreadable_completion_time_is_stale(completed: str) -> None:
    assert stale_reason(spec(), entry("Pass") | {"completionTime": completed}, COMPLETED) is not None


def test_no_entry_is_nothing_to_expire() -> None:
    assert stale_reason(spec(), None, COMPLETED) is None


@pytest.mark.parametrize("verdict", ["Pass", "Fail", "Inconclusive"])
def test_a_stale_copy_says_stale_on_both_labels_and_a_false_condition(verdict: str) -> None:
    copy = expected_copy(PROFILE, entry(verdict), stale="FreshnessExpired: old")
    assert copy[LABEL + keys.certified_label(PROFILE)] == STALE
    assert copy[LABEL + certified.trusted_label(PROFILE)] == STALE
    assert str(copy["condition:" + keys.certified_label(PROFILE)]).startswith("False|Stale|FreshnessExpired")


def test_a_faithful_copy_moves_to_stale_and_back_when_certified_again() -> None:
    fresh = entry("Pass")
    node = make_node("n").build()
    meta, status, _ = reassert_patches(PROFILE, fresh, node_copy(node), "1")
    assert meta is not None
    assert status is not None
    node["metadata"] |= {"labels": meta["metadata"]["labels"], "annotations": meta["metadata"]["annotations"]}
    node["status"]["conditions"] = status["status"]["conditions"]
    meta, status, differs = reassert_patches(PROFILE, fresh, node_copy(node), "2", "FreshnessExpired: old")
    assert meta is not None
    assert meta["metadata"]["labels"] == {keys.certified_label(PROFILE): STALE, certified.trusted_label(PROFILE): STALE}
    assert status is not None
    assert status["status"]["conditions"][0]["status"] == "False"
    assert set(differs) == {
        LABEL + keys.certified_label(PROFILE),
        LABEL + certified.trusted_label(PROFILE),
        "condition:" + keys.certified_label(PROFILE),
    }


def test_orphaned_keys_are_those_of_profiles_that_are_gone() -> None:
    long_name = "p" * 60  # its trusted key is hashed
    node = (
        make_node("n")
        .label(keys.certified_label("gone"), "Pass")
        .label(certified.trusted_label("gone"), "Pass")
        .label(keys.certified_label("kept"), "Pass")
        .label(certified.trusted_label("kept"), "Pass")
        .label(certified.trusted_label(long_name), "Pass")
        .label(keys.certified_label("already"), STALE)
        .label(keys.CERTIFY_LABEL, "gone")  # the request label is no result
        .label(keys.TRUSTED_NODE_LABEL, "true")  # nor the trusted-node label of adapter steps
        .build()
    )
    found = orphaned_keys(node_copy(node), {"kept"})
    assert found == {
        keys.certified_label("gone"): "gone",
        certified.trusted_label("gone"): certified.trusted_label("gone"),
        certified.trusted_label(long_name): certified.trusted_label(long_name),
    }
    assert orphaned_keys(node_copy(node), {"kept", "gone", long_name}) == {}


@pytest.mark.parametrize("profile", ["trusted", "certify", "a", "p" * 60])
def test_no_profile_result_label_is_signals_other_node_restriction_labels(profile: str) -> None:
    """The request label and the trusted-node label share the result labels' prefix; their
    'signal.' form never equals a profile's 'signal-<profile>' key, so a profile named 'trusted'
    or 'certify' neither overwrites them nor is expired in their place."""
    assert certified.trusted_label(profile) not in {keys.CERTIFY_LABEL, keys.TRUSTED_NODE_LABEL}
