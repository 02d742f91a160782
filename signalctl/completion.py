"""``signalctl completion bash|zsh|fish``: a shell completion script, generated from the
argument parser itself (so a subcommand another module registers is completed without an
edit here). Pure but for ``cmd_completion``'s print.

Each script finds the command path typed so far (``get runs``) by walking the words that are
not options, then offers that path's subcommands and options; after an option with fixed
choices (``-o``) it offers the choices; after ``describe run``, ``describe node``, ``get
nodes``, ``get profiles`` and the commands taking a RUN it asks ``signalctl get ... -o name``
for the names (silently nothing when the cluster is unreachable).

Load: ``source <(signalctl completion bash)``; zsh ``source <(signalctl completion zsh)``;
fish ``signalctl completion fish | source``. The scripts complete both ``signalctl`` and
``kubectl-signal``."""

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh", "fish")
NAMES = ("signalctl", "kubectl-signal")
DYNAMIC = {
    "describe run": "runs",
    "evidence verify": "runs",
    "cancel": "runs",
    "release": "runs",
    "describe node": "nodes",
    "get nodes": "nodes",
    "get profiles": "profiles",
}
"""Command paths whose positional argument names an object, and the ``get`` that lists them."""
CONNECTION = ("-n", "--namespace", "--context", "--kubeconfig")
"""Options typed so far that the name lookups pass on (the same cluster, context and namespace)."""
CONNECTION_BASH = "|".join(CONNECTION)
CONNECTION_FISH = " ".join(CONNECTION)


@dataclass
class Node:
    """One command path: its subcommands, options and the options' fixed choices."""

    subcommands: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    choices: dict[str, list[str]] = field(default_factory=dict)


def tree(parser: argparse.ArgumentParser, path: str = "") -> dict[str, Node]:
    """Every command path of ``parser`` ('' is the top), in definition order."""
    node = Node()
    found = {path: node}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                node.subcommands.append(name)
                found |= tree(sub, f"{path} {name}".strip())
        elif not action.option_strings and action.choices:  # a positional with fixed values (the shell)
            node.subcommands += [str(c) for c in action.choices]
        elif action.option_strings and action.help != argparse.SUPPRESS:
            node.options += action.option_strings
            if action.choices:
                for option in action.option_strings:
                    node.choices[option] = [str(c) for c in action.choices]
    return found


def _q(words: list[str]) -> str:
    return " ".join(words)


def choices(paths: dict[str, Node]) -> dict[str, list[str]]:
    """Each option's fixed values, over every command that has it (``-o``: all the forms)."""
    merged: dict[str, list[str]] = {}
    for node in paths.values():
        for option, values in node.choices.items():
            merged[option] = list(dict.fromkeys([*merged.get(option, []), *values]))
    return merged


def bash(paths: dict[str, Node]) -> str:
    known = "|".join(f'"{p}"' for p in paths if p)
    choice_cases = choices(paths)
    lines = [
        "# bash completion for signalctl (signalctl completion bash)",
        "_signalctl() {",
        '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmdpath="" w i words=""',
        "  local -a conn=()",
        "  for ((i = 1; i < COMP_CWORD; i++)); do",
        '    w="${COMP_WORDS[i]}"',
        f'    case "$w" in {CONNECTION_BASH}) conn+=("$w" "${{COMP_WORDS[i+1]}}") ;; esac',
        '    case "$w" in -*) continue ;; esac',
        '    local next="${cmdpath:+$cmdpath }$w"',
        f'    case "$next" in {known}) cmdpath="$next" ;; esac',
        "  done",
        '  case "$prev" in',
    ]
    lines += [
        f'    {opt}) COMPREPLY=($(compgen -W "{_q(vals)}" -- "$cur")); return ;;' for opt, vals in choice_cases.items()
    ]
    lines += ["  esac", '  case "$cmdpath" in']
    for path, node in paths.items():
        words = _q(node.subcommands + node.options)
        dynamic = DYNAMIC.get(path)
        if dynamic:
            words += f""" $("${{COMP_WORDS[0]}}" get {dynamic} -o name "${{conn[@]}}" 2>/dev/null | sed 's|.*/||')"""
        lines.append(f'    "{path}") words="{words}" ;;')
    lines += [
        "  esac",
        '  COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        *(f"complete -F _signalctl {name}" for name in NAMES),
    ]
    return "\n".join(lines) + "\n"


def zsh(paths: dict[str, Node]) -> str:
    known = "|".join(f'"{p}"' for p in paths if p)
    lines = [
        f"#compdef {' '.join(NAMES)}",
        "# zsh completion for signalctl (signalctl completion zsh)",
        "_signalctl() {",
        '  local cmdpath="" w i next prev="${words[CURRENT-1]}"',
        "  local -a conn",
        "  for ((i = 2; i < CURRENT; i++)); do",
        '    w="${words[i]}"',
        f'    case "$w" in ({CONNECTION_BASH}) conn+=("$w" "${{words[i+1]}}") ;; esac',
        '    [[ "$w" == -* ]] && continue',
        '    next="${cmdpath:+$cmdpath }$w"',
        f'    case "$next" in ({known}) cmdpath="$next" ;; esac',
        "  done",
        '  case "$prev" in',
    ]
    for option, values in choices(paths).items():
        lines.append(f"    ({option}) compadd -- {_q(values)}; return ;;")
    lines += ["  esac", '  case "$cmdpath" in']
    for path, node in paths.items():
        dynamic = DYNAMIC.get(path)
        fetch = ""
        if dynamic:
            lookup = f""""${{words[1]}}" get {dynamic} -o name "${{conn[@]}}" 2>/dev/null | sed 's|.*/||'"""
            fetch = f"""; compadd -- ${{(f)"$({lookup})"}}"""
        lines.append(f'    ("{path}") compadd -- {_q(node.subcommands + node.options)}{fetch} ;;')
    lines += ["  esac", "}", f"compdef _signalctl {' '.join(NAMES)}"]
    return "\n".join(lines) + "\n"


def fish(paths: dict[str, Node]) -> str:
    known = " ".join(f"'{p}'" for p in paths if p)
    lines = [
        "# fish completion for signalctl (signalctl completion fish)",
        "function __signalctl_path",
        "    set -l cmdpath ''",
        "    for w in (commandline -opc)[2..-1]",
        "        string match -q -- '-*' $w; and continue",
        '        set -l next (string trim -- "$cmdpath $w")',
        f"        contains -- $next {known}; and set cmdpath $next",
        "    end",
        "    echo $cmdpath",
        "end",
        "function __signalctl_connection",
        "    set -l words (commandline -opc)",
        "    for i in (seq 2 (count $words))",
        f"        if contains -- $words[$i] {CONNECTION_FISH}; and test $i -lt (count $words)",
        "            printf '%s\\n' $words[$i] $words[(math $i + 1)]",
        "        end",
        "    end",
        "end",
    ]
    for name in NAMES:
        lines.append(f"complete -c {name} -f")
        for path, node in paths.items():
            condition = f"test (__signalctl_path) = '{path}'"
            if node.subcommands:
                lines.append(f'complete -c {name} -n "{condition}" -a "{_q(node.subcommands)}"')
            for option in node.options:
                flag = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
                values = next((v for o, v in node.choices.items() if o == option), None)
                extra = f' -r -a "{_q(values)}"' if values else ""
                lines.append(f'complete -c {name} -n "{condition}" {flag}{extra}')
            dynamic = DYNAMIC.get(path)
            if dynamic:
                lookup = f"{name} get {dynamic} -o name (__signalctl_connection) 2>/dev/null"
                fetch = f"({lookup} | string replace -r '.*/' '')"
                lines.append(f'complete -c {name} -n "{condition}" -a "{fetch}"')
    return "\n".join(lines) + "\n"


RENDERERS = {"bash": bash, "zsh": zsh, "fish": fish}


OUTSIDE_PARSER = ("demo",)
"""Commands signalctl/main.py dispatches before the parser (so that it loads lazily)."""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    paths = tree(parser)
    paths[""].subcommands += OUTSIDE_PARSER
    return RENDERERS[shell](paths)


def register(
    commands: "argparse._SubParsersAction[argparse.ArgumentParser]", parser: Callable[[], argparse.ArgumentParser]
) -> None:
    """``completion SHELL``; ``parser`` builds the whole command line to complete."""
    completion = commands.add_parser("completion", help="print a shell completion script (bash, zsh, fish)")
    completion.add_argument("shell", choices=SHELLS)

    def offline(args: argparse.Namespace) -> int:
        print(script(parser(), args.shell), end="")
        return 0

    completion.set_defaults(handler=None, offline=offline)
