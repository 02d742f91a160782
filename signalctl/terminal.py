"""What signalctl writes to a terminal: text with its control characters escaped. Pure but for
``install``.

Much of what signalctl prints is written by parties it must not trust: Node annotations and
labels (the Node's kubelet), Events (any component that may create them), reasons and messages
of Runs. A terminal acts on escape sequences in that text (ESC ``[2J`` clears the screen, OSC 52
writes the clipboard, a carriage return overwrites the line shown), so an attacker could hide
or fake what an operator reads. Every character of the C0 and C1 control ranges (and DEL),
except newline and tab, is written as a visible ``\\xNN`` / ``\\uNNNN`` escape instead.
"""

import re
import sys
from typing import TextIO

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""C0 (but newline and tab), DEL, C1, the Unicode line/paragraph separators and the
bidirectional overrides and isolates (which reorder what a terminal shows)."""


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with every control character written as a visible escape."""
    return _CONTROL.sub(_escaped, text)


def json_escape_controls(text: str) -> str:
    """JSON ``text`` with the same characters written as JSON's own ``\\uNNNN`` escapes (they can
    only occur inside its strings), so that what is printed stays valid JSON with the same value."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class SafeStream:
    """A text stream that escapes control characters in whatever is written to it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(escape_controls(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return self._stream.encoding


def install() -> None:
    """Escape control characters in everything signalctl prints from here on."""
    if not isinstance(sys.stdout, SafeStream):
        sys.stdout = SafeStream(sys.stdout)
    if not isinstance(sys.stderr, SafeStream):
        sys.stderr = SafeStream(sys.stderr)
