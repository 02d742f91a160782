"""``-o json|yaml|name|wide`` and ``--no-headers``, the way kubectl prints. Pure: every
renderer takes plain data and returns the text to print (no trailing newline).

* table (the default): left-aligned columns, three spaces apart; ``wide`` appends the view's
  extra columns; ``--no-headers`` drops the header line (of either);
* ``json``: one object as it is, several as ``{"apiVersion": "v1", "kind": "List", "items":
  [...]}``, indented by four spaces like kubectl;
* ``yaml``: the same document in YAML (keys in the objects' order);
* ``name``: ``<resource>/<name>`` per object (``certificationrun.projectsignal.dev/r-1``).
"""

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from signalctl.terminal import json_escape_controls

FORMATS = ("wide", "json", "yaml", "name")
Obj = dict[str, Any]


def add_flags(parser: argparse.ArgumentParser) -> None:
    """``-o/--output`` and ``--no-headers`` for a get or describe command."""
    parser.add_argument(
        "-o", "--output", choices=FORMATS, default=None, help="json, yaml, name or wide (default: a table or text)"
    )
    parser.add_argument("--no-headers", action="store_true", help="print tables without their header line")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, no_headers: bool = False) -> str:
    """Left-aligned columns separated by three spaces (the header line sized in even when hidden)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [list(headers), *map(list, rows)][1 if no_headers else 0 :]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def document(objects: Sequence[Obj], *, single: bool = False) -> Obj:
    """The object itself when ``single``, else a kubectl ``List`` of them."""
    if single and len(objects) == 1:
        return objects[0]
    return {"apiVersion": "v1", "kind": "List", "items": list(objects), "metadata": {"resourceVersion": ""}}


def json_text(doc: Any) -> str:
    """Indented JSON, non-ASCII kept but control characters (a Node's kubelet may write them into
    what is printed) as ``\\uNNNN`` escapes: the terminal never acts on them, the JSON stays valid."""
    return json_escape_controls(json.dumps(doc, indent=4, ensure_ascii=False))


def yaml_text(doc: Any) -> str:
    import yaml  # noqa: PLC0415 - only -o yaml needs it

    # allow_unicode=False: everything but printable ASCII is written as a double-quoted escape.
    return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=False)).rstrip("\n")


def names(objects: Sequence[Obj], resource: str) -> str:
    """One line per object, each name once (``get nodes`` has a row per Node and profile)."""
    return "\n".join(dict.fromkeys(f"{resource}/{o.get('metadata', {}).get('name', '')}" for o in objects))


@dataclass
class View:
    """What one get/describe has to print, in every form."""

    resource: str
    """``<plural-less kind>.<group>`` as kubectl names it for ``-o name`` (``node`` for the core group)."""
    objects: list[Obj]
    """What ``-o json|yaml|name`` print."""
    headers: Sequence[str] = ()
    rows: list[list[str]] = field(default_factory=list)
    wide_headers: Sequence[str] = ()
    """Columns appended with ``-o wide``."""
    wide_rows: list[list[str]] = field(default_factory=list)
    """Per row, the cells of ``wide_headers`` (same order as ``rows``)."""
    text: str | None = None
    """A describe's text (printed instead of a table for the default and wide forms)."""
    empty: str = "No resources found."
    """Printed (on stderr, as kubectl does) for the default forms when there is nothing."""
    single: bool = False
    """One object (describe, get NAME): json/yaml print it bare, not as a List."""


def render(view: View, output: str | None, *, no_headers: bool = False) -> tuple[str, str]:
    """(stdout text, stderr text) for ``view`` printed as ``output`` (None: table or text)."""
    if output == "json":
        return json_text(document(view.objects, single=view.single)), ""
    if output == "yaml":
        return yaml_text(document(view.objects, single=view.single)), ""
    if output == "name":
        return names(view.objects, view.resource), ""
    if view.text is not None:
        return view.text, ""
    if not view.rows:
        return "", view.empty
    if output == "wide":
        headers = [*view.headers, *view.wide_headers]
        rows = [[*r, *w] for r, w in zip(view.rows, view.wide_rows, strict=True)]
        return table(headers, rows, no_headers=no_headers), ""
    return table(view.headers, view.rows, no_headers=no_headers), ""


def emit(view: View, args: argparse.Namespace) -> None:
    """Print ``view`` as the command line asked (``args.output``, ``args.no_headers``)."""
    import sys  # noqa: PLC0415

    out, err = render(view, getattr(args, "output", None), no_headers=getattr(args, "no_headers", False))
    if out:
        print(out)
    if err:
        print(err, file=sys.stderr)
