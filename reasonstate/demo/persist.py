"""The demo's persistence part: the travel-desk job kept in the embedded store (``SQLiteStore``, a file in a
temporary folder) while three workers take its turns in turn, each with its own store handle (as separate
processes would open it), on the Anthropic emulator. Every function returns data; printing is
:mod:`reasonstate.demo.sections`."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import attrs

import reasonstate as rs
from reasonstate.demo import job
from reasonstate.demo.render import Table
from reasonstate.store import SQLiteStore

__all__ = ["PersistRun", "persist_table", "run_persisted"]

WORKERS = 3
TURNS = 6


@attrs.frozen
class PersistRun:
    """Per turn: the worker that served it, the session's version after it, the entry kinds it wrote and
    their bytes; then whether a stale worker was refused, and whether the last load's next request equals
    the never-stopped session's byte for byte."""

    rows: tuple[tuple[str, ...], ...]
    conflict_refused: bool
    paid_reply_kept: bool
    next_request_equal: bool
    stored_bytes: int
    received_bytes: int


def run_persisted() -> PersistRun:
    from reasonstate.testing.anthropic import AnthropicEmulator

    asked = job.questions()[:TURNS]
    with tempfile.TemporaryDirectory() as folder, AnthropicEmulator(job.scripted_actions()) as emu:
        path = Path(folder) / "sessions.db"
        received = [0]

        def count(payload: dict[str, Any]) -> dict[str, Any]:
            received[0] += len(json.dumps(payload))
            return payload

        emu.transform = count
        options: dict[str, Any] = {
            "system": job.SYSTEM,
            "tools": job.TOOLS,
            "max_tokens": 4096,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
        }
        first = rs.Session(
            emu.client(), model=job.MODEL, store=SQLiteStore(path), session_id="desk-1", **options
        )
        rows: list[tuple[str, ...]] = []
        session = first
        for turn, text in enumerate(asked):
            worker = turn % WORKERS
            if turn:
                session = rs.Session.load(SQLiteStore(path), "desk-1", emu.client(), tools=job.TOOLS)
            before = session.version
            session.run(text)
            entries = SQLiteStore(path).read("desk-1")
            written = [e for e in entries if e.seq > before] or entries[-1:]
            rows.append(
                (
                    f"worker {worker + 1}",
                    str(turn + 1),
                    str(session.version),
                    ", ".join(sorted({e.kind for e in written})),
                    f"{sum(len(e.body) for e in written):,}",
                )
            )
        stale = first  # worker 1's object from turn 1: five commits behind
        refused = kept = False
        try:
            stale.send("One more question from a stale worker.")
        except rs.SessionConflict as exc:
            refused, kept = True, isinstance(exc.reply, rs.Reply)
        loaded = rs.Session.load(SQLiteStore(path), "desk-1", emu.client(), tools=job.TOOLS)
        probe = "And the weather in Oslo?"
        equal = json.dumps(loaded.next_request(probe).kwargs) == json.dumps(
            session.next_request(probe).kwargs
        )
        stored = sum(len(e.body) for e in SQLiteStore(path)._read("desk-1"))
        return PersistRun(tuple(rows), refused, kept, equal, stored, received[0])


def persist_table(run: PersistRun) -> Table:
    return Table(
        f"One session, {TURNS} turns, {WORKERS} workers taking turns through one SQLite file",
        ("turn served by", "turn (#)", "version after (entries)", "entries written", "bytes written (B)"),
        run.rows,
        reading=(
            "a stale worker's send: "
            + ("refused with SessionConflict" if run.conflict_refused else "NOT refused")
            + (", its paid reply on the error" if run.paid_reply_kept else "")
            + "; a load's next request equals the never-stopped session's: "
            + ("yes" if run.next_request_equal else "NO")
            + f"; stored {run.stored_bytes:,} B for {run.received_bytes:,} B received from the vendor.",
        ),
        labels=1,
    )
