"""controller/rules/sources.py: verification of a profile's source ConfigMap (exists, immutable,
every scriptKey present, pinned bundle digest)."""

import base64
from typing import Any

import pytest

from controller.rules.sources import SourceCheck, parse_source_namespaces, source_namespace_refused, verify_source
from shared.digests import bundle_digest
from shared.profile import CertificationProfile
from tests.builders import SCRIPTS, ProfileBuilder

WHERE = "ConfigMap signal-scripts/scripts"
BINARY = {"tool.bin": base64.b64encode(b"\x00\x01\xfe\xff").decode()}


def _profile(digest: str, *script_keys: str) -> CertificationProfile:
    checks = [
        {"name": f"c{i}", "scriptKey": key, "backend": "Pod", "backendActiveDeadline": "1m"}
        for i, key in enumerate(script_keys or ("inventory.sh",))
    ]
    return CertificationProfile.model_validate(ProfileBuilder("p").source(digest=digest).checks(checks).build())


def _config_map(
    data: dict[str, str] | None = None, binary: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "scripts", "namespace": "signal-scripts"},
        "immutable": True,
    }
    if data is not None:
        body["data"] = data
    if binary is not None:
        body["binaryData"] = binary
    body.update(extra)
    return body


DIGEST = bundle_digest(SCRIPTS, {})
OTHER_DIGEST = "sha256:" + "0" * 64


def test_verified() -> None:
    result = verify_source(_profile(DIGEST, "inventory.sh", "nccl.sh"), _config_map(SCRIPTS))
    assert result == SourceCheck(True, "SourceVerified", f"{WHERE} verified at {DIGEST}", DIGEST)


def test_verified_with_binary_data() -> None:
    digest = bundle_digest({"inventory.sh": "x"}, BINARY)
    result = verify_source(_profile(digest, "inventory.sh", "tool.bin"), _config_map({"inventory.sh": "x"}, BINARY))
    assert result.ok
    assert result.digest == digest


def test_verified_with_only_binary_data() -> None:
    digest = bundle_digest({}, BINARY)
    result = verify_source(_profile(digest, "tool.bin"), _config_map(None, BINARY))
    assert (result.ok, result.reason, result.digest) == (True, "SourceVerified", digest)


def test_extra_keys_are_part_of_the_digest_but_need_no_check() -> None:
    data = {**SCRIPTS, "README": "docs"}
    result = verify_source(_profile(bundle_digest(data, {}), "inventory.sh"), _config_map(data))
    assert result.ok


@pytest.mark.parametrize(
    ("profile", "config_map", "reason", "message"),
    [
        pytest.param(
            _profile(DIGEST),
            None,
            "SourceNotFound",
            f"{WHERE} does not exist; create it (immutable: true)",
            id="missing ConfigMap",
        ),
        pytest.param(
            _profile(DIGEST),
            _config_map(SCRIPTS, immutable=False),
            "SourceMutable",
            f"{WHERE} is not immutable; recreate it with immutable: true and pin its digest",
            id="immutable false",
        ),
        pytest.param(
            _profile(DIGEST),
            {k: v for k, v in _config_map(SCRIPTS).items() if k != "immutable"},
            "SourceMutable",
            f"{WHERE} is not immutable; recreate it with immutable: true and pin its digest",
            id="immutable absent",
        ),
        pytest.param(
            _profile(DIGEST),
            _config_map(SCRIPTS, immutable="true"),
            "SourceMutable",
            f"{WHERE} is not immutable; recreate it with immutable: true and pin its digest",
            id="immutable the string 'true' is not immutable",
        ),
        pytest.param(
            _profile(DIGEST, "inventory.sh", "missing.sh"),
            _config_map(SCRIPTS),
            "ScriptKeyMissing",
            f"{WHERE} has no key missing.sh; add it or fix scriptKey",
            id="one scriptKey in neither data nor binaryData",
        ),
        pytest.param(
            _profile(DIGEST, "z.sh", "inventory.sh", "a.sh", "z.sh2"),
            _config_map(SCRIPTS, BINARY),
            "ScriptKeyMissing",
            f"{WHERE} has no key a.sh, z.sh, z.sh2; add it or fix scriptKey",
            id="every missing key listed, sorted",
        ),
        pytest.param(
            _profile(DIGEST),
            _config_map(None),
            "ScriptKeyMissing",
            f"{WHERE} has no key inventory.sh; add it or fix scriptKey",
            id="ConfigMap without any data",
        ),
        pytest.param(
            _profile(DIGEST, "inventory.sh"),
            _config_map({"Inventory.sh": "x"}),
            "ScriptKeyMissing",
            f"{WHERE} has no key inventory.sh; add it or fix scriptKey",
            id="keys are case-sensitive",
        ),
    ],
)
def test_rejected(profile: CertificationProfile, config_map: dict[str, Any] | None, reason: str, message: str) -> None:
    result = verify_source(profile, config_map)
    assert result == SourceCheck(False, reason, message, "")


@pytest.mark.parametrize(
    "binary",
    [
        pytest.param({"tool.bin": "not base64!"}, id="invalid characters"),
        pytest.param({"tool.bin": "AAA"}, id="bad padding"),
    ],
)
def test_bad_base64_binary_data(binary: dict[str, str]) -> None:
    result = verify_source(_profile(DIGEST, "tool.bin"), _config_map(None, binary))
    assert (result.ok, result.reason, result.digest) == (False, "SourceMalformed", "")
    assert result.message.startswith(f"{WHERE}: binaryData['tool.bin'] is not valid base64")


def test_key_in_both_data_and_binary_data() -> None:
    result = verify_source(_profile(DIGEST), _config_map({"inventory.sh": "x"}, {"inventory.sh": "eA=="}))
    assert (result.ok, result.reason) == (False, "SourceMalformed")
    assert result.message == f"{WHERE}: keys present in both data and binaryData: inventory.sh"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({**SCRIPTS, "nccl.sh": SCRIPTS["nccl.sh"] + " "}, id="one byte appended"),
        pytest.param({**SCRIPTS, "extra.sh": ""}, id="an extra empty key"),
        pytest.param({"inventory.sh": SCRIPTS["inventory.sh"]}, id="a key removed"),
        pytest.param({"inventory.sh": SCRIPTS["nccl.sh"], "nccl.sh": SCRIPTS["inventory.sh"]}, id="values swapped"),
    ],
)
def test_digest_mismatch(data: dict[str, str]) -> None:
    actual = bundle_digest(data, {})
    assert actual != DIGEST
    result = verify_source(_profile(DIGEST), _config_map(data))
    assert (result.ok, result.reason, result.digest) == (False, "DigestMismatch", "")
    assert result.message == (
        f"{WHERE} has bundle digest {actual}, but the profile pins {DIGEST}; "
        "verify the scripts and update spec.source.digest"
    )


def test_digest_of_the_same_bytes_as_binary_data_matches() -> None:
    as_binary = {k: base64.b64encode(v.encode()).decode() for k, v in SCRIPTS.items()}
    result = verify_source(_profile(DIGEST), _config_map(None, as_binary))
    assert result.ok
    assert result.digest == DIGEST


def test_mismatch_is_reported_even_for_a_well_formed_other_digest() -> None:
    result = verify_source(_profile(OTHER_DIGEST), _config_map(SCRIPTS))
    assert result.reason == "DigestMismatch"
    assert DIGEST in result.message
    assert OTHER_DIGEST in result.message
    assert WHERE in result.message


def _in(namespace: str) -> CertificationProfile:
    return CertificationProfile.model_validate(ProfileBuilder("p").source(namespace=namespace).build())


@pytest.mark.parametrize(
    ("namespace", "allowed", "refused"),
    [
        pytest.param("signal-system", (), False, id="the controller's own namespace"),
        pytest.param("signal-scripts", ("signal-scripts",), False, id="a listed namespace"),
        pytest.param("kube-system", ("signal-scripts",), True, id="another namespace"),
        pytest.param("kube-system", (), True, id="nothing listed: only its own"),
        pytest.param("tenant-a", ("*",), False, id="any namespace, when asked for"),
    ],
)
def test_sources_come_only_from_allowed_namespaces(namespace: str, allowed: tuple[str, ...], refused: bool) -> None:
    check = source_namespace_refused(_in(namespace), "signal-system", allowed)
    assert (check is not None) is refused
    if check is not None:
        assert check.reason == "SourceNamespaceNotAllowed"
        assert f"namespace {namespace} is not one of them" in check.message
        assert "--source-namespaces" in check.message


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("signal-scripts", ("signal-scripts",)), (" b, a ,,a", ("a", "b")), ("", ()), ("*", ("*",))],
)
def test_parse_source_namespaces(text: str, parsed: tuple[str, ...]) -> None:
    assert parse_source_namespaces(text) == parsed
