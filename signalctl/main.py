"""Entry point of ``signalctl``, also installed as the kubectl plugin ``kubectl-signal`` (so
``kubectl signal get runs`` works once it is on the PATH): ``demo`` goes to signalctl/demo.py
(which needs the local cluster, so it is loaded only when asked); every operator command goes
to signalctl/commands.py."""

import os
import sys

from signalctl import terminal

USAGE = """usage: signalctl COMMAND [options]   (signalctl COMMAND --help for its options)

commands:
  get runs [-A] [--profile P]        list CertificationRuns
  get profiles [PROFILE]             list CertificationProfiles and how many Nodes passed
  get nodes [NODE] [--profile P]     each Node's result per profile: fresh or stale, held or not
  describe run RUN                   a Run's status, checks, participants and Events
  describe node NODE                 every profile's result on a Node, the Run and evidence behind it, current or not
  evidence verify RUN                recompute a Run's evidence digests and decision (exit 0 ok, 1 mismatch, 2 missing)
  request PROFILE NODE... [--force]  request certification of Nodes (label .../signal.certify)
      [--dry-run]                    say per Node whether it would be eligible, or why not; write nothing
  cancel RUN                         cancel a Run (spec.cancel)
  release RUN                        release a finished Run's Nodes (spec.release)
  source push DIR --profile P        make DIR the profile's immutable source (ConfigMap, digest, profile)
  version [--client]                 the client's and the controller's versions
  completion bash|zsh|fish           print a shell completion script

  uninstall --clean-nodes [--release-held] [--dry-run]   remove every key Signal wrote on Nodes
  demo                               start the local control plane with a simulated GPU fleet (Ctrl-C stops it)

options of the operator commands:
  --kubeconfig FILE   default $KUBECONFIG (its files merged as kubectl does), then ~/.kube/config
  --context NAME      a context of the kubeconfig (default its current-context)
  -o json|yaml|name|wide, --no-headers   (get, describe) output as kubectl prints it
  -n, --namespace NS  namespace of the Runs (default signal-system, or $SIGNAL_NAMESPACE)
  --wait [--timeout 30m]  (request, cancel, release) print progress until done

As a kubectl plugin: `kubectl signal COMMAND ...` (the `kubectl-signal` command on your PATH).
"""


def program_name(argv0: str) -> str:
    """``kubectl signal`` when run as the kubectl plugin, else ``signalctl``."""
    return "kubectl signal" if os.path.basename(argv0).startswith("kubectl-") else "signalctl"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    prog = program_name(sys.argv[0])
    if not args or args[0] in {"-h", "--help"}:
        print(USAGE.replace("signalctl COMMAND", f"{prog} COMMAND"))
        return 0 if args else 2
    command, rest = args[0], args[1:]
    terminal.install()  # what follows prints text others wrote (Events, Node annotations): escaped
    if command == "demo":
        from signalctl import demo  # noqa: PLC0415 - the demo pulls in the local cluster; load it only when asked

        return demo.main(rest)
    from signalctl import commands  # noqa: PLC0415 - keeps `signalctl --help` and `demo` free of the API client

    try:
        return commands.main(args, prog)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2


if __name__ == "__main__":
    raise SystemExit(main())
