"""How the demo prints: ``rich`` on a terminal, plain text otherwise (tests, CI, pipes, ``--plain``).

Every section is built as :class:`Table` values and lines of text first, then handed to an :class:`Output`,
so both renderings print the same figures. ``rich`` is imported only here, and only when stdout is a TTY:
``import reasonstate`` never loads it.

Plain text fits :data:`WIDTH` columns (a pipe, a log, a CI page): paragraphs wrap at word boundaries, a
table's headers wrap onto several lines and its widest text columns wrap their cells, so no printed line is
wider than :data:`WIDTH` unless a single word is.
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

import attrs

__all__ = ["WIDTH", "Output", "PlainOutput", "RichOutput", "Table", "make_output", "wrap"]

WIDTH = 100
"""The widest line the plain-text output prints (words longer than that excepted)."""

_GAP = 2  # spaces between two table columns


def wrap(line: str, width: int = WIDTH) -> list[str]:
    """``line`` wrapped at word boundaries to ``width`` columns; a ``> `` reading or a ``- `` item keeps its
    continuation lines indented under its text. An empty line stays one empty line."""
    if len(line) <= width:
        return [line]
    indent = "  " if line.startswith(("> ", "- ")) else ""
    return textwrap.wrap(
        line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


def _cell(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


@attrs.frozen
class Table:
    """A titled table: the header names each column with its unit; ``reading`` is printed under it."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    reading: tuple[str, ...] = ()
    #: how many leading columns are labels (left-aligned); the rest are figures (right-aligned)
    labels: int = 1

    def plain(self, width: int = WIDTH) -> str:
        """The table as text no wider than ``width`` (unless its longest words alone are): while it is too
        wide, the widest column that can still wrap gives up one character, first down to its longest cell
        (only headers wrap), then down to its longest word (text cells wrap onto several lines)."""
        cells = (self.header, *self.rows)
        n = len(self.header)
        widths = [max(len(c[i]) for c in cells) for i in range(n)]
        # first the headers wrap (no cell does), then the cells of the widest text columns; columns one
        # space apart when even their longest words do not fit two apart
        floor = [max(_longest_word(c[i]) for c in cells) for i in range(n)]
        gap = _GAP if sum(floor) + _GAP * (n - 1) <= width else 1
        for floors in (
            [max(_longest_word(self.header[i]), *(len(r[i]) for r in self.rows)) for i in range(n)],
            floor,
        ):
            while sum(widths) + gap * (n - 1) > width:
                wrappable = [i for i in range(n) if widths[i] > floors[i]]
                if not wrappable:
                    break
                widths[max(wrappable, key=lambda i: widths[i])] -= 1

        def block(row: Sequence[str]) -> list[str]:
            parts = [_cell(c, w) or [""] for c, w in zip(row, widths, strict=True)]
            height = max(len(p) for p in parts)
            lines = []
            for k in range(height):
                line = []
                for i, (p, w) in enumerate(zip(parts, widths, strict=True)):
                    c = p[k] if k < len(p) else ""
                    line.append(c.rjust(w) if i >= self.labels else c.ljust(w))
                lines.append((" " * gap).join(line).rstrip())
            return lines

        # a wrapped header is bottom-aligned, so each column's unit sits right above the rule
        parts = [_cell(h, w) for h, w in zip(self.header, widths, strict=True)]
        depth = max(len(p) for p in parts)
        head = []
        for k in range(depth):
            line = []
            for i, (p, w) in enumerate(zip(parts, widths, strict=True)):
                j = k - (depth - len(p))
                c = p[j] if j >= 0 else ""
                line.append(c.rjust(w) if i >= self.labels else c.ljust(w))
            head.append((" " * gap).join(line).rstrip())
        lines = [*wrap(self.title, width), *head, (" " * gap).join("-" * w for w in widths)]
        for row in self.rows:
            lines += block(row)
        for reading in self.reading:
            lines += wrap(f"> {reading}", width)
        return "\n".join(lines)


class Output:
    """Where the demo writes: headings, paragraphs, tables and a progress indicator."""

    def heading(self, text: str) -> None:
        raise NotImplementedError

    def text(self, *lines: str) -> None:
        raise NotImplementedError

    def table(self, table: Table) -> None:
        raise NotImplementedError

    def status(self, message: str) -> contextlib.AbstractContextManager[None]:
        """Shown while something slow runs (a spinner on a terminal; nothing in plain text)."""
        return contextlib.nullcontext()


class PlainOutput(Output):
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def _print(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def heading(self, text: str) -> None:
        self._print()
        self._print(f"== {text} " + "=" * max(0, WIDTH - 4 - len(text)))
        self._print()

    def text(self, *lines: str) -> None:
        for line in lines:
            for part in wrap(line):
                self._print(part)

    def table(self, table: Table) -> None:
        self._print(table.plain())
        self._print()


class RichOutput(Output):
    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console

        self.console = Console(file=stream, highlight=False)

    def heading(self, text: str) -> None:
        self.console.print()
        self.console.rule(f"[bold]{_escape(text)}")

    def text(self, *lines: str) -> None:
        for line in lines:
            self.console.print(_escape(line))

    def table(self, table: Table) -> None:
        from rich import box
        from rich.table import Table as RichTable

        out = RichTable(
            title=_escape(table.title),
            title_justify="left",
            title_style="bold",
            caption="\n".join(_escape(r) for r in table.reading) or None,
            caption_justify="left",
            caption_style="italic",
            box=box.SIMPLE_HEAD,
        )
        for i, name in enumerate(table.header):
            out.add_column(_escape(name), justify="left" if i < table.labels else "right", overflow="fold")
        for row in table.rows:
            out.add_row(*(_escape(c) for c in row))
        self.console.print(out)

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        with self.console.status(_escape(message)):
            yield


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def make_output(stream: TextIO | None = None, *, plain: bool = False) -> Output:
    """Rich output when ``stream`` (default stdout) is a terminal and ``rich`` is installed, else plain."""
    stream = sys.stdout if stream is None else stream
    if not plain and _isatty(stream):
        try:
            return RichOutput(stream)
        except ImportError:  # pragma: no cover - rich is a dependency; a stripped install still works
            pass
    return PlainOutput(stream)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
