"""The catalog's profile examples (checks/*/profile.yaml): each names its own script, passes only
parameters its script reads (names as Signal allows them), and - once the CRD carries
``parameters`` - validates as a CertificationProfile."""

import re

import pytest
import yaml

from shared.profile import CertificationProfile, Check
from tests.unit.catalog_support import CHECKS, load_check

PARAMETER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")
CATALOG = {
    "gpu-inventory": "gpu_inventory.py",
    "dcgm-diag": "dcgm_diag.py",
    "nccl-intranode": "nccl_intranode.py",
    "ib-bandwidth": "ib_bandwidth.py",
}


@pytest.mark.parametrize(("check", "script"), sorted(CATALOG.items()))
def test_profile_names_its_script_and_only_parameters_it_reads(check: str, script: str) -> None:
    document = yaml.safe_load((CHECKS / check / "profile.yaml").read_text(encoding="utf-8"))
    [entry] = document["spec"]["checks"]
    assert entry["scriptKey"] == script
    assert (CHECKS / check / script).is_file()
    module = load_check(check, script)
    for name, value in entry.get("parameters", {}).items():
        assert PARAMETER_NAME.match(name), name
        assert name in module.PARAMETERS, f"{check}: {name} is not a parameter of {script}"
        assert isinstance(value, str)
    if "parameters" in Check.model_fields:
        CertificationProfile.model_validate(document)


@pytest.mark.parametrize(("check", "script"), sorted(CATALOG.items()))
def test_a_profile_left_with_its_placeholders_is_inconclusive_never_pass(check: str, script: str) -> None:
    """Thresholds ship as CHANGE-ME: the script refuses them as configuration errors."""
    document = yaml.safe_load((CHECKS / check / "profile.yaml").read_text(encoding="utf-8"))
    params = document["spec"]["checks"][0].get("parameters", {})
    module = load_check(check, script)
    if any(v == "CHANGE-ME" for v in params.values()):
        assert module.config_problems(params)
