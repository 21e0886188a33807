"""How the demo prints: ``rich`` on a terminal, plain text otherwise (tests, CI, pipes, ``--plain``).

Every section is built as :class:`Table` values and lines of text first, then handed to an :class:`Output`,
so both renderings print the same figures. ``rich`` is imported only here, and only when stdout is a TTY:
``import reasonstate`` never loads it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

import attrs

__all__ = ["Output", "PlainOutput", "RichOutput", "Table", "make_output"]


@attrs.frozen
class Table:
    """A titled table: the header names each column with its unit; ``reading`` is printed under it."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    reading: tuple[str, ...] = ()
    #: how many leading columns are labels (left-aligned); the rest are figures (right-aligned)
    labels: int = 1

    def plain(self) -> str:
        widths = [max(len(r[i]) for r in (self.header, *self.rows)) for i in range(len(self.header))]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(
                c.ljust(w) if i < self.labels else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        lines = [self.title, line(self.header), line(["-" * w for w in widths])]
        lines += [line(r) for r in self.rows]
        lines += [f"> {r}" for r in self.reading]
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
        self._print(f"== {text} " + "=" * max(0, 100 - len(text)))
        self._print()

    def text(self, *lines: str) -> None:
        for line in lines:
            self._print(line)

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
