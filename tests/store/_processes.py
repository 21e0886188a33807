"""Where the store tests' worker processes come from: a ``forkserver`` that imported the heavy modules once.

``spawn`` started a fresh interpreter per worker, which imported anthropic and reasonstate again (seconds
of CPU each, four workers per test). A forkserver child is as separate from the test process as a spawned
one: the server is a fresh interpreter, started before it holds any store, connection, emulator or thread
of the test, and each worker is forked from it, so it shares nothing with the test but the store's server.
One server serves every test of a pytest process; its preload list is the one given when it first starts
(tests/store/test_fleet.py starts it with its own list, also importing anthropic and reasonstate)."""

from __future__ import annotations

import multiprocessing
from typing import Any

__all__ = ["PRELOAD", "worker_context"]

#: imported in the server; a missing optional driver is skipped by multiprocessing (ImportError ignored)
PRELOAD = [
    "anthropic",
    "reasonstate",
    "reasonstate.store.postgres",
    "reasonstate.store.redis",
    "tests.store._peer_worker",
    "tests.store._racer",
]


def worker_context() -> Any:
    """The multiprocessing context of the store tests' worker processes (forkserver, preloaded)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context
