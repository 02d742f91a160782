"""Test vectors for the canonical bundle digest and canonical JSON (shared/digests.py).
The vectors were cross-checked with deploy/tools/bundle-digest.sh (sha256sum, jq)."""

import base64

import pytest

from shared.digests import BundleError, bundle_digest, canonical_json, sha256_digest

BLOB = base64.b64encode(bytes(range(256))).decode()


@pytest.mark.parametrize(
    ("data", "binary", "expected"),
    [
        pytest.param(
            {},
            {},
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            id="empty-configmap-is-sha256-of-nothing",
        ),
        pytest.param(
            {"check.sh": "#!/bin/sh\nexit 0\n"},
            {},
            "sha256:0c1948de7440bdbac9c3561ecbf1a006d96e648fd797bae222478ead49be0f98",
            id="one-script",
        ),
        pytest.param(
            {"b.sh": "echo b\n", "a.sh": "echo a\n", "B.sh": "x", "_u": "Grüße ✓"},
            {"blob.bin": BLOB},
            "sha256:9b691f9a848b0c0639c645b9d2b90a90eabffe4e630df360c2e4cbbfa34e6941",
            id="mixed-case-unicode-and-binary",
        ),
    ],
)
def test_bundle_digest_vectors(data: dict[str, str], binary: dict[str, str], expected: str) -> None:
    assert bundle_digest(data, binary) == expected


def test_key_order_of_the_input_does_not_matter() -> None:
    forward = {"a.sh": "1", "b.sh": "2", "c.sh": "3"}
    assert bundle_digest(forward, {}) == bundle_digest(dict(reversed(forward.items())), {})


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param(({"a": "x"}, {}), ({"a": "x\n"}, {}), id="one-trailing-newline"),
        pytest.param(({"a": "x"}, {}), ({"b": "x"}, {}), id="renamed-key"),
        pytest.param(({"a": "x", "b": "y"}, {}), ({"a": "y", "b": "x"}, {}), id="swapped-values"),
        pytest.param(({"a": "x"}, {}), ({"a": "x", "b": ""}, {}), id="extra-empty-key"),
    ],
)
def test_any_change_changes_the_digest(
    left: tuple[dict[str, str], dict[str, str]], right: tuple[dict[str, str], dict[str, str]]
) -> None:
    assert bundle_digest(*left) != bundle_digest(*right)


def test_text_and_binary_with_the_same_bytes_digest_alike() -> None:
    assert bundle_digest({"a": "hi"}, {}) == bundle_digest({}, {"a": base64.b64encode(b"hi").decode()})


def test_a_key_in_both_maps_is_refused() -> None:
    with pytest.raises(BundleError, match="both data and binaryData: a"):
        bundle_digest({"a": "x"}, {"a": "eA=="})


def test_bad_base64_is_refused_with_the_key_named() -> None:
    with pytest.raises(BundleError, match="binaryData\\['blob'\\]"):
        bundle_digest({}, {"blob": "not base64!"})


def test_canonical_json_sorts_keys_and_has_no_white_space() -> None:
    assert (
        canonical_json({"b": 1, "a": [1, "é", {"z": None, "y": True}]})
        == '{"a":[1,"é",{"y":true,"z":null}],"b":1}'.encode()
    )


def test_canonical_json_refuses_nan() -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        canonical_json({"x": float("nan")})


def test_sha256_digest_format() -> None:
    assert sha256_digest(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
