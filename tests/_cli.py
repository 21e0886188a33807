"""The ``reasonstate`` command run in this process: ``reasonstate.cli.main`` on an argument list, its
standard output and error captured, as a :class:`subprocess.CompletedProcess` (the shape the tests read).

A subprocess pays ~1 s of interpreter start and imports per call, most of a CLI test's time; ``main`` is what
the console script and ``python -m reasonstate.cli`` call, so running it here tests the same code. The
entry points themselves (the console script, ``-m``) keep a subprocess test each (tests/test_cli.py,
tests/store/test_store_cli.py)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from reasonstate.cli import main


@contextlib.contextmanager
def _cwd(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def run_main(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``reasonstate ARGS`` in this process (in ``cwd`` when given): its exit status and captured output."""
    out, err = io.StringIO(), io.StringIO()
    with _cwd(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(["reasonstate", *args], code, out.getvalue(), err.getvalue())
