"""What one worker of tests/store/test_peer_issues.py's concurrent tests runs, in a thread or in a
process forked from the preloaded forkserver of tests/store/_processes.py (so it stays light: no pytest):
load a session, send its messages, and on a :class:`~reasonstate.errors.SessionConflict` reload and send
again, reporting every outcome."""

from __future__ import annotations

from typing import Any

import anthropic

import reasonstate as rs
from reasonstate.errors import SessionConflict
from tests.store.backends import open_spec


def serve(
    spec: tuple[str, str, dict[str, Any]],
    base_url: str,
    session_id: str,
    worker: int,
    messages: int,
    barrier: Any,
    results: Any,
) -> None:
    """Load ``session_id``, wait at ``barrier`` (every worker then holds the same version), send
    ``messages`` messages; put ``("won", worker, text, version)`` or ``("conflict", worker, text,
    expected, found, reply text, text in the stale object's history)`` on ``results`` for each attempt."""
    store = open_spec(spec)
    client = anthropic.Anthropic(base_url=base_url, api_key="test-key", max_retries=0)
    try:
        session = rs.Session.load(store, session_id, client)
        barrier.wait(timeout=120)
        j = 0
        while j < messages:
            text = f"worker {worker} message {j}"
            try:
                session.send(text)
            except SessionConflict as exc:
                reply = exc.reply
                results.put(
                    (
                        "conflict",
                        worker,
                        text,
                        exc.expected,
                        exc.found,
                        reply.text if isinstance(reply, rs.Reply) else None,
                        session.history.turns[-1].user == text,
                    )
                )
                session = rs.Session.load(store, session_id, client)
                continue
            results.put(("won", worker, text, session.version))
            j += 1
    finally:
        store.close()
