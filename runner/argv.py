"""The runner's command line, ``signal-runner ROLE [--option VALUE | --option=VALUE]...``, as the
adapter writes it into the Pod spec, parsed without argparse.

argparse, with the gettext and shutil (and through it bz2 and lzma) it imports to format its
help, was a tenth of every runner's start, and a check starts one runner per participant and
per MPI rank. This parser knows the runner's few options and nothing else: each takes one
value, converted by its ``kind``; a wrong command line exits 2 with a message that names the
role and the option, as argparse would. Pure apart from printing the help and the errors.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # mypy takes the name as true; the runner's start imports no typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import SimpleNamespace
    from typing import NamedTuple, NoReturn
else:
    from shared.lighttuple import NamedTuple

    SimpleNamespace = type(sys.implementation)  # what types.py names so, without importing it


class Option(NamedTuple):
    """One ``--name VALUE`` option of a role; its attribute is ``name`` in snake_case."""

    name: str
    kind: Callable[[str], object]
    required: bool = False
    default: object = None
    choices: range | None = None
    help: str = ""

    @property
    def dest(self) -> str:
        return self.name.removeprefix("--").replace("-", "_")


class Role(NamedTuple):
    options: tuple[Option, ...]
    handler: Callable[[SimpleNamespace], int]


class Parser:
    """``parse_args`` gives a namespace with ``role``, ``handler`` and every option of the role
    (its default when absent); ``-h``/``--help`` prints the usage and exits 0."""

    def __init__(self, prog: str, description: str, roles: Mapping[str, Role]) -> None:
        self.prog = prog
        self.description = description
        self.roles = dict(roles)

    def usage(self) -> str:
        lines = [f"usage: {self.prog} {{{','.join(self.roles)}}} [options]", "", self.description, ""]
        for name, role in self.roles.items():
            lines.append(f"{self.prog} {name}")
            for option in role.options:
                value = "VALUE" if option.choices is None else "{" + ",".join(map(str, option.choices)) + "}"
                note = "required" if option.required else f"default {option.default}"
                lines.append(f"  {option.name} {value}  {option.help + '; ' if option.help else ''}{note}")
        return "\n".join(lines)

    def help(self) -> NoReturn:
        print(self.usage())
        raise SystemExit(0)

    def error(self, message: str) -> NoReturn:
        print(f"usage: {self.prog} {{{','.join(self.roles)}}} [options]", file=sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def parse_args(self, argv: Sequence[str] | None = None) -> SimpleNamespace:
        words = list(sys.argv[1:] if argv is None else argv)
        if words[:1] in (["-h"], ["--help"]):
            self.help()
        if not words:
            self.error(f"the role is required (one of {', '.join(self.roles)})")
        name, rest = words[0], words[1:]
        role = self.roles.get(name)
        if role is None:
            self.error(f"unknown role {name!r} (one of {', '.join(self.roles)})")
        options = {option.name: option for option in role.options}
        values: dict[str, object] = {}
        while rest:
            word = rest.pop(0)
            if word in ("-h", "--help"):
                self.help()
            key, has_value, value = word.partition("=")
            option = options.get(key)
            if option is None:
                self.error(f"{name}: unknown argument {word!r} (options: {', '.join(options) or 'none'})")
            if not has_value:
                if not rest:
                    self.error(f"{name}: {key} needs a value")
                value = rest.pop(0)
            values[option.dest] = self._convert(name, option, value)
        missing = [o.name for o in role.options if o.required and o.dest not in values]
        if missing:
            self.error(f"{name}: the following arguments are required: {', '.join(missing)}")
        namespace = SimpleNamespace(role=name, handler=role.handler)
        for option in role.options:
            setattr(namespace, option.dest, values.get(option.dest, option.default))
        return namespace

    def _convert(self, role: str, option: Option, value: str) -> object:
        try:
            converted = option.kind(value)
        except ValueError:
            self.error(f"{role}: {option.name}: invalid value {value!r}")
        if option.choices is not None and converted not in option.choices:
            self.error(f"{role}: {option.name}: {value!r} is not one of {list(option.choices)}")
        return converted
