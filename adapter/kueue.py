"""Kueue's marks on the adapter's workloads (its Pod integration): the queue label, and the pod
group of a queued multi-participant Pod check (all of its Pods admitted together, or none).
Pure; the admission policy allows exactly these (deploy/base/adapter-admission-policy.yaml)."""

from typing import Any, Final

from adapter.inputs import Inputs

KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_COUNT: Final = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_RETRIABLE_IN_GROUP: Final = "kueue.x-k8s.io/retriable-in-group"
KUEUE_WORKLOAD_API: Final = "kueue.x-k8s.io/v1beta2"
KUEUE_WORKLOADS: Final = "workloads"
"""Kueue's Workload of a pod group is named after the group; the adapter deletes its own groups'
(and only those: deploy/base/adapter-kueue-admission-policy.yaml) so that Kueue frees their Pods."""
KUEUE_ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue puts on a queued Pod and lifts when its queue admits it."""


def pod_group(inputs: Inputs) -> tuple[str, int] | None:
    """(name, total count) of the Kueue pod group of a Pod check that names a queue and has
    more than one participant, or None. Kueue admits the group's Pods together or none of
    them (it keeps each gated until the whole group fits the queue's quota), so a check never
    starts on part of its group and waits for the rest until its deadline. The name is the
    Run's and check's, ``sig-<run uid>-c<check index>`` (at most 44 characters: a label value
    and a Workload name; the adapter's admission policy admits only its own Run's), the count
    the number of participants."""
    if inputs.check.backend != "Pod" or not inputs.check.workload.kueue_queue_name or len(inputs.participants) < 2:
        return None
    return f"sig-{inputs.run_uid}-c{inputs.check_index}", len(inputs.participants)


def add_pod_group(inputs: Inputs, metadata: dict[str, Any]) -> None:
    """Put a backend Pod's pod-group label and annotations into ``metadata`` (when it has one)."""
    group = pod_group(inputs)
    if group is not None:
        metadata["labels"][KUEUE_POD_GROUP_LABEL] = group[0]
        metadata["annotations"] = {KUEUE_POD_GROUP_COUNT: str(group[1]), KUEUE_RETRIABLE_IN_GROUP: "false"}
