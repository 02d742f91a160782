"""signalctl/terminal.py: control characters in text others wrote are shown, never obeyed."""

import io

import pytest

from signalctl.terminal import SafeStream, escape_controls


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("plain text, ünïcode, 証明", "plain text, ünïcode, 証明", id="printable kept"),
        pytest.param("two\nlines\tand a tab", "two\nlines\tand a tab", id="newline and tab kept"),
        pytest.param("\x1b[2Jcleared", "\\x1b[2Jcleared", id="CSI clear screen"),
        pytest.param("\x1b]52;c;cGF5bG9hZA==\x07", "\\x1b]52;c;cGF5bG9hZA==\\x07", id="OSC 52 clipboard"),
        pytest.param("Fail\rPass", "Fail\\x0dPass", id="carriage return overwrites"),
        pytest.param("a\x08b\x7f", "a\\x08b\\x7f", id="backspace and DEL"),
        pytest.param("\x9b31m", "\\x9b31m", id="C1 CSI"),
        pytest.param("\x00", "\\x00", id="NUL"),
        pytest.param("Pass\u202eliaF", "Pass\\u202eliaF", id="right-to-left override"),
        pytest.param("a\u2028b", "a\\u2028b", id="line separator"),
    ],
)
def test_escape_controls(text: str, shown: str) -> None:
    assert escape_controls(text) == shown


def test_the_stream_escapes_what_is_printed() -> None:
    sink = io.StringIO()
    print("run \x1b[8mhidden\x1b[0m", file=SafeStream(sink))  # type: ignore[arg-type]
    assert sink.getvalue() == "run \\x1b[8mhidden\\x1b[0m\n"
