"""What a profile needs from the cluster besides Nodes: the MPI operator's MPIJob API for a
profile with an MPIJob check. Pure; controller/reconcile/profiles.py asks the API server's discovery
(kubeio/discovery.py) and acts on the answer.

A profile with an MPIJob check on a cluster that does not serve ``mpijobs.kubeflow.org/v2beta1``
(the Kubeflow MPI operator's CRD is not installed) is not Admissible (reason
``MPIJobCRDNotInstalled``): no Run is admitted for it, so none can wedge on the missing API.
Pod-only profiles are not affected. The controller does not watch CRDs (it may not read them):
it asks discovery again on every pass of such a profile, and a profile held back this way is
looked at again every ``RECHECK_SECONDS`` (and on every resync), so that it becomes Admissible
within that time of the CRD being installed."""

from shared import keys
from shared.profile import CertificationProfile

RECHECK_SECONDS = 10.0
"""How often a profile held back for a missing MPIJob API is looked at again."""
NOT_INSTALLED_REASON = "MPIJobCRDNotInstalled"


def mpijob_checks(profile: CertificationProfile) -> list[str]:
    """The names of the profile's MPIJob checks, in suite order."""
    return [c.name for c in profile.spec.checks if c.backend == "MPIJob"]


def missing_mpijob_api(profile: CertificationProfile, served: bool | None) -> str | None:
    """Why ``profile`` cannot be admitted on a cluster where MPIJobs are ``served`` (None: not
    asked, because the profile has no MPIJob check), or None when nothing is missing."""
    checks = mpijob_checks(profile)
    if not checks or served is not False:
        return None
    names = ", ".join(checks)
    return (
        f"check{'s' if len(checks) > 1 else ''} {names} use{'' if len(checks) > 1 else 's'} the MPIJob backend, but "
        f"the API server does not serve {keys.MPIJOB_PLURAL} in {keys.MPIJOB_API_VERSION}: the CRD "
        f"{keys.MPIJOB_CRD} (the Kubeflow MPI operator's) is not installed. No Run is admitted for this profile "
        f"until it is; install the MPI operator (docs/operator-guide.md) or remove the MPIJob checks. Looked at "
        f"again every {RECHECK_SECONDS:.0f}s."
    )
