"""The fixed Argo WorkflowTemplate that runs one certification Run's checks, built with hera.

What it does: ``build_workflow_template(image)`` is a pure function that returns the
``signal-adapter`` WorkflowTemplate as a plain dict; ``render()`` turns it into the YAML text
committed at ``deploy/base/adapter-workflowtemplate.yaml``; ``main()`` (``python -m
adapter.workflow_template``) writes that file. A unit test regenerates it in memory and fails
on drift, as for ``crds/``.

What it must not do: talk to a cluster (hera's ``build()``/``to_dict()`` are pure), read the
environment, or embed anything Run-specific. Everything about one Run arrives as Workflow
parameters set by the controller at submission; ``activeDeadlineSeconds`` and cleanup belong to
the controller's Workflow, so the template sets neither it nor a ``ttlStrategy``.

Who uses it: ``deploy/`` (kustomize base), the controller (submits Workflows with
``workflowTemplateRef: signal-adapter`` and the parameters in ``WORKFLOW_PARAMETERS``) and the
adapter (its command line is the ``check`` template's args; it writes its four outputs under
``/tmp/signal``).

Strictly serial execution of a run-time number of checks (1..32): the entrypoint ``suite`` is a
recursive steps template with input ``index`` (default ``"0"``).

* Step ``check`` runs template ``check`` for ``checks[index]``. The single check is selected with
  ``{{=toJson(jsonpath(workflow.parameters.checks, '$[' + inputs.parameters.index + ']'))}}``:
  Argo 4's ``jsonpath`` (evilmonkeyinc/jsonpath) returns the element itself for a single index
  on a root array, and Argo's ``toJson`` re-encodes it compactly (Go's encoder: object keys
  sorted, ``<>&`` escaped as ``\\u003c`` etc.), so the adapter must parse it as JSON, never
  compare bytes. The expression has no ``?``, which Argo would treat as a ternary.
* Step ``next`` calls ``suite`` with ``index + 1`` only ``when``
  ``<index+1> < <check-count> && '<proceed>' == 'true'``. ``check-count`` comes from the
  controller so no expression has to count; ``proceed`` is the check step's output parameter,
  which defaults to ``"false"`` so a crashed adapter never reads as proceed. A failed ``check``
  step fails its step group, so ``next`` never starts either. After substitution the
  condition is e.g. ``1 < 3 && 'true' == 'true'``, valid for Argo's ``when`` evaluator; the
  adapter must write exactly ``true`` (Argo trims one trailing newline) for the suite to go on.
* The recursion nests at most 32 ``suite`` levels, below the controller's default stack depth (100), and
  ``spec.parallelism: 1`` keeps a single pod at a time as a second guard.
* Stopping: the controller stops a Workflow (cancel, suite deadline) with Argo's ``Stop``.
  Argo's v4 executor kills the running step's adapter at once (it SIGKILLs its child right
  after forwarding SIGTERM), so the adapter's own SIGTERM handling (evidence first, then
  quiescence) can only help where a SIGTERM comes with time to act. Whatever stopped the
  Workflow short of success (Stop, the deadline, a failed step, a killed adapter), the exit
  handler ``exit`` then runs the adapter with ``--sweep-checks-json``: every check's leftover
  workloads are removed, evidence first (a Succeeded Workflow skips it: its checks all proved
  their workloads gone). ``Terminate`` would skip exit handlers; the controller never uses
  it. The step Pods' ``terminationGracePeriodSeconds`` (``podSpecPatch``) is the time a
  SIGTERM'd adapter would have.
* Images: the adapter image is the ``check`` and ``sweep`` containers' ``image``; the runner
  image reaches the adapter as ``SIGNAL_RUNNER_IMAGE`` (the default of ``--runner-image``).
  Both are image fields for kustomize (``deploy/base/kustomizeconfig.yaml``), so one
  ``images:`` entry per image sets them, by digest.

* Placement (docs/security.md, "Adapter containment"): every step Pod holds the adapter's
  token, so none may run on a Node under test. The Workflow-level ``affinity`` (Argo applies
  it to every Pod of the Workflow) requires Nodes *without* Signal's request label
  (``node-restriction.kubernetes.io/signal.certify``) and reservation label (``projectsignal.dev/reserved-by``);
  the template tolerates no Signal taint, so a cordoned (reserved) Node is out as well. And
  the ``nodeSelector`` is mandatory: trusted Nodes carry a label no kubelet can set on its own
  Node (``StepPlacement``, default ``node-restriction.kubernetes.io/signal.trusted=true``, set
  by an admin; an empty or kubelet-writable selector is refused), so a Node that drops its own
  request label still never receives a step Pod; the admission policy
  ``signal-identities`` refuses an adapter Pod without it. ``podGC: OnPodCompletion`` deletes
  every step Pod, and with it the adapter's token, when the step ends (issue 42 M-C). An
  operator changes the selector and tolerations for those Nodes' own taints with
  ``StepPlacement``, or patches ``spec.nodeSelector`` / ``spec.tolerations`` in an overlay. A
  ``crossNode`` MPI launcher shares the requirement (``adapter.workloads``).

These semantics were checked offline against Argo v4.0.5's own Go code (template validation,
``ProcessArgs`` substitution, ``ReplaceStrict`` and the steps ``when`` evaluator), not on a
running Argo controller.
"""

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from hera.workflows import (
    Container,
    EmptyDirVolume,
    Env,
    Parameter,
    Resources,
    SecretVolume,
    Step,
    Steps,
    WorkflowTemplate,
)
from hera.workflows.models import (
    Affinity,
    Capabilities,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodGC,
    SeccompProfile,
    SecurityContext,
    Toleration,
    ValueFrom,
)

from adapter.placement import NOT_UNDER_TEST, TRUSTED_SELECTOR_ENV
from adapter.step import OUTPUT_DEFAULTS, OUTPUT_DIR, RUNNER_IMAGE_ENV
from shared import keys
from shared.artifacts import STORE_MOUNT, STORE_SECRET
from shared.digests import template_digest

DEFAULT_IMAGE: Final = "projectsignal.dev/adapter:0.1.0"
DEFAULT_RUNNER_IMAGE: Final = keys.DEFAULT_RUNNER_IMAGE
TERMINATION_GRACE_SECONDS: Final = 150
"""SIGTERM to SIGKILL for a step: the adapter's quiescence bound (60 s) and evidence writes fit."""
POD_GC_STRATEGY: Final = "OnPodCompletion"
"""Argo deletes each step Pod as soon as it completes, whatever its outcome."""
NAME: Final = keys.WORKFLOW_TEMPLATE
SERVICE_ACCOUNT: Final = "signal-adapter"
LABELS: Final = {"app.kubernetes.io/name": "project-signal", "app.kubernetes.io/component": "adapter"}
OUTPUT_PATH: Final = Path(__file__).resolve().parents[1] / "deploy" / "base" / "adapter-workflowtemplate.yaml"
COMMAND: Final = "python -m adapter.workflow_template"
HEADER: Final = f"# Generated by `{COMMAND}`. Do not edit.\n"

WORKFLOW_PARAMETERS: Final = keys.WORKFLOW_PARAMETERS
"""Workflow-level parameters, all strings, supplied by the controller at submission."""

CHECK_JSON: Final = "{{=toJson(jsonpath(workflow.parameters.checks, '$[' + inputs.parameters.index + ']'))}}"
NEXT_INDEX: Final = "{{=asInt(inputs.parameters.index) + 1}}"
CONTINUE_WHEN: Final = (
    f"{NEXT_INDEX} < {{{{workflow.parameters.check-count}}}}"
    " && '{{steps.check.outputs.parameters.proceed}}' == 'true'"
)


def _adapter_args(*, sweep: bool = False) -> list[str]:
    """The adapter's command line for one check (or, ``sweep``, for the exit handler):
    flag, value, flag, value, ..."""
    pairs = [
        ("--run-namespace", "{{workflow.parameters.run-namespace}}"),
        ("--run-name", "{{workflow.parameters.run-name}}"),
        ("--run-uid", "{{workflow.parameters.run-uid}}"),
        ("--participants-json", "{{workflow.parameters.participants-json}}"),
        ("--snapshot", "{{workflow.parameters.snapshot}}"),
    ]
    if sweep:
        pairs += [("--sweep-checks-json", "{{workflow.parameters.checks}}")]
    else:
        pairs += [
            ("--check-index", "{{inputs.parameters.index}}"),
            ("--check-json", "{{inputs.parameters.check}}"),
            ("--output-dir", OUTPUT_DIR),
        ]
    return [part for pair in pairs for part in pair]


def _security_context() -> SecurityContext:
    return SecurityContext(
        run_as_non_root=True,
        run_as_user=65532,
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        capabilities=Capabilities(drop=["ALL"]),
        seccomp_profile=SeccompProfile(type="RuntimeDefault"),
    )


@dataclass(frozen=True)
class StepPlacement:
    """Where the adapter's step Pods may run: Nodes the operator trusts. Never a Node under
    test, whatever is set here (``_step_affinity``)."""

    node_selector: Mapping[str, str] = field(default_factory=lambda: {keys.TRUSTED_NODE_LABEL: "true"})
    """Labels of the trusted Nodes: mandatory, and at least one under
    ``node-restriction.kubernetes.io/``, which no kubelet may set on its own Node (issue 42
    M-C: a Node that can drop its request label must not be able to attract a step Pod and
    mint the adapter's token). Empty, or only kubelet-writable keys: refused (fail closed)."""
    tolerations: tuple[Mapping[str, str], ...] = ()
    """Tolerations for the trusted Nodes' own taints ({key, operator, value, effect});
    never Signal's reservation taint."""

    def __post_init__(self) -> None:
        restricted = [k for k, v in self.node_selector.items() if k.startswith(keys.NODE_RESTRICTION_PREFIX) and v]
        if not restricted:
            raise ValueError(
                f"step Pods need a trusted-node selector with at least one label under {keys.NODE_RESTRICTION_PREFIX} "
                f"(a label no kubelet can set on its own Node), e.g. {keys.TRUSTED_NODE_LABEL}=true; "
                f"got {dict(self.node_selector)!r}. Label your trusted Nodes as an admin and name that label here"
            )
        for toleration in self.tolerations:
            if toleration.get("key") in ("", None, keys.RESERVED_TAINT_KEY):
                raise ValueError(
                    f"step Pods may not tolerate {toleration!r}: name the trusted Nodes' own taint key "
                    f"(never {keys.RESERVED_TAINT_KEY}, never every taint)"
                )


def _step_affinity() -> Affinity:
    """Only Nodes that are neither requested for certification nor reserved by a Run
    (``placement.NOT_UNDER_TEST``, which a ``crossNode`` MPI launcher shares)."""
    away = [NodeSelectorRequirement(key=key, operator=operator) for key, operator in NOT_UNDER_TEST]
    required = NodeSelector(node_selector_terms=[NodeSelectorTerm(match_expressions=away)])
    return Affinity(node_affinity=NodeAffinity(required_during_scheduling_ignored_during_execution=required))


def build_workflow_template(
    image: str = DEFAULT_IMAGE, runner_image: str = DEFAULT_RUNNER_IMAGE, placement: StepPlacement | None = None
) -> dict[str, Any]:
    """The ``signal-adapter`` WorkflowTemplate as a dict (pure: no cluster I/O)."""
    placement = placement or StepPlacement()
    env = [Env(name=RUNNER_IMAGE_ENV, value=runner_image)]
    if placement and placement.node_selector:
        # crossNode launchers go to the same trusted Nodes as the steps (adapter/placement.py).
        selector = ",".join(f"{k}={v}" for k, v in sorted(placement.node_selector.items()))
        env.append(Env(name=TRUSTED_SELECTOR_ENV, value=selector))
    grace = json.dumps({"terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS})
    with WorkflowTemplate(
        api_version="argoproj.io/v1alpha1",
        kind="WorkflowTemplate",
        name=NAME,
        labels=dict(LABELS),
        entrypoint="suite",
        on_exit="exit",
        service_account_name=SERVICE_ACCOUNT,
        parallelism=1,
        arguments=[Parameter(name=name) for name in WORKFLOW_PARAMETERS],
        affinity=_step_affinity(),
        node_selector=dict(placement.node_selector),
        tolerations=[Toleration(**dict(t)) for t in placement.tolerations] if placement.tolerations else None,
        # A finished step Pod goes at once: its token (the adapter's) lives no longer than
        # the step (issue 42 M-C). Outputs reach Argo as WorkflowTaskResults, not from the Pod.
        pod_gc=PodGC(strategy=POD_GC_STRATEGY),
    ) as template:
        check = Container(
            name="check",
            image=image,
            command=["signal-adapter"],
            args=_adapter_args(),
            env=env,
            pod_spec_patch=grace,
            inputs=[Parameter(name="index"), Parameter(name="check")],
            outputs=[
                Parameter(name=name, value_from=ValueFrom(path=f"{OUTPUT_DIR}/{name}", default=default))
                for name, default in OUTPUT_DEFAULTS.items()
            ],
            security_context=_security_context(),
            volumes=[
                EmptyDirVolume(name="tmp", mount_path="/tmp"),
                # The optional artifact store's signing credential (adapter/artifacts.py): the
                # adapter's alone; absent Secret, no store.
                SecretVolume(name="artifact-store", secret_name=STORE_SECRET, mount_path=STORE_MOUNT, optional=True),
            ],
            resources=Resources(cpu_request="100m", memory_request="128Mi", memory_limit="512Mi"),
        )
        with Steps(name="suite", inputs=[Parameter(name="index", default="0")]):
            Step(
                name="check",
                template=check,
                arguments=[
                    Parameter(name="index", value="{{inputs.parameters.index}}"),
                    Parameter(name="check", value=CHECK_JSON),
                ],
            )
            Step(
                name="next",
                template="suite",
                arguments=[Parameter(name="index", value=NEXT_INDEX)],
                when=CONTINUE_WHEN,
            )
        sweep = Container(
            name="sweep",
            image=image,
            command=["signal-adapter"],
            args=_adapter_args(sweep=True),
            env=env,
            security_context=_security_context(),
            volumes=[EmptyDirVolume(name="tmp", mount_path="/tmp")],
            resources=Resources(cpu_request="100m", memory_request="128Mi", memory_limit="512Mi"),
            pod_spec_patch=grace,
        )
        with Steps(name="exit"):
            Step(name="sweep", template=sweep, when="'{{workflow.status}}' != 'Succeeded'")
    document: dict[str, Any] = template.to_dict()
    return document


def render(image: str = DEFAULT_IMAGE, runner_image: str = DEFAULT_RUNNER_IMAGE) -> str:
    """The committed YAML text: a header comment and the template."""
    body = yaml.safe_dump(build_workflow_template(image, runner_image), sort_keys=False, width=1000)
    return HEADER + body


def digest_of_rendered(text: str) -> str:
    """The content digest (``shared.digests.template_digest``) of the signal-adapter
    WorkflowTemplate in a rendered manifest (``kubectl kustomize`` output): the value of the
    controller's ``--workflow-template-digest``."""
    for document in yaml.safe_load_all(text):
        if (
            isinstance(document, dict)
            and document.get("kind") == "WorkflowTemplate"
            and (document.get("metadata") or {}).get("name") == NAME
        ):
            return template_digest(document)
    raise LookupError(f"no WorkflowTemplate {NAME} in the manifest")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--digest"]:  # kubectl kustomize deploy/ | python -m adapter.workflow_template --digest
        print(digest_of_rendered(sys.stdin.read()))
        return
    OUTPUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT_PATH.write_text(render())
    print(f"wrote {OUTPUT_PATH}")


if __name__ == "__main__":
    main()
