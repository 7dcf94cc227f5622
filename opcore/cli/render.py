"""Text output for the CLI: colour (only on a terminal, never with NO_COLOR), tables, durations.

>>> Style(False).bad("failed"), format_seconds(0.0000123)
('failed', '12.3 µs')
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["Style", "dumps_json", "format_seconds", "style_for", "table", "visible_len"]

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


class Style:
    """Wraps text in ANSI colours when enabled; a disabled Style returns text unchanged."""

    __slots__ = ("enabled",)

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def paint(self, text: str, *names: str) -> str:
        if not self.enabled or not text:
            return text
        codes = ";".join(_CODES[n] for n in names)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def good(self, text: str) -> str:
        return self.paint(text, "green")

    def warn(self, text: str) -> str:
        return self.paint(text, "yellow")

    def bad(self, text: str) -> str:
        return self.paint(text, "red", "bold")

    def dim(self, text: str) -> str:
        return self.paint(text, "dim")

    def head(self, text: str) -> str:
        return self.paint(text, "bold")


def style_for(stream: TextIO, choice: str = "auto") -> Style:
    """Colour for ``stream``: "always", "never", or "auto" (a terminal, and NO_COLOR unset).

    >>> style_for(io.StringIO()).enabled   # doctest: +SKIP
    False
    """
    if choice == "always":
        return Style(True)
    if choice == "never" or os.environ.get("NO_COLOR"):  # https://no-color.org: any non-empty value
        return Style(False)
    isatty = getattr(stream, "isatty", None)
    return Style(bool(isatty and isatty()) and os.environ.get("TERM") != "dumb")


def visible_len(text: str) -> int:
    """Length without ANSI escape sequences (for aligning coloured cells)."""
    length, inside = 0, False
    for char in text:
        if char == "\x1b":
            inside = True
        elif inside:
            inside = char != "m"
        else:
            length += 1
    return length


def table(rows: Sequence[Sequence[str]], indent: str = "  ", header: bool = True, style: Style | None = None) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded.

    >>> print(table([("a", "b"), ("ccc", "d")], indent=""))
    a    b
    ccc  d
    """
    if not rows:
        return ""
    count = max(len(r) for r in rows)
    # a row's last cell is never padded, so it does not widen its column (a long note stays on its row)
    widths = [max((visible_len(r[i]) for r in rows if i < len(r) - 1), default=0) for i in range(count)]
    lines = []
    for n, row in enumerate(rows):
        cells = []
        for i, cell in enumerate(row):
            pad = "" if i == len(row) - 1 else " " * (widths[i] - visible_len(cell))
            cells.append(cell + pad)
        line = indent + "  ".join(cells)
        if header and n == 0 and style is not None:
            line = style.dim(line)
        lines.append(line.rstrip())
    return "\n".join(lines)


def format_seconds(seconds: float | None) -> str:
    """A duration with a unit that keeps three significant digits.

    >>> format_seconds(0.0042), format_seconds(2.5e-8)
    ('4.20 ms', '25.0 ns')
    """
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            value = seconds / scale
            digits = 0 if value >= 100 else 1 if value >= 10 else 2
            return f"{value:.{digits}f} {unit}"
    raise AssertionError("unreachable")


def dumps_json(data: Any) -> str:
    """The CLI's JSON: indented, keys in the documented order, non-ASCII kept."""
    return json.dumps(data, indent=2, ensure_ascii=False)


def write(text: str, stream: TextIO | None = None) -> None:
    """Print text with a final newline (stdout by default)."""
    stream = stream or sys.stdout
    stream.write(text if text.endswith("\n") else text + "\n")
