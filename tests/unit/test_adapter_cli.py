"""The ``check`` template of the adapter's WorkflowTemplate calls ``signal-adapter`` with
args that its argument parser must accept: every flag the template passes is known, every
required flag is passed, and the values land where parse_inputs expects them."""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from adapter import main as adapter_main
from adapter.check import Report, Settings
from adapter.inputs import Refusal, parse_inputs
from adapter.workflow_template import OUTPUT_DEFAULTS, OUTPUT_DIR, build_workflow_template
from kubeio.errors import TransportError
from shared import keys
from shared.verdict import Verdict
from tests.unit.signal_builders import NAMESPACE, RUN_NAME, RUN_UID, SNAPSHOT, check_doc, make_inputs, participant_docs

PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
SAMPLES = {
    "workflow.parameters.run-namespace": NAMESPACE,
    "workflow.parameters.run-name": RUN_NAME,
    "workflow.parameters.run-uid": RUN_UID,
    "workflow.parameters.participants-json": json.dumps(participant_docs(2), separators=(",", ":")),
    "workflow.parameters.snapshot": SNAPSHOT,
    "inputs.parameters.index": "0",
    "inputs.parameters.check": json.dumps(check_doc(), sort_keys=True, separators=(",", ":")),
}


@pytest.fixture(scope="module")
def check_template() -> dict[str, Any]:
    doc = build_workflow_template()
    found = [t for t in doc["spec"]["templates"] if t["name"] == "check"]
    assert len(found) == 1
    return found[0]


@pytest.fixture(scope="module")
def template_args(check_template: dict[str, Any]) -> list[str]:
    container = check_template["container"]
    assert container["command"] == ["signal-adapter"]
    args = container["args"]
    assert all(isinstance(a, str) for a in args)
    return list(args)


def substitute(arg: str) -> str:
    def value(match: re.Match[str]) -> str:
        key = match.group(1).strip()
        assert key in SAMPLES, f"no sample value for placeholder {{{{{key}}}}}"
        return SAMPLES[key]

    return PLACEHOLDER.sub(value, arg)


def parser_flags() -> dict[str, argparse.Action]:
    return {flag: action for action in adapter_main.parser()._actions for flag in action.option_strings}


def test_every_placeholder_names_a_template_input_or_workflow_parameter(
    check_template: dict[str, Any], template_args: list[str]
) -> None:
    inputs = {p["name"] for p in check_template["inputs"]["parameters"]}
    for arg in template_args:
        for key in PLACEHOLDER.findall(arg):
            scope, _, name = key.strip().rpartition(".")
            if scope == "workflow.parameters":
                assert name in keys.WORKFLOW_PARAMETERS
            else:
                assert scope == "inputs.parameters"
                assert name in inputs


def test_args_are_flag_value_pairs_of_known_flags(template_args: list[str]) -> None:
    known = parser_flags()
    assert len(template_args) % 2 == 0
    flags = template_args[0::2]
    values = template_args[1::2]
    for flag in flags:
        assert flag.startswith("--"), f"{flag!r} is not a flag"
        assert flag in known, f"the template passes {flag}, which signal-adapter does not know"
        assert known[flag].nargs is None  # takes exactly one value
    assert len(set(flags)) == len(flags), "a flag is passed twice"
    assert not any(v.startswith("--") for v in values)


def test_every_required_flag_is_passed(template_args: list[str]) -> None:
    required = {flag for action in adapter_main.parser()._actions if action.required for flag in action.option_strings}
    assert required
    assert required <= set(template_args[0::2])


def test_substituted_args_parse_to_the_sample_values(template_args: list[str]) -> None:
    args = adapter_main.parser().parse_args([substitute(a) for a in template_args])
    assert args.run_namespace == NAMESPACE
    assert args.run_name == RUN_NAME
    assert args.run_uid == RUN_UID
    assert json.loads(args.participants_json) == participant_docs(2)
    assert args.snapshot == SNAPSHOT
    assert args.check_index == "0"
    assert json.loads(args.check_json) == check_doc()
    assert args.output_dir == Path(OUTPUT_DIR)
    assert args.kubeconfig is None
    assert args.log_format == "json"
    inputs = parse_inputs(
        run_namespace=args.run_namespace,
        run_name=args.run_name,
        run_uid=args.run_uid,
        participants_json=args.participants_json,
        snapshot=args.snapshot,
        check_index=args.check_index,
        check_json=args.check_json,
    )
    assert inputs == make_inputs(2)


@pytest.mark.parametrize(
    "check_json",
    [
        # Go's encoder escapes <, > and & in strings; still one argv element and valid JSON.
        '{"backend":"Pod","backendActiveDeadline":"5m","name":"inventory","scriptKey":"a\\u0026b.sh"}',
        # White space and newlines inside the value are still one argv element.
        '{"backend": "Pod",\n "backendActiveDeadline": "5m", "name": "inventory", "scriptKey": "x.sh"}',
    ],
)
def test_unusual_check_json_values_stay_one_argument(template_args: list[str], check_json: str) -> None:
    samples = dict(SAMPLES)
    samples["inputs.parameters.check"] = check_json
    argv = [PLACEHOLDER.sub(lambda m: samples[m.group(1).strip()], a) for a in template_args]
    args = adapter_main.parser().parse_args(argv)
    assert args.check_json == check_json


def test_output_dir_matches_the_output_parameters(check_template: dict[str, Any], template_args: list[str]) -> None:
    output_dir = template_args[template_args.index("--output-dir") + 1]
    assert output_dir == OUTPUT_DIR
    outputs = {p["name"]: p for p in check_template["outputs"]["parameters"]}
    assert set(outputs) == set(OUTPUT_DEFAULTS)
    for name, parameter in outputs.items():
        assert parameter["valueFrom"]["path"] == f"{output_dir}/{name}"
        assert parameter["valueFrom"]["default"] == OUTPUT_DEFAULTS[name]


@pytest.mark.parametrize("dropped", ["--run-uid", "--participants-json", "--snapshot"])
def test_parser_refuses_missing_required_flag(template_args: list[str], dropped: str) -> None:
    argv = [substitute(a) for a in template_args]
    at = argv.index(dropped)
    del argv[at : at + 2]
    with pytest.raises(SystemExit):
        adapter_main.parser().parse_args(argv)


@pytest.mark.parametrize("dropped", ["--check-json", "--check-index"])
def test_a_check_step_without_its_check_is_refused(template_args: list[str], dropped: str) -> None:
    """The parser allows it (the exit handler's --sweep-checks-json takes its place); the
    adapter refuses (exit 2) before it connects to anything."""
    argv = [substitute(a) for a in template_args]
    at = argv.index(dropped)
    del argv[at : at + 2]
    assert adapter_main.main([*argv, "--kubeconfig", "/nonexistent/kubeconfig"]) == 2


def test_parser_refuses_unknown_flag(template_args: list[str]) -> None:
    with pytest.raises(SystemExit):
        adapter_main.parser().parse_args([*[substitute(a) for a in template_args], "--no-such-flag", "x"])


def test_parser_defaults_and_options() -> None:
    base = [
        f"--{name}=v"
        for name in (
            "run-namespace",
            "run-name",
            "run-uid",
            "participants-json",
            "snapshot",
            "check-index",
            "check-json",
        )
    ]
    args = adapter_main.parser().parse_args(base)
    assert args.runner_image == "projectsignal.dev/runner:0.1.0"
    assert args.mpi_worker_sshd == "/usr/sbin/sshd"
    assert args.start_grace_seconds == 60.0
    assert args.quiesce_seconds == 60.0
    args = adapter_main.parser().parse_args([*base, "--log-format", "console", "--start-grace-seconds", "2.5"])
    assert (args.log_format, args.start_grace_seconds) == ("console", 2.5)
    with pytest.raises(SystemExit):
        adapter_main.parser().parse_args([*base, "--log-format", "xml"])


def test_the_adapter_process_does_not_import_hera() -> None:
    """The adapter starts once per check (every step of every Run): it reads its step's
    interface from adapter/step.py, never through hera's generated Argo models, whose import
    cost each step about a second (issue 15 goal 5)."""
    probe = "import sys, adapter.main; print(sorted({m.split('.')[0] for m in sys.modules} & {'hera'}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


class _ClosingKube:
    async def close(self) -> None:
        return None


async def test_the_sweep_cleans_every_check_whatever_one_of_them_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exit handler sweeps each check apart: the first check's clean-up failing (the API
    gone after the client's retries, or evidence it will not adopt) still leaves the second's,
    usually the interrupted check with the leftovers, swept; the step then fails naming check 0.
    The clean-up itself is scripted here: what is under test is the loop over the checks."""
    swept: list[int] = []

    async def connect(**_: Any) -> _ClosingKube:
        return _ClosingKube()

    async def clean_up(kube: Any, inputs: Any, settings: Any) -> Report:
        swept.append(inputs.check_index)
        if inputs.check_index == 0:
            raise TransportError("connection reset", "GET", "/api/v1/pods")
        return Report(Verdict.INCONCLUSIVE, "", "", proceed=False)

    monkeypatch.setattr(adapter_main.Kube, "connect", staticmethod(connect))
    monkeypatch.setattr(adapter_main, "clean_up", clean_up)
    checks = [check_doc(), {**check_doc(), "name": "second"}]
    argv = ["--run-namespace", NAMESPACE, "--run-name", RUN_NAME, "--run-uid", RUN_UID]
    argv += ["--participants-json", json.dumps(participant_docs(2)), "--snapshot", SNAPSHOT]
    argv += ["--sweep-checks-json", json.dumps(checks)]
    args = adapter_main.parser().parse_args(argv)
    with pytest.raises(Refusal, match=r"could not clean up 1 check\(s\) \(check 0: "):
        await adapter_main.sweep(args, Settings(runner_image=args.runner_image))
    assert swept == [0, 1]
