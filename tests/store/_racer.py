"""What each process of a multi-process race runs (a worker of tests/store/_processes.py's forkserver, which
preloads this module, so it stays light: no pytest, only the store)."""

from __future__ import annotations

import importlib
from typing import Any

from reasonstate.errors import SessionConflict
from reasonstate.store import Entry


def race(store_class: str, url: str, options: dict[str, Any], i: int, barrier: Any, results: Any) -> None:
    """Open ``store_class`` (``module:Name``) on ``url``, wait for the others, append on version 1, and put
    ``(i, "won")`` or ``(i, "conflict <found>")`` on ``results``."""
    module, name = store_class.split(":")
    store = getattr(importlib.import_module(module), name)(url, **options)
    try:
        barrier.wait(timeout=120)
        try:
            store.append(
                "race", 1, [Entry(2, "delta", f"process {i}".encode()), Entry(3, "delta", b"delta 3")]
            )
            results.put((i, "won"))
        except SessionConflict as exc:
            results.put((i, f"conflict {exc.found}"))
    finally:
        store.close()
