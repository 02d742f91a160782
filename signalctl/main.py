"""Entry point of ``signalctl``: dispatches to subcommands."""

import sys

USAGE = """usage: signalctl COMMAND [options]

commands:
  demo    start the local control plane with a simulated GPU fleet (Ctrl-C stops it)
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help"}:
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "demo":
        from signalctl import demo  # noqa: PLC0415 - the demo pulls in the local cluster; load it only when asked

        return demo.main(rest)
    print(f"signalctl: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
